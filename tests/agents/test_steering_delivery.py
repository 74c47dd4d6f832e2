"""Steering notes reach the running agents at their next model call, and later agents at
their first: a real run (scripted model, real MCP servers over stdio), with the note
sent through the real API by an MCP tool the agent calls between two of its model calls
(tests/agents/steering_mcp_server.py), so the order is certain."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sessions import services
from sessions.models import (
    AgentExecution,
    LLMInteraction,
    Message,
    SteeringDelivery,
    SteeringNote,
    TimelineEvent,
)
from sessions.selectors.trace import request_messages
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

STEERING_SERVER = str(Path(__file__).with_name("steering_mcp_server.py"))
NOTE = "the deploy at 14:02 changed the pool size"
GUIDANCE = f"Guidance from alice: {NOTE}"


@pytest.fixture
def steered_chain(tarsy_config):
    """A two-stage chain: SteerAgent (which can call the steering server), then
    KubernetesAgent; memory off (it adds tools and calls of its own)."""

    def change(config: dict) -> None:
        config["defaults"]["memory"] = {"enabled": False}
        config["mcp_servers"]["steering"] = {
            "transport": {"type": "stdio", "command": sys.executable, "args": [STEERING_SERVER]}
        }
        config["agents"]["SteerAgent"] = {
            "description": "Asks an SRE for guidance.",
            "mcp_servers": ["steering"],
        }
        config["agent_chains"]["steered"] = {
            "alert_types": ["Steered"],
            "stages": [
                {"name": "first", "agents": [{"name": "SteerAgent"}]},
                {"name": "second", "agents": [{"name": "KubernetesAgent"}]},
            ],
        }

    tarsy_config(change)


def texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages]


def calls_of(session, agent_name: str) -> list[LLMInteraction]:
    return list(
        LLMInteraction.objects.filter(session=session, execution__agent_name=agent_name).order_by(
            "id"
        )
    )


def test_a_note_added_between_two_calls_is_in_the_next_request_and_in_later_stages(
    steered_chain, scripted_provider, live_server, api_token
):
    session = services.session_create(
        alert_type="Steered", alert_data="pool exhausted", chain_id="steered", author="t"
    )
    url = f"{live_server.url}/api/v1/sessions/{session.id}/steer"
    scripted_provider(
        [{"text": "unused"}],
        agents={
            "SteerAgent": {
                "turns": [
                    {
                        "text": "Asking the SRE.",
                        "tool_calls": [
                            {
                                "name": "steering.post_note",
                                "arguments": {"url": url, "token": api_token, "text": NOTE},
                            }
                        ],
                    },
                    {"text": "Concluded with the SRE's guidance."},
                ]
            },
            "KubernetesAgent": {"turns": [{"text": "Stage two concluded."}]},
        },
    )
    assert run_session(str(session.id)) == "completed"

    # The tool's answer: the API took the note while the agent waited for the tool.
    tool_item = TimelineEvent.objects.get(session=session, event_type="llm_tool_call")
    assert tool_item.content.startswith("202 "), tool_item.content
    note = SteeringNote.objects.get(session=session)
    assert (note.author, note.text) == ("alice", NOTE)

    first, second = calls_of(session, "SteerAgent")
    assert GUIDANCE not in texts(request_messages(first))
    sent = request_messages(second)
    assert GUIDANCE in texts(sent)
    guidance = sent[texts(sent).index(GUIDANCE)]
    assert guidance["role"] == "user"
    # After the tool's result it waited for, before the model's answer to it.
    assert sent[texts(sent).index(GUIDANCE) - 1]["role"] == "tool"
    assert sent[-1]["content"] == GUIDANCE

    # The later stage's agent started after the note: its first request carries it.
    (later,) = calls_of(session, "KubernetesAgent")
    later_sent = request_messages(later)
    assert GUIDANCE in texts(later_sent)
    assert [m["role"] for m in later_sent[-1:]] == ["user"]

    # Kept in the trace (the conversation's messages) and recorded as delivered, once
    # per agent that got it, the executive summary's single call included.
    steer_agent = AgentExecution.objects.get(session=session, agent_name="SteerAgent")
    assert Message.objects.filter(execution=steer_agent, role="user", content=GUIDANCE).count() == 1
    delivered = set(
        SteeringDelivery.objects.filter(note=note).values_list("execution__agent_name", flat=True)
    )
    summary = LLMInteraction.objects.get(session=session, interaction_type="executive_summary")
    assert GUIDANCE in texts(request_messages(summary))
    assert delivered == {"SteerAgent", "KubernetesAgent", summary.execution.agent_name}
    assert SteeringDelivery.objects.filter(note=note).count() == 3
    # The note's timeline item says whom it reached (updated with each delivery).
    note.item.refresh_from_db()
    assert note.item.metadata["delivered_to"] == sorted(delivered)


def test_a_note_on_a_pending_session_reaches_the_first_call(
    steered_chain, scripted_provider, api_token
):
    session = services.session_create(
        alert_type="Steered", alert_data="pool exhausted", chain_id="steered", author="t"
    )
    services.steering_note_add(session_id=session.id, text=NOTE, author="alice")
    scripted_provider(
        [{"text": "unused"}],
        agents={
            "SteerAgent": {"turns": [{"text": "First stage concluded."}]},
            "KubernetesAgent": {"turns": [{"text": "Stage two concluded."}]},
        },
    )
    assert run_session(str(session.id)) == "completed"
    (first,) = calls_of(session, "SteerAgent")
    sent = request_messages(first)
    # Once, after the agent's own prompt.
    assert texts(sent).count(GUIDANCE) == 1
    assert [m["role"] for m in sent[:2]] == ["system", "user"]
    assert sent[-1] == {**sent[-1], "role": "user", "content": GUIDANCE}
    (later,) = calls_of(session, "KubernetesAgent")
    assert texts(request_messages(later)).count(GUIDANCE) == 1
