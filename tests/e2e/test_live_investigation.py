"""An SRE submits an alert in the browser and watches the investigation live."""

from __future__ import annotations

import pytest

from tests.e2e.harness import demo_provider, deployment, launch_browser, log_in

pytestmark = pytest.mark.e2e

DEMO_PROVIDER = demo_provider(chunk_delay=0.04)

ALERT = """alert: PodCrashLooping
namespace: payments
deployment: payments-api
message: payments-api pods keep restarting"""

STREAMING_TEXT_WHILE_RUNNING = """() => {
  const status = document.querySelector('#session-status');
  const streaming = [...document.querySelectorAll('#timeline .item[data-status="streaming"]')]
    .filter(item => item.textContent.trim().length > 20);
  return status && status.dataset.status !== 'completed' && streaming.length > 0
    ? streaming[0].textContent.trim() : null;
}"""


def test_an_alert_submitted_in_the_form_streams_live_to_its_final_analysis(tmp_path, playwright):
    with deployment(tmp_path, provider=DEMO_PROVIDER) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            assert "demo LLM provider" in page.text_content("#demo-banner")

            page.click("text=Submit alert")
            page.select_option("#id_alert_type", "PodCrashLooping")
            page.fill("#id_data", ALERT)
            page.click("#alert-form button[type=submit]")
            page.wait_for_url("**/sessions/*/")
            page.wait_for_selector('#live-state[data-state="live"]')

            # Text arrives while the session is still running: streamed, not loaded.
            streamed = page.wait_for_function(STREAMING_TEXT_WHILE_RUNNING, timeout=30_000)
            assert streamed.json_value()

            page.wait_for_selector('#session-status[data-status="completed"]', timeout=60_000)
            final = page.text_content("#timeline .item.final_analysis")
            assert "payments-api" in final
            assert "Root cause" in final

            tool_calls = page.locator("#timeline .item.llm_tool_call")
            assert tool_calls.count() >= 3
            names = " ".join(tool_calls.locator(".tool-name").all_text_contents())
            assert "kubernetes.get_pods" in names
            assert "kubernetes.get_pod_logs" in names
            assert page.locator('#timeline .item[data-status="streaming"]').count() == 0

            # What arrived live is exactly what a fresh render shows.
            live_timeline = page.inner_text("#timeline")
            page.reload()
            page.wait_for_selector("#timeline .item.final_analysis")
            assert page.inner_text("#timeline") == live_timeline

            # The session list shows it completed.
            page.goto(f"{tarsy.base_url}/")
            assert page.locator('#session-rows [data-status="completed"]').count() == 1
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
