"""Large and sensitive tool results between a real MCP server (stdio) and the model:
summarised (streamed live), truncated for storage and for the model, masked per server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agents.tools.results import estimate_tokens, truncate
from sessions import services
from sessions.models import (
    AlertSession,
    LLMInteraction,
    MCPInteraction,
    Message,
    TimelineEvent,
)
from sessions.selectors.trace import request_messages
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

SERVER = str(Path(__file__).with_name("misbehaving_mcp_server.py"))
BIG = {"name": "noisy.big", "arguments": {"kb": 200}}


@pytest.fixture
def noisy(tarsy_config):
    """KubernetesAgent gets one server, ``noisy`` (the misbehaving test server)."""

    def use(defaults: dict | None = None, **server) -> None:
        def change(config: dict) -> None:
            config["mcp_servers"]["noisy"] = {
                "transport": {"type": "stdio", "command": sys.executable, "args": [SERVER]},
                **server,
            }
            config["agents"]["KubernetesAgent"]["mcp_servers"] = ["noisy"]
            config["defaults"].update(defaults or {})

        tarsy_config(change)

    return use


def submit() -> AlertSession:
    return services.session_create(
        alert_type="kubernetes",
        alert_data="namespace: payments\npayments-api restarts",
        chain_id="kubernetes-investigation",
        author="t",
    )


def agent_requests(session: AlertSession) -> list[LLMInteraction]:
    return list(
        LLMInteraction.objects.filter(
            session=session, interaction_type__in=["iteration", "final_analysis"]
        ).order_by("id")
    )


def tool_message_sent(session: AlertSession) -> str:
    """The tool message in the agent's second request: what the model really read."""
    second = agent_requests(session)[1]
    return next(m["content"] for m in request_messages(second) if m["role"] == "tool")


def test_truncate_cuts_at_a_line_and_says_so():
    text = "\n".join(f"line {n:05d}" for n in range(10_000))  # ~27.5k tokens
    cut, truncated = truncate(text, 1000, "for storage")
    assert truncated
    body, marker = cut.split("\n\n[TRUNCATED for storage: ", 1)
    assert body.endswith("\nline 00362")  # whole lines: 363 of 11 characters fit in 4,000
    assert marker == "the first ~998 of ~27,500 tokens are shown]"
    assert truncate("short", 1000, "x") == ("short", False)


