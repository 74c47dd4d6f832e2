"""The theme toggle in a real browser: a chosen dark theme survives a reload, the keyboard
can change it, and with no choice stored the page follows the system's preference."""

from __future__ import annotations

import pytest

from tests.e2e.harness import demo_provider, deployment, launch_browser, log_in

pytestmark = pytest.mark.e2e

DARK_BG = "rgb(17, 21, 31)"  # --bg of the dark theme
LIGHT_BG = "rgb(246, 247, 251)"  # --bg of the light theme

THEME = """() => ({
  theme: document.documentElement.getAttribute('data-theme'),
  background: getComputedStyle(document.body).backgroundColor,
})"""


def test_the_theme_toggle_and_the_system_preference(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider()) as tarsy:
        browser = launch_browser(playwright)
        try:
            page = browser.new_context(color_scheme="light").new_page()
            log_in(page, tarsy.base_url)
            page.goto(f"{tarsy.base_url}/system/")
            toggle = page.locator("#theme-toggle")
            assert page.evaluate(THEME) == {"theme": None, "background": LIGHT_BG}
            assert toggle.get_attribute("aria-label").startswith("Theme: system")

            toggle.click()
            assert page.evaluate(THEME) == {"theme": "dark", "background": DARK_BG}
            page.reload()
            assert page.evaluate(THEME) == {"theme": "dark", "background": DARK_BG}
            assert toggle.get_attribute("aria-label").startswith("Theme: dark")

            # From the keyboard: the button takes focus and Enter moves on to light.
            toggle.focus()
            page.keyboard.press("Enter")
            assert page.evaluate(THEME) == {"theme": "light", "background": LIGHT_BG}
            assert toggle.get_attribute("aria-label").startswith("Theme: light")

            # No stored choice, a system that prefers dark: dark, without any attribute.
            page = browser.new_context(color_scheme="dark").new_page()
            log_in(page, tarsy.base_url)
            assert page.evaluate(THEME) == {"theme": None, "background": DARK_BG}
            assert page.locator("#theme-toggle").get_attribute("data-mode") == "system"
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
