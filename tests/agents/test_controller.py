"""The iterating loop, with the scripted backend and the real demo MCP server (stdio)."""

from __future__ import annotations

import asyncio
import time

import pytest

from sessions import services
from sessions.models import (
    AlertSession,
    LLMInteraction,
    MCPInteraction,
    Message,
    SessionEvent,
    TimelineEvent,
)
from sessions.selectors.trace import request_messages
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

POD_CALL = {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}


def submit(data: str = "namespace: payments") -> AlertSession:
    return services.session_create(
        alert_type="kubernetes", alert_data=data, chain_id="kubernetes-investigation", author="t"
    )


def investigation_calls(session: AlertSession):
    """The agent's own LLM calls, without the executive summary that ends every session."""
    return LLMInteraction.objects.filter(session=session).exclude(
        interaction_type="executive_summary"
    )


def timeline(session: AlertSession) -> list[tuple[str, str]]:
    return [
        (e.event_type, e.status)
        for e in TimelineEvent.objects.filter(session=session)
        .exclude(stage__stage_type="exec_summary")
        .order_by("id")
    ]


def test_it_calls_tools_feeds_results_back_and_concludes(scripted_provider):
    scripted_provider(
        [
            {
                "thinking": "Check the pods first.",
                "text": "Listing pods.",
                "tool_calls": [POD_CALL],
            },
            {"thinking": "Enough evidence.", "text": "payments-api is crash-looping."},
        ]
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.status == "completed"
    assert session.final_analysis == "payments-api is crash-looping."
    assert timeline(session) == [
        ("llm_thinking", "completed"),
        ("llm_response", "completed"),
        ("llm_tool_call", "completed"),
        ("llm_thinking", "completed"),
        ("final_analysis", "completed"),
    ]
    tool_item = TimelineEvent.objects.get(session=session, event_type="llm_tool_call")
    assert tool_item.metadata["tool_name"] == "kubernetes.get_pods"
    assert tool_item.metadata["arguments"] == {"namespace": "payments"}
    assert "payments-api" in tool_item.content  # the real server's answer

    roles = list(
        Message.objects.filter(
            session=session, execution__stage__stage_type="investigation"
        ).values_list("role", flat=True)
    )
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assistant = Message.objects.filter(session=session, role="assistant").first()
    tool_message = Message.objects.get(session=session, role="tool")
    assert tool_message.tool_call_id == assistant.tool_calls[0]["id"]
    assert tool_message.content == tool_item.content

    interactions = list(investigation_calls(session))
    assert len(interactions) == 2
    # The second call saw the tool's result: the conversation is sent whole every turn.
    second = request_messages(interactions[1])
    assert second[: len(interactions[0].request_messages)] == interactions[0].request_messages
    assert second[-1]["role"] == "tool"
    assert second[-1]["content"] == tool_item.content
    assert interactions[0].tools
    assert "kubernetes.get_pods" in interactions[0].tools
    assert interactions[0].output_tokens > 0
    assert (
        MCPInteraction.objects.get(session=session, interaction_type="tool_call").tool_name
        == "get_pods"
    )
    listing = MCPInteraction.objects.get(
        session=session, interaction_type="tool_list", server_name="kubernetes"
    )
    assert "get_pod_logs" in listing.available_tools

    # Streamed chunks went through the event log (all but what was still gathered when
    # the item completed), and completion carried the full text.
    chunks = SessionEvent.objects.filter(session=session, type="stream.chunk")
    streamed = "".join(
        c.payload["delta"] for c in chunks if c.timeline_event_id == tool_item.id - 1
    )
    assert streamed
    assert "Listing pods.".startswith(streamed)
    statuses = [
        e.payload["status"]
        for e in SessionEvent.objects.filter(session=session, type="session.status")
    ]
    assert statuses == ["pending", "in_progress", "completed"]


def test_it_forces_a_conclusion_without_tools_at_max_iterations(scripted_provider, tarsy_config):
    tarsy_config(lambda config: config["defaults"].update(max_iterations=2))
    scripted_provider(
        [
            {"text": "one", "tool_calls": [POD_CALL]},
            {"text": "two", "tool_calls": [POD_CALL]},
            {"text": "Concluding from what I have.", "tool_calls": [POD_CALL]},
        ]
    )
    session = submit()
    run_session(str(session.id))
    session.refresh_from_db()
    assert session.status == "completed"
    assert session.final_analysis == "Concluding from what I have."
    last = investigation_calls(session).last()
    assert last.interaction_type == "forced_conclusion"
    assert last.tools == []  # no tools offered, so none could be called
    assert "limit of 2 investigation steps" in request_messages(last)[-1]["content"]
    assert TimelineEvent.objects.filter(session=session, event_type="llm_tool_call").count() == 2
    # TARSy's execution.progress phases, live only, in the order the agent went through them.
    progress = SessionEvent.objects.filter(session=session, type="execution.progress")
    assert all(event.transient for event in progress)
    assert [(e.payload["phase"], e.payload["message"]) for e in progress.order_by("id")] == [
        ("investigating", "Iteration 1/2"),
        ("gathering_info", "Calling kubernetes.get_pods"),
        ("investigating", "Iteration 2/2"),
        ("gathering_info", "Calling kubernetes.get_pods"),
        ("concluding", "Forcing conclusion after 2 iterations"),
    ]


def test_an_llm_error_fails_the_session_with_a_readable_item(scripted_provider):
    scripted_provider(
        [
            {
                "text": "Starting",
                "error": {"code": "rate_limit", "message": "slow down", "retryable": True},
            }
        ]
    )
    session = submit()
    assert run_session(str(session.id)) == "failed"
    session.refresh_from_db()
    error = TimelineEvent.objects.get(session=session, event_type="error")  # said once
    assert "LLM error [rate_limit] from provider 'scripted-test'" in error.content
    assert "slow down" in error.content
    assert "Stage 'investigation' failed" in session.error_message


def test_a_tool_error_is_shown_and_fed_back(scripted_provider):
    scripted_provider(
        [
            {
                "tool_calls": [
                    {"name": "kubernetes.get_pods", "arguments": {"namespace": "nowhere"}}
                ]
            },
            {"text": "The namespace does not exist."},
        ]
    )
    session = submit()
    run_session(str(session.id))
    item = TimelineEvent.objects.get(session=session, event_type="llm_tool_call")
    assert item.status == "failed"
    assert "nowhere" in item.content
    assert Message.objects.get(session=session, role="tool").content == item.content


def test_a_failing_provider_hands_over_to_the_fallback(
    scripted_provider, write_script, tarsy_config
):
    from llm.models import LLMProvider

    scripted_provider([{"text": "Start", "error": {"code": "auth_error", "message": "bad key"}}])
    LLMProvider.objects.create(
        name="backup",
        type="scripted",
        model="backup-model",
        options={"script": write_script([{"text": "Backup found the cause."}])},
    )
    tarsy_config(lambda config: config["defaults"].update(fallback_providers=["backup"]))
    session = submit()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.final_analysis == "Backup found the cause."
    fallback = TimelineEvent.objects.get(session=session, event_type="provider_fallback")
    assert "'scripted-test' (scripted, script) failed: bad key [auth_error]" in fallback.content
    assert "Continuing on 'backup' (scripted, backup-model)" in fallback.content
    assert (fallback.metadata["from_model"], fallback.metadata["to_model"]) == (
        "script",
        "backup-model",
    )
    execution = session.executions.get(stage__stage_type="investigation")
    assert (execution.llm_provider, execution.model_name) == ("backup", "backup-model")
    assert (execution.original_llm_provider, execution.original_model_name) == (
        "scripted-test",
        "script",
    )
    providers = list(investigation_calls(session).values_list("provider", "error_code"))
    assert providers == [("scripted-test", "auth_error"), ("backup", "")]


def test_an_agent_needing_native_tools_skips_a_fallback_that_is_not_google_native(
    scripted_provider, write_script, tarsy_config
):
    """TARSy's RequiresNativeTools: the scripted backup cannot run Gemini's native tools."""
    from llm.models import LLMProvider

    scripted_provider([{"error": {"code": "auth_error", "message": "bad key"}}])
    LLMProvider.objects.create(
        name="backup",
        type="scripted",
        model="backup-model",
        options={"script": write_script([{"text": "Backup found the cause."}])},
    )

    def change(config):
        config["defaults"].update(fallback_providers=["backup"])
        config["agents"]["KubernetesAgent"]["native_tools"] = {"google_search": True}

    tarsy_config(change)
    session = submit()
    assert run_session(str(session.id)) == "failed"
    assert not TimelineEvent.objects.filter(
        session=session, event_type="provider_fallback"
    ).exists()
    assert list(investigation_calls(session).values_list("provider", flat=True)) == [
        "scripted-test"
    ]


def test_without_a_fallback_the_error_ends_the_agent(scripted_provider, tarsy_config):
    tarsy_config(lambda config: config["defaults"].update(fallback_providers=["missing"]))
    scripted_provider([{"error": {"code": "server_error", "message": "503", "retryable": True}}])
    session = submit()
    assert run_session(str(session.id)) == "failed"
    assert not TimelineEvent.objects.filter(
        session=session, event_type="provider_fallback"
    ).exists()


def test_calls_are_priced_from_the_configured_rates(scripted_provider, tarsy_config):
    tarsy_config(
        lambda config: config.update(
            system={
                "cost_estimation": {
                    "model_rates": {"scr": {"input_per_million": 1.0, "output_per_million": 2.0}}
                }
            }
        )
    )
    scripted_provider([{"text": "one two three"}])
    session = submit()
    run_session(str(session.id))
    call = investigation_calls(session).get()
    expected = (call.input_tokens * 1.0 + call.output_tokens * 2.0) / 1_000_000
    assert call.output_tokens == 3
    assert float(call.estimated_cost_usd) == pytest.approx(expected, abs=1e-6)


def test_a_model_that_stalls_mid_stream_times_out(scripted_provider, settings):
    settings.TARSY_LLM_STALL_TIMEOUT = 0.3
    scripted_provider([{"text": "one two three", "chunk_delay": 1.0}])
    session = submit()
    started = time.monotonic()
    assert run_session(str(session.id)) == "failed"
    assert time.monotonic() - started < 5
    error = TimelineEvent.objects.get(session=session, event_type="error")
    assert "LLM error [timeout]" in error.content
    assert "the model sent nothing for 0.3 s" in error.content


def test_a_silent_model_times_out_before_its_first_delta(scripted_provider, settings):
    settings.TARSY_LLM_FIRST_CHUNK_TIMEOUT = 0.3
    scripted_provider([{"text": "late", "chunk_delay": 2.0}])
    session = submit()
    assert run_session(str(session.id)) == "failed"
    error = TimelineEvent.objects.get(session=session, event_type="error")
    assert "no response from the model within 0.3 s" in error.content
    assert LLMInteraction.objects.get(session=session).error_code == "timeout"


def test_a_session_timeout_mid_stream_keeps_the_partial_output(scripted_provider, settings):
    settings.TARSY_SESSION_TIMEOUT = 3
    words = [f"w{n}" for n in range(300)]  # 15 s of streaming: it cannot finish in time
    scripted_provider([{"thinking": " ".join(words), "chunk_delay": 0.05}])
    session = submit()
    started = time.monotonic()
    assert run_session(str(session.id)) == "timed_out"
    assert time.monotonic() - started < 10
    session.refresh_from_db()
    assert session.status == "timed_out"
    assert "exceeded its timeout of 3 s" in session.error_message
    thinking = TimelineEvent.objects.get(session=session, event_type="llm_thinking")
    assert thinking.status == "failed"
    streamed = thinking.content.split()
    assert 0 < len(streamed) < len(words)
    assert streamed == words[: len(streamed)]
    assert not TimelineEvent.objects.filter(session=session, status="streaming").exists()
    assert session.stages.get().status == "timed_out"


def test_an_interrupted_stream_keeps_the_text_it_had_not_written_yet(scripted_provider, settings):
    # Deltas are gathered for TARSY_STREAM_SAVE_INTERVAL before they are saved: with a
    # long one, all but the first word are still in the worker when the timeout hits.
    settings.TARSY_SESSION_TIMEOUT = 2
    settings.TARSY_STREAM_FLUSH_INTERVAL = 60
    settings.TARSY_STREAM_SAVE_INTERVAL = 60
    words = [f"w{n}" for n in range(300)]
    scripted_provider([{"thinking": " ".join(words), "chunk_delay": 0.05}])
    session = submit()
    assert run_session(str(session.id)) == "timed_out"
    thinking = TimelineEvent.objects.get(session=session, event_type="llm_thinking")
    streamed = thinking.content.split()
    assert len(streamed) > 5
    assert streamed == words[: len(streamed)]
    chunks = SessionEvent.objects.filter(session=session, type="stream.chunk")
    assert chunks.count() == 2  # the first word at once, the rest when interrupted


def test_secrets_in_tool_results_are_masked_everywhere(scripted_provider):
    secret_call = {
        "name": "kubernetes.get_secret",
        "arguments": {"namespace": "payments", "name": "payments-db-credentials"},
    }
    scripted_provider([{"tool_calls": [secret_call]}, {"text": "The secret has a password key."}])
    session = submit()
    assert run_session(str(session.id)) == "completed"
    raw = "ZGVtby1QZy1wYXNzdzByZC1ub3QtcmVhbA=="  # what the demo server really returns
    item = TimelineEvent.objects.get(session=session, event_type="llm_tool_call")
    assert "password: '[MASKED_SECRET_VALUE]'" in item.content
    stored = [
        item.content,
        Message.objects.get(session=session, role="tool").content,
        MCPInteraction.objects.get(session=session, interaction_type="tool_call").result,
        str(list(LLMInteraction.objects.filter(session=session).values_list("request_messages"))),
        str(list(SessionEvent.objects.filter(session=session).values_list("payload", flat=True))),
    ]
    assert all(raw not in text for text in stored)


def test_code_the_model_ran_and_its_output_make_one_item(scripted_provider):
    scripted_provider(
        [
            {
                "code_executions": [
                    {"code": "print(3 * 181)", "result": "543"},
                    {"code": "print('x')", "result": "x"},
                ],
                "text": "181 back-offs on 3 pods.",
            }
        ]
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    items = list(TimelineEvent.objects.filter(session=session, event_type="code_execution"))
    assert [(i.metadata["code"], i.content, i.status) for i in items] == [
        ("print(3 * 181)", "543", "completed"),
        ("print('x')", "x", "completed"),
    ]


async def test_a_cancel_landing_with_a_delta_is_not_lost():
    """The session's timeout or a cancel can arrive in the same loop step as the
    provider's next delta; the stream must still stop there, not run to its end."""
    from agents.controller import _bounded
    from llm.types import TextDelta

    consumer = asyncio.current_task()

    async def stream():
        yield TextDelta("a")
        consumer.cancel()  # lands while the delta below is being handed over
        yield TextDelta("b")
        yield TextDelta("c")

    seen = []

    async def consume():
        async for delta in _bounded(stream()):
            seen.append(delta.content)
            await asyncio.sleep(0)

    with pytest.raises(asyncio.CancelledError):
        await consume()
    assert "c" not in seen