def test_a_large_result_is_summarised_live_and_the_model_reads_the_summary(
    scripted_provider, noisy, browser_client, live_pieces
):
    noisy()
    scripted_provider(
        [
            {"text": "Reading the logs.", "tool_calls": [BIG]},
            {"text": "OOMKilled: raise the limit."},
        ]
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"

    full = MCPInteraction.objects.get(session=session, interaction_type="tool_call").result
    assert len(full) > 200 * 1024  # the trace keeps all of it
    tool_item = TimelineEvent.objects.get(session=session, event_type="llm_tool_call")
    assert tool_item.metadata["truncated"] is True
    assert "[TRUNCATED for storage: the first ~" in tool_item.content
    assert estimate_tokens(tool_item.content) < 8100

    summary = TimelineEvent.objects.get(session=session, event_type="mcp_tool_summary")
    assert summary.status == "completed"
    assert summary.metadata["server_name"] == "noisy"
    assert summary.metadata["tool_name"] == "big"
    assert summary.metadata["original_tokens"] == estimate_tokens(full)
    assert summary.metadata["summarization_provider"] == "scripted-test"
    # The demo summariser read the output: it counts the errors it found in it.
    assert "OOMKilled (limit 256Mi)" in summary.content
    assert summary.sequence_number > tool_item.sequence_number
    # It streamed: text went out live for the summary item before it completed.
    assert any(piece.item_id == summary.id for piece in live_pieces)

    sent = tool_message_sent(session)
    assert summary.content in sent
    assert "handled request #" not in sent  # none of the raw output
    assert len(sent) < 2000
    assert Message.objects.get(session=session, role="tool").content == sent

    summarizing = LLMInteraction.objects.get(session=session, interaction_type="summarization")
    prompt = summarizing.request_messages[-1]["content"]
    assert "payments-api restarts" in prompt  # the investigation's context
    assert "Reading the logs." in prompt
    assert summarizing.tools == []

    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'Summary of <code class="tool-name">noisy.big</code>' in page
    assert "Shortened for storage; the trace keeps the whole result." in page


def test_when_summarising_fails_the_model_gets_the_result_truncated(
    scripted_provider, noisy, browser_client
):
    noisy()
    scripted_provider(
        [{"tool_calls": [BIG]}, {"text": "Done."}],
        agents={
            "ToolSummarizer": {
                "turns": [{"error": {"code": "rate_limit", "message": "quota exhausted"}}]
            }
        },
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"

    items = TimelineEvent.objects.filter(session=session, event_type="mcp_tool_summary")
    assert [i.status for i in items.order_by("id")] == ["failed", "failed"]
    notice = items.order_by("id").last()
    assert notice.metadata["truncated_for_model"] is True
    assert "could not be summarized" in notice.content
    assert "quota exhausted" in notice.content
    assert "truncated to ~5,000 tokens" in notice.content

    sent = tool_message_sent(session)
    assert "[TRUNCATED because it could not be summarized" in sent
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'Could not summarize <code class="tool-name">noisy.big</code>' in page
    assert 4500 < estimate_tokens(sent) < 5100
    assert sent.startswith("2026-11-22T10:01:00Z INFO payments-api: handled request #1\n")


def test_summarisation_falls_back_to_the_next_provider(scripted_provider, noisy, write_script):
    from llm.models import LLMProvider

    scripted_provider(
        [{"tool_calls": [BIG]}, {"text": "Done."}],
        agents={"ToolSummarizer": {"turns": [{"error": {"code": "timeout", "message": "slow"}}]}},
    )
    LLMProvider.objects.create(
        name="cheap",
        type="scripted",
        model="cheap-model",
        options={"script": write_script([{"text": "never used by the agent"}])},
    )
    noisy(defaults={"fallback_providers": ["cheap"]})

    session = submit()
    assert run_session(str(session.id)) == "completed"
    items = list(
        TimelineEvent.objects.filter(session=session, event_type="mcp_tool_summary").order_by("id")
    )
    assert [(i.status, i.metadata["summarization_provider"]) for i in items] == [
        ("failed", "scripted-test"),
        ("completed", "cheap"),
    ]
    assert items[1].metadata["summarization_fallback"] is True
    assert items[1].content in tool_message_sent(session)
    # The investigating agent itself stayed on its own provider.
    assert {r.provider for r in agent_requests(session)} == {"scripted-test"}


def test_a_named_summarization_provider_is_used(scripted_provider, noisy, write_script):
    from llm.models import LLMProvider

    LLMProvider.objects.create(
        name="flash", type="scripted", model="flash-model", options={"chunk_delay": 0}
    )
    noisy(summarization={"llm_provider": "flash", "size_threshold_tokens": 1000})
    small = {"name": "noisy.big", "arguments": {"kb": 8}}
    scripted_provider([{"tool_calls": [small]}, {"text": "Done."}])
    session = submit()
    assert run_session(str(session.id)) == "completed"
    summary = TimelineEvent.objects.get(session=session, event_type="mcp_tool_summary")
    assert (summary.status, summary.metadata["summarization_model"]) == ("completed", "flash-model")


def test_with_summarization_off_storage_and_the_hard_limit_still_apply(
    scripted_provider, noisy, settings
):
    settings.TARSY_TOOL_RESULT_MAX_TOKENS = 20_000
    noisy(summarization={"enabled": False})
    scripted_provider(
        [
            {"tool_calls": [{"name": "noisy.big", "arguments": {"kb": 40}}]},
            {"tool_calls": [BIG]},
            {"text": "Done."},
        ]
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    assert not TimelineEvent.objects.filter(session=session, event_type="mcp_tool_summary").exists()
    items = list(
        TimelineEvent.objects.filter(session=session, event_type="llm_tool_call").order_by("id")
    )
    assert all("[TRUNCATED for storage" in item.content for item in items)

    third = agent_requests(session)[2]
    forty, two_hundred = [m["content"] for m in request_messages(third) if m["role"] == "tool"]
    assert "TRUNCATED" not in forty
    assert estimate_tokens(forty) > 10_000
    assert "[TRUNCATED to fit the model's context: the first ~" in two_hundred
    assert estimate_tokens(two_hundred) < 20_100


def test_a_servers_own_masking_adds_to_the_default(scripted_provider, noisy):
    noisy(
        data_masking={
            "pattern_groups": ["security"],
            "custom_patterns": [
                {"pattern": r"TCK-\d+", "replacement": "[MASKED_TICKET]", "description": "ticket"}
            ],
        }
    )
    text = "ticket TCK-40412 by oncall@example.com, password=hunter2hunter2"
    scripted_provider(
        [{"tool_calls": [{"name": "noisy.echo", "arguments": {"text": text}}]}, {"text": "Done."}]
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    stored = [
        TimelineEvent.objects.get(session=session, event_type="llm_tool_call").content,
        MCPInteraction.objects.get(session=session, interaction_type="tool_call").result,
        tool_message_sent(session),
    ]
    for content in stored:
        assert "TCK-40412" not in content
        assert "[MASKED_TICKET]" in content
        assert "oncall@example.com" not in content  # the security group adds emails
        assert "hunter2hunter2" not in content  # the default still runs
