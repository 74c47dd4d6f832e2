"""Chains in the browser: the deep demo's two agents stream side by side, then the
synthesis and the executive summary appear; Cancel stops a running investigation and
keeps what it had said. Real daphne, qcluster and Chromium on the scripted demo."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import (
    demo_provider,
    deployment,
    launch_browser,
    log_in,
    normalized,
    submit_alert,
)

pytestmark = pytest.mark.e2e

DEMO = demo_provider(chunk_delay=0.04)

# Both agents of the parallel stage have text streaming at this moment, while the
# stage is still running: they investigate side by side, live.
BOTH_STREAMING = """() => {
  const stage = document.querySelector('.stage[data-stage-type="investigation"]');
  if (!stage) return null;
  const header = stage.querySelector('.stage-header');
  if (!header || header.dataset.status !== 'active') return null;
  const cards = [...stage.querySelectorAll('.execution')];
  const streaming = cards.filter(card =>
    [...card.querySelectorAll('.item[data-status="streaming"]')]
      .some(item => item.textContent.trim().length > 10));
  return cards.length === 2 && streaming.length === 2
    ? cards.map(card => card.dataset.agent) : null;
}"""


def submit(page, base_url: str, alert_type: str) -> None:
    submit_alert(page, base_url, alert_type)
    page.wait_for_selector('#live-state[data-state="live"]', timeout=30_000)


def test_the_deep_demo_streams_two_agents_then_synthesis_and_summary(tmp_path, playwright):
    with deployment(tmp_path, provider=DEMO) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            submit(page, tarsy.base_url, "DeepInvestigation")
            agents = page.wait_for_function(BOTH_STREAMING, timeout=60_000, polling=50)
            assert agents.json_value() == ["WorkloadAgent", "ChangeAgent"]

            page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)
            stages = page.locator("#stages .stage")
            assert stages.evaluate_all("s => s.map(x => x.dataset.stageType)") == [
                "investigation",
                "synthesis",
                "exec_summary",
            ]
            synthesis = page.text_content(
                '.stage[data-stage-type="synthesis"] .item.final_analysis'
            )
            assert "WorkloadAgent" in synthesis
            assert "ChangeAgent" in synthesis
            summary = page.text_content("#executive-summary")
            assert "payments-api" in summary
            # The summary sits at the top: the header comes before the timeline.
            assert page.evaluate(
                "document.querySelector('#executive-summary').compareDocumentPosition("
                "document.querySelector('#timeline')) & Node.DOCUMENT_POSITION_FOLLOWING"
            )

            live = page.inner_html("#timeline")
            page.reload()
            page.wait_for_selector("#executive-summary")
            assert normalized(page.inner_html("#timeline")) == normalized(live)
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()


def test_cancel_stops_a_running_investigation_and_keeps_what_it_said(tmp_path, playwright):
    slow = demo_provider(chunk_delay=0.15)
    env = {"TARSY_LEASE_CHECK_INTERVAL": "0.5"}
    with deployment(tmp_path, provider=slow, extra_env=env) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        try:
            log_in(page, tarsy.base_url)
            submit(page, tarsy.base_url, "PodCrashLooping")
            page.wait_for_function(
                """() => [...document.querySelectorAll('.item[data-status="streaming"]')]
                     .some(item => item.textContent.trim().length > 20)""",
                timeout=60_000,
                polling=50,
            )
            url = page.url
            page.fill("#cancel-session input[name=reason]", "wrong namespace")
            clicked = time.monotonic()
            page.click("#cancel-session button")
            page.wait_for_selector('#session-status[data-status="cancelled"]', timeout=10_000)
            seen_after = time.monotonic() - clicked
            assert page.url == url  # no reload, no navigation: the socket told the page

            kept = page.locator('.item[data-status="cancelled"]')
            assert kept.count() >= 1
            assert len(kept.first.text_content().strip()) > 20  # what had streamed stays
            assert "Cancelled by sre: wrong namespace" in page.text_content("#cancel-attribution")
            assert page.locator('.item[data-status="streaming"]').count() == 0
            print(f"\nCancel clicked → page shows cancelled: {seen_after * 1000:.0f} ms")
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
