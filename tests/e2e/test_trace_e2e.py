"""The trace page in the browser: after the demo investigation, an engineer opens the
trace, then one model call (its conversation loads on demand) and one tool call. Real
daphne, qcluster and Chromium on the scripted demo."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.harness import (
    DEMO_ALERT as ALERT,
)
from tests.e2e.harness import (
    demo_provider,
    deployment,
    launch_browser,
    log_in,
    submit_alert,
)

pytestmark = pytest.mark.e2e

DEMO = demo_provider(chunk_delay=0)


def _json(value):
    """A JSON column as read straight from the database: text on SQLite."""
    return json.loads(value) if isinstance(value, str) else value


def _status(tarsy, key: str) -> str:
    return tarsy.query("SELECT status FROM alert_sessions_alertsession WHERE id = %s", (key,))[0][0]


def _wait_until(condition, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not done in {timeout} s")
        time.sleep(0.2)


def test_the_trace_shows_what_the_model_received_and_the_tool_arguments(tmp_path, playwright):
    with deployment(tmp_path, provider=DEMO) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            session_id = submit_alert(page, tarsy.base_url, "PodCrashLooping")
            key = session_id.replace("-", "")
            # Read from the database, not the session page: this test is about the trace.
            _wait_until(lambda: _status(tarsy, key) in ("completed", "failed"), timeout=60)
            assert _status(tarsy, key) == "completed"

            page.goto(f"{tarsy.base_url}/sessions/{session_id}/trace/")

            # What the worker recorded as sent to the provider, read as an operator would.
            interaction_id, sent = tarsy.query(
                "SELECT i.id, i.request_messages FROM alert_sessions_llminteraction i "
                "JOIN alert_sessions_agentexecution e ON e.id = i.execution_id "
                "WHERE i.session_id = %s AND e.agent_name = 'KubernetesAgent' "
                "AND i.interaction_type = 'iteration' ORDER BY i.id LIMIT 1",
                (key,),
            )[0]
            system, user = _json(sent)[:2]
            assert system["role"] == "system"
            assert system["content"].startswith("You are KubernetesAgent, an agent of TARSy")
            assert user["role"] == "user"
            assert user["content"].startswith(f"## Alert\n\nType: PodCrashLooping\n\n{ALERT}")

            line = page.locator(f"#llm-{interaction_id}")
            assert line.locator(".trace-message").count() == 0  # not loaded until opened
            line.locator("summary").click()
            messages = line.locator(".trace-message")
            messages.first.wait_for(timeout=10_000)
            shown = [
                (
                    messages.nth(n).get_attribute("data-role"),
                    messages.nth(n).locator("pre.message-content").text_content(),
                )
                for n in range(2)
            ]
            assert shown == [("system", system["content"]), ("user", user["content"])]

            ((call_id, arguments),) = tarsy.query(
                "SELECT id, arguments FROM alert_sessions_mcpinteraction "
                "WHERE session_id = %s AND interaction_type = 'tool_call' "
                "AND tool_name = 'get_pods' ORDER BY id LIMIT 1",
                (key,),
            )
            assert _json(arguments)["namespace"] == "payments"
            call = page.locator(f"#mcp-{call_id}")
            assert "kubernetes.get_pods" in call.locator("summary").text_content()
            call.locator("summary").click()
            shown_arguments = call.locator("pre.arguments")
            shown_arguments.wait_for(state="visible")
            assert json.loads(shown_arguments.text_content()) == _json(arguments)
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
