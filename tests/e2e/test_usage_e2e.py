"""The usage page in the browser, after a real investigation on the scripted demo:
the chart and the table show the demo provider's tokens, and the grouping lives in
the URL. Real daphne, qcluster and Chromium."""

from __future__ import annotations

import re

import pytest

from tests.e2e.harness import (
    demo_provider,
    deployment,
    launch_browser,
    log_in,
    submit_alert,
)

pytestmark = pytest.mark.e2e

DEMO = demo_provider(chunk_delay=0)
# Total tokens is the sixth cell of a table row (after the group, calls, input, output
# and thinking).
TOTAL_TOKENS_CELL = 5


def total_tokens(page, group: str) -> int:
    row = page.locator(f'#usage-table tbody tr[data-group="{group}"]')
    return int(row.locator("th, td").nth(TOTAL_TOKENS_CELL).text_content())


def test_the_usage_page_shows_the_demo_investigations_tokens(tmp_path, playwright):
    with deployment(tmp_path, provider=DEMO) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            submit_alert(page, tarsy.base_url, "PodCrashLooping")
            page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)

            page.click("header.topbar nav >> text=Usage")
            page.wait_for_url(f"{tarsy.base_url}/usage/")
            assert page.locator("svg.usage-chart[role=img]").count() == 1
            assert page.get_attribute("svg.usage-chart", "aria-label") == "Total tokens per day"
            assert page.locator("svg.usage-chart rect.bar").count() == 7  # one per day

            page.select_option("#id_group", "provider")
            page.click("#usage-form button[type=submit]")
            page.wait_for_url(re.compile(r".*/usage/\?.*group=provider"))
            assert total_tokens(page, "demo") > 0
            assert "demo" in page.text_content("svg.usage-chart")

            page.select_option("#id_group", "model")
            page.click("#usage-form button[type=submit]")
            page.wait_for_url(re.compile(r".*/usage/\?.*group=model"))
            assert page.get_attribute("svg.usage-chart", "aria-label") == "Total tokens per model"
            assert total_tokens(page, "demo-investigator") > 0
            assert page.input_value("#id_group") == "model"
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
