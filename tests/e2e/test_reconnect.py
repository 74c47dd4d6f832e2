"""daphne dies mid-investigation: the page reconnects to the new one and catches up.

The worker keeps streaming into the database while no web process is up; the browser,
never reloaded, must end up with exactly the text that was streamed — nothing missing,
nothing doubled — and the same timeline a fresh render shows.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.harness import deployment, launch_browser, log_in

pytestmark = pytest.mark.e2e

WORDS = [f"w{n:03d}" for n in range(1, 401)]

STREAMED_TEXT = """() => {
  const item = document.querySelector('#timeline .item.llm_thinking');
  return item ? item.querySelector('.text').textContent.trim() : '';
}"""


def test_a_crashed_web_process_loses_nothing_on_the_page(tmp_path, playwright):
    script = tmp_path / "slow-script.json"
    script.write_text(
        json.dumps(
            {
                "chunk_delay": 0.05,  # ~20 s of thinking: the crash lands mid-stream even under load
                "turns": [{"thinking": " ".join(WORDS), "text": "Done: nothing is broken."}],
            }
        )
    )
    provider = {
        "name": "slow",
        "type": "scripted",
        "model": "slow",
        "options": {"script": str(script)},
        "is_default": True,
    }
    with deployment(tmp_path, provider=provider) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            page.goto(f"{tarsy.base_url}/sessions/new/")
            page.fill("#id_data", "namespace: payments")
            page.click("#alert-form button[type=submit]")
            page.wait_for_url("**/sessions/*/")
            page.wait_for_function(f"({STREAMED_TEXT})().split(' ').length >= 20", timeout=30_000)

            tarsy.crash_and_restart("daphne")

            # The page notices, reconnects by itself, and the stream carries on.
            page.wait_for_selector('#live-state[data-state="live"]', timeout=30_000)
            page.wait_for_function(f"({STREAMED_TEXT})().split(' ').length >= 60", timeout=30_000)
            mid_stream = page.evaluate(STREAMED_TEXT).split()
            assert mid_stream == WORDS[: len(mid_stream)]  # in order, none lost or doubled
            assert page.locator("#session-status").get_attribute("data-status") == "in_progress"

            page.wait_for_selector('#session-status[data-status="completed"]', timeout=60_000)
            page.wait_for_selector("#timeline .item.final_analysis")
            live_timeline = page.inner_text("#timeline")
            page.reload()
            page.wait_for_selector("#timeline .item.final_analysis")
            assert page.inner_text("#timeline") == live_timeline
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
