"""Scoring in the browser: the deep demo chain scores each completed session on a
worker; the session page's badge and Scoring section follow it live, without a reload.
Real daphne, qcluster and Chromium on the scripted demo."""

from __future__ import annotations

import pytest

from tests.e2e.harness import demo_provider, deployment, launch_browser, log_in, submit_alert

pytestmark = pytest.mark.e2e


def test_a_completed_deep_demo_is_scored_live_and_can_be_rescored(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider(chunk_delay=0.01)) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            submit_alert(page, tarsy.base_url, "DeepInvestigation")
            page.wait_for_selector('#live-state[data-state="live"]', timeout=30_000)
            page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)
            # No reload from here on: the worker's scoring reaches the page live.
            badge = page.wait_for_selector(
                '#score-badge[data-score-status="completed"]', timeout=60_000
            )
            score = int(badge.get_attribute("data-score"))
            assert 60 <= score <= 100
            assert "score-high" in badge.get_attribute("class") or score < 80
            assert page.is_visible("#score-analysis")
            assert "Reflection" not in page.inner_text("#timeline")

            page.click("#rescore button")
            # History shows once the new score exists; a total beside it once it is done.
            page.wait_for_function(
                "() => document.querySelector('#score-history')"
                " && document.querySelector('#scoring .score-total')",
                timeout=60_000,
            )
            assert "Earlier scores (1)" in page.inner_text("#score-history summary")

            page.goto(tarsy.base_url + "/")
            row_badge = page.wait_for_selector(".badge.score", timeout=10_000)
            assert row_badge.get_attribute("data-score-status") == "completed"
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
