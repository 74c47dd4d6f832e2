"""Follow-up chat in the browser: after the demo investigation ends, a question typed in
the chat box is answered live in the timeline (thinking, a tool call, the answer
streaming); the box waits for the answer, then takes the next question, which a
restarted worker answers from what the database holds. Real daphne, qcluster and
Chromium on the scripted demo provider."""

from __future__ import annotations

import json

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

CHAT_STAGE = '.stage[data-stage-type="chat"]'

# The answer's text streaming in the chat stage, word by word.
ANSWER_STREAMING = """() => [...document.querySelectorAll('.stage[data-stage-type="chat"] .item[data-status="streaming"]')]
  .some(item => item.textContent.trim().length > 20)"""


def ask(page, question: str) -> None:
    page.wait_for_selector("#chat-send:not([disabled])", timeout=30_000)
    page.fill("#chat-content", question)
    page.click("#chat-send")


def test_a_question_is_answered_live_and_a_restarted_worker_answers_the_next(tmp_path, playwright):
    with deployment(tmp_path, provider=demo_provider(chunk_delay=0.04)) as tarsy:
        browser = launch_browser(playwright)
        page = browser.new_page()
        try:
            log_in(page, tarsy.base_url)
            submit_alert(page, tarsy.base_url, "PodCrashLooping")
            page.wait_for_selector('#session-status[data-status="completed"]', timeout=90_000)
            url = page.url

            ask(page, "Why does payments-api keep restarting?")
            page.wait_for_selector(f"{CHAT_STAGE} .item.user_question", timeout=10_000)
            assert "Why does payments-api keep restarting?" in page.text_content(
                f"{CHAT_STAGE} .item.user_question"
            )
            assert page.is_disabled("#chat-send")  # one answer at a time
            page.wait_for_function(ANSWER_STREAMING, timeout=30_000, polling=50)
            answer = page.wait_for_selector(
                f"{CHAT_STAGE} .item.final_analysis", timeout=30_000
            ).text_content()
            assert "What the investigation found" in answer
            assert "CrashLoopBackOff" in answer  # it looked at the pods again
            tool = page.text_content(f"{CHAT_STAGE} .item.llm_tool_call .tool-name")
            assert tool == "kubernetes.get_pods"
            # The stage ends just after its answer: its header follows live.
            page.wait_for_selector(
                f'{CHAT_STAGE} .stage-header[data-status="completed"]', timeout=10_000
            )
            # The box takes the next question again, told by the socket.
            page.wait_for_selector("#chat-send:not([disabled])", timeout=5_000)
            assert page.url == url  # all of it arrived over the socket

            live = page.inner_html("#timeline")
            page.reload()
            page.wait_for_selector(f"{CHAT_STAGE} .item.final_analysis")
            assert normalized(page.inner_html("#timeline")) == normalized(live)

            tarsy.crash_and_restart("qcluster")
            ask(page, "And how do I fix it?")
            page.wait_for_function(
                f"document.querySelectorAll('{CHAT_STAGE} .item.final_analysis').length === 2",
                timeout=60_000,
            )
            # The new worker read the first turn from the database. (The second answer's
            # first call is the one stored whole: later ones store what they add.)
            (request,) = tarsy.query(
                "SELECT i.request_messages FROM alert_sessions_llminteraction i "
                "JOIN alert_sessions_agentexecution e ON e.id = i.execution_id "
                "WHERE e.agent_name = 'ChatAgent' AND i.extends_id IS NULL "
                "ORDER BY i.id DESC LIMIT 1"
            )[0]
            prompt = "\n".join(m["content"] for m in json.loads(request))
            assert "Why does payments-api keep restarting?" in prompt
            assert "**A1:** You asked:" in prompt
            assert "And how do I fix it?" in prompt
        except Exception:
            print(tarsy.log_tail())
            raise
        finally:
            browser.close()
