"""Chains for real, on the scripted provider and real MCP servers: each scenario runs a
whole session and compares its stages, executions and timeline with a golden file
(``tests/agents/golden/<scenario>.json``; ids and times left out; text that depends on
timing — what had streamed when something stopped — is checked separately).

``pytest tests/agents/test_chains.py --update-golden`` rewrites the files; read the
diff before committing it.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db.models import F

from config.loader import get_config
from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    LLMInteraction,
    Stage,
    TimelineEvent,
)
from sessions.selectors.trace import request_messages
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[2]
POD_CALL = {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
EVENTS_CALL = {"name": "kubernetes.get_events", "arguments": {"namespace": "payments"}}
INTERRUPTED = ("cancelled", "failed")


# --- configuration and scripts -------------------------------------------------------------


def base_config() -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["mcp_servers"]["misbehaving"] = {
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(ROOT / "tests" / "agents" / "misbehaving_mcp_server.py")],
        }
    }
    config["agents"]["LogAgent"] = {
        "description": "Reads pod logs.",
        "mcp_servers": ["kubernetes"],
    }
    config["agents"]["EventsAgent"] = {
        "description": "Reads cluster events.",
        "mcp_servers": ["kubernetes"],
    }
    config["agents"]["SlowToolAgent"] = {"mcp_servers": ["misbehaving"]}
    return config


@pytest.fixture
def chain(tarsy_config, scripted_provider):
    """``chain(stages, turns, agents=…, **chain_keys)``: the chain handling the alert type
    ``scenario`` and a scripted provider playing ``turns`` (per agent in ``agents``)."""

    def make(stages: list[dict], turns: list[dict], *, agents=None, **chain_keys) -> None:
        def change(config: dict) -> None:
            config.update(base_config())
            config["agent_chains"]["scenario"] = {
                "alert_types": ["scenario"],
                "stages": stages,
                **chain_keys,
            }

        tarsy_config(change)
        extra = {"agents": {name: {"turns": t} for name, t in (agents or {}).items()}}
        scripted_provider(turns, **extra)

    return make


def submit() -> AlertSession:
    return services.session_create(
        alert_type="scenario",
        alert_data="namespace: payments\npod payments-api is crash-looping",
        chain_id="scenario",
        author="sre",
    )


def run_in_background(session: AlertSession) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(run_session(str(session.id))))
    thread.start()
    return thread, result


def wait_for(condition, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --- snapshots -----------------------------------------------------------------------------


def snapshot(session: AlertSession) -> dict[str, Any]:
    session.refresh_from_db()
    executions = list(
        AgentExecution.objects.filter(session=session)
        .select_related("stage", "parent_execution")
        # Top-level agents first on every database (PostgreSQL sorts NULLs last).
        .order_by(
            "stage__index",
            F("parent_execution_id").asc(nulls_first=True),
            "agent_index",
            "id",
        )
    )
    return {
        "status": session.status,
        "final_analysis": session.final_analysis,
        "error_message": _normalize(session.error_message),
        "executive_summary": session.executive_summary,
        "executive_summary_error": _normalize(session.executive_summary_error),
        "cancelled_by": session.cancelled_by,
        "cancel_reason": session.cancel_reason,
        "stages": [
            {
                "index": stage.index,
                "name": stage.name,
                "type": stage.stage_type,
                "parallel_type": stage.parallel_type,
                "success_policy": stage.success_policy,
                "expected_agent_count": stage.expected_agent_count,
                "status": stage.status,
                "error": _normalize(stage.error_message),
            }
            for stage in Stage.objects.filter(session=session).order_by("index")
        ],
        "executions": [_execution(e) for e in executions],
        "session_items": [
            _item(i)
            for i in TimelineEvent.objects.filter(session=session, execution=None).order_by("id")
        ],
    }


def _execution(execution: AgentExecution) -> dict[str, Any]:
    items = TimelineEvent.objects.filter(execution=execution).order_by("sequence_number")
    return {
        "stage": execution.stage.index,
        "agent": execution.agent_name,
        "agent_index": execution.agent_index,
        "parent": execution.parent_execution.agent_name if execution.parent_execution else None,
        "task": execution.task,
        "status": execution.status,
        "error": _normalize(execution.error_message),
        "items": [_item(i) for i in items],
    }


def _item(item: TimelineEvent) -> dict[str, Any]:
    data: dict[str, Any] = {"type": item.event_type, "status": item.status}
    if item.status in INTERRUPTED and item.metadata.get("interrupted"):
        data["content"] = "<interrupted: what had streamed>"
    elif item.event_type == "llm_tool_call":
        data["tool"] = item.metadata.get("tool_name")
        data["arguments"] = _normalize(json.dumps(item.metadata.get("arguments"), sort_keys=True))
        if item.metadata.get("server_name") != "kubernetes":  # the demo cluster's text is long
            data["content"] = _normalize(item.content)
    else:
        data["content"] = _normalize(item.content)
    return data


def _normalize(text: str) -> str:
    text = re.sub(r"\bexecution[ _]?(id)?[\"']?[:=]?\s*\d+", "execution N", text)
    text = re.sub(r"\"execution_id\": \d+", '"execution_id": N', text)
    text = re.sub(r"\(execution \d+\)", "(execution N)", text)
    return re.sub(r"\b\d+ ms\b", "N ms", text)


def assert_golden(request, name: str, session: AlertSession) -> dict[str, Any]:
    actual = snapshot(session)
    path = GOLDEN / f"{name}.json"
    text = json.dumps(actual, indent=2, ensure_ascii=False) + "\n"
    if request.config.getoption("--update-golden") or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert json.loads(path.read_text()) == actual, f"{path} differs; --update-golden to rewrite"
    return actual


def first_request_of(agent: str, session: AlertSession) -> str:
    call = (
        LLMInteraction.objects.filter(session=session, execution__agent_name=agent)
        .order_by("id")
        .first()
    )
    return json.dumps(call.request_messages, ensure_ascii=False)


# --- scenarios -----------------------------------------------------------------------------


def test_two_sequential_stages_pass_their_findings_on(request, chain):
    chain(
        [
            {"name": "triage", "agents": ["LogAgent"]},
            {"name": "deep dive", "agents": ["EventsAgent"]},
        ],
        [],
        agents={
            "LogAgent": [
                {"tool_calls": [POD_CALL]},
                {"text": "## Summary\npayments-api is crash-looping."},
            ],
            "EventsAgent": [{"text": "## Summary\nThe crash loop began after a rollout."}],
        },
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    assert_golden(request, "sequential_stages", session)
    # Stage 2 read stage 1's result under its stage's and agent's name.
    assert "Stage 'triage', agent 'LogAgent'" in first_request_of("EventsAgent", session)
    assert "payments-api is crash-looping." in first_request_of("EventsAgent", session)


def test_a_parallel_stage_runs_side_by_side_and_is_synthesized(request, chain):
    chain(
        [{"name": "investigation", "agents": ["LogAgent", "EventsAgent"]}],
        [],
        agents={
            "LogAgent": [
                {"text": "## Root cause\nDATABASE_PASSWORD is not set.", "chunk_delay": 0.05}
            ],
            "EventsAgent": [
                {"tool_calls": [EVENTS_CALL]},
                {"text": "## Summary\nBack-offs since the rollout.", "chunk_delay": 0.05},
            ],
        },
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    snap = assert_golden(request, "parallel_with_synthesis", session)
    assert [s["type"] for s in snap["stages"]] == ["investigation", "synthesis", "exec_summary"]
    synthesis_prompt = first_request_of("SynthesisAgent", session)
    assert "Stage 'investigation', agent 'LogAgent'" in synthesis_prompt
    assert "Stage 'investigation', agent 'EventsAgent'" in synthesis_prompt


def test_parallel_agents_overlap_in_time(chain):
    turn = {"text": " ".join(f"w{n}" for n in range(15)), "chunk_delay": 0.1}
    chain(
        [{"name": "investigation", "agents": ["LogAgent", "EventsAgent"]}],
        [],
        agents={"LogAgent": [turn], "EventsAgent": [turn]},
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    stage = Stage.objects.get(session=session, index=0)
    agents = list(AgentExecution.objects.filter(stage=stage))
    each = [(e.completed_at - e.started_at).total_seconds() for e in agents]
    wall = (stage.completed_at - stage.started_at).total_seconds()
    assert len(agents) == 2
    assert wall < 0.75 * sum(each), (wall, each)  # together, not one after the other


def test_replicas_run_copies_of_one_agent(request, chain):
    chain(
        [{"name": "investigation", "agents": ["LogAgent"], "replicas": 3}],
        [{"text": "## Summary\nSame answer from every replica."}],
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    snap = assert_golden(request, "replicas", session)
    assert [e["agent_index"] for e in snap["executions"] if e["stage"] == 0] == [1, 2, 3]
    assert "agent 'LogAgent-3'" in first_request_of("SynthesisAgent", session)
    # Named as TARSy names replicas, and pages show those names as they are.
    replicas = AgentExecution.objects.filter(stage__session=session, stage__index=0)
    assert [(e.agent_name, e.label) for e in replicas] == [
        (f"LogAgent-{n}", f"LogAgent-{n}") for n in (1, 2, 3)
    ]
    # Replicas stored before they were named apart keep their number on the page.
    replicas.update(agent_name="LogAgent")
    assert [e.label for e in replicas.all()] == ["LogAgent #1", "LogAgent #2", "LogAgent #3"]


FAILING = {"error": {"code": "auth_error", "message": "bad key", "retryable": False}}


@pytest.mark.parametrize("policy", ["any", "all"])
def test_one_failing_agent_under_each_success_policy(request, chain, policy):
    chain(
        [
            {
                "name": "investigation",
                "agents": ["LogAgent", "EventsAgent"],
                "success_policy": policy,
            }
        ],
        [],
        agents={"LogAgent": [FAILING], "EventsAgent": [{"text": "## Summary\nRollout broke it."}]},
    )
    session = submit()
    expected = "completed" if policy == "any" else "failed"
    assert run_session(str(session.id)) == expected
    snap = assert_golden(request, f"success_policy_{policy}", session)
    if policy == "any":
        # The synthesis heard of the failure too.
        assert "LogAgent' — failed" in first_request_of("SynthesisAgent", session)
    else:
        assert "success policy 'all' needs every agent to succeed" in snap["error_message"]


def test_forced_conclusion_at_max_iterations(request, chain):
    chain(
        [{"name": "investigation", "agents": [{"name": "LogAgent", "max_iterations": 2}]}],
        [
            {"text": "Looking.", "tool_calls": [POD_CALL]},
            {"text": "Still looking.", "tool_calls": [POD_CALL]},
            {"text": "Concluding from what I have."},
        ],
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    assert_golden(request, "forced_conclusion", session)


def test_an_executive_summary_closes_the_session(request, chain):
    chain(
        [{"name": "investigation", "agents": ["LogAgent"]}],
        [
            {
                "text": "## Summary\nThe pod lacks its password.\n\n## Root cause\nDATABASE_PASSWORD is unset."
            }
        ],
        agents={
            "ExecSummaryAgent": [{"text": "payments-api lacks DATABASE_PASSWORD; restore it."}]
        },
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    snap = assert_golden(request, "executive_summary", session)
    assert snap["executive_summary"] == "payments-api lacks DATABASE_PASSWORD; restore it."


def test_a_failing_executive_summary_still_completes_the_session(request, chain):
    chain(
        [{"name": "investigation", "agents": ["LogAgent"]}],
        [{"text": "## Summary\nThe pod lacks its password."}],
        agents={"ExecSummaryAgent": [FAILING]},
    )
    session = submit()
    assert run_session(str(session.id)) == "completed"
    snap = assert_golden(request, "executive_summary_fails_open", session)
    assert snap["executive_summary"] == ""
    assert "bad key" in snap["executive_summary_error"]


def test_an_orchestrator_dispatches_overlapping_sub_agents_and_one_is_cancelled(request, chain):
    chain(
        [
            {
                "name": "investigation",
                "agents": ["KubernetesAgent"],
                "sub_agents": ["LogAgent", "EventsAgent"],
            }
        ],
        [],
        agents={
            "KubernetesAgent": [
                {
                    "thinking": "Two questions at once.",
                    "tool_calls": [
                        {
                            "name": "orchestrator.dispatch_agent",
                            "arguments": {
                                "name": "LogAgent",
                                "task": "Read the crashing pod's logs.",
                            },
                        },
                        {
                            "name": "orchestrator.dispatch_agent",
                            "arguments": {"name": "EventsAgent", "task": "List warning events."},
                        },
                    ],
                },
                {"text": "Waiting for my sub-agents."},
                {"text": "EventsAgent answered; LogAgent is still reading."},
                {"text": "## Summary\nEvents show back-offs; the log read was stopped."},
            ],
            "LogAgent": [{"text": " ".join(f"log{n}" for n in range(200)), "chunk_delay": 0.05}],
            "EventsAgent": [
                {"tool_calls": [EVENTS_CALL]},
                {"text": "## Summary\nBack-offs since the rollout."},
            ],
        },
    )
    session = submit()
    thread, result = run_in_background(session)

    def orchestrator_calls() -> int:
        return LLMInteraction.objects.filter(
            session=session, execution__agent_name="KubernetesAgent"
        ).count()

    # The third call comes after EventsAgent's result was pushed in; LogAgent still streams.
    wait_for(lambda: orchestrator_calls() >= 3, what="EventsAgent's result to arrive")
    log_agent = AgentExecution.objects.get(session=session, agent_name="LogAgent")
    assert log_agent.status == "active"
    services.execution_cancel(
        session_id=session.id, execution_id=log_agent.id, by="sre", reason="enough"
    )
    thread.join(timeout=30)
    assert result == ["completed"]
    snap = assert_golden(request, "orchestrator_sub_agents", session)
    children = AgentExecution.objects.filter(session=session, parent_execution__isnull=False)
    (logs, events) = sorted(children, key=lambda e: e.agent_name)
    assert logs.started_at < events.completed_at
    assert events.started_at < logs.completed_at
    assert [e["status"] for e in snap["executions"] if e["parent"]] == ["cancelled", "completed"]
    conversation = json.dumps(
        request_messages(
            LLMInteraction.objects.filter(execution__agent_name="KubernetesAgent").last()
        )
    )
    assert "[Sub-agent completed] EventsAgent" in conversation
    assert "[Sub-agent cancelled] LogAgent" in conversation


# --- cancel --------------------------------------------------------------------------------


def test_cancel_while_pending_never_runs(request, chain):
    chain([{"name": "investigation", "agents": ["LogAgent"]}], [{"text": "never said"}])
    session = submit()
    assert (
        services.session_cancel(session_id=session.id, by="sre", reason="duplicate") == "cancelled"
    )
    assert run_session(str(session.id)) == "skipped"
    assert_golden(request, "cancel_pending", session)


def test_cancel_while_streaming_keeps_what_was_said(request, chain, settings, live_pieces):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.1
    words = " ".join(f"w{n}" for n in range(300))
    chain(
        [{"name": "investigation", "agents": ["LogAgent"]}], [{"text": words, "chunk_delay": 0.02}]
    )
    session = submit()
    thread, result = run_in_background(session)
    wait_for(
        lambda: TimelineEvent.objects.filter(session=session, event_type="llm_response").exists(),
        what="the answer to stream",
    )
    time.sleep(0.2)
    asked = time.monotonic()
    services.session_cancel(session_id=session.id, by="sre", reason="wrong namespace")
    wait_for(
        lambda: AlertSession.objects.get(id=session.id).status == "cancelled",
        timeout=5,
        what="the worker to end the session",
    )
    assert time.monotonic() - asked < 1.0  # bench/cancel.py measures this properly
    thread.join(timeout=10)
    assert result == ["cancelled"]
    assert_golden(request, "cancel_streaming", session)
    item = TimelineEvent.objects.get(session=session, event_type="llm_response")
    assert item.status == "cancelled"
    assert words.startswith(item.content)
    assert len(item.content) > 10  # what streamed was kept
    # Every word the pages were shown live was saved before the item closed: from the
    # stop on, nothing more went to the pages.
    shown = "".join(piece.text for piece in live_pieces if piece.item_id == item.id)
    assert shown
    assert item.content.startswith(shown)


def test_cancel_during_a_tool_call_closes_it(request, chain, settings):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.1
    chain(
        [{"name": "investigation", "agents": ["SlowToolAgent"]}],
        [
            {"tool_calls": [{"name": "misbehaving.hang", "arguments": {"seconds": 30}}]},
            {"text": "never"},
        ],
    )
    session = submit()
    thread, result = run_in_background(session)
    wait_for(
        lambda: TimelineEvent.objects.filter(
            session=session, event_type="llm_tool_call", status="streaming"
        ).exists(),
        what="the tool call to start",
    )
    time.sleep(0.3)
    services.session_cancel(session_id=session.id, by="sre")
    thread.join(timeout=10)
    assert result == ["cancelled"]
    assert_golden(request, "cancel_tool_call", session)


def test_cancel_during_synthesis(request, chain, settings):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.1
    chain(
        [{"name": "investigation", "agents": ["LogAgent", "EventsAgent"]}],
        [{"text": "## Summary\nQuick finding."}],
        agents={
            "SynthesisAgent": [{"text": " ".join(f"s{n}" for n in range(300)), "chunk_delay": 0.02}]
        },
    )
    session = submit()
    thread, result = run_in_background(session)
    wait_for(
        lambda: TimelineEvent.objects.filter(
            session=session, stage__stage_type="synthesis", status="streaming"
        ).exists(),
        what="the synthesis to stream",
    )
    services.session_cancel(session_id=session.id, by="sre", reason="seen enough")
    thread.join(timeout=10)
    assert result == ["cancelled"]
    assert_golden(request, "cancel_synthesis", session)


def test_the_session_timeout_ends_it_timed_out(request, chain, settings):
    # Long enough for the answer to have started streaming on a loaded machine (at 1.5 s
    # a parallel run sometimes timed out before it had), far shorter than the answer.
    settings.TARSY_SESSION_TIMEOUT = 4
    chain(
        [{"name": "investigation", "agents": ["LogAgent"]}],
        [{"text": " ".join(f"w{n}" for n in range(1000)), "chunk_delay": 0.02}],
    )
    session = submit()
    assert run_session(str(session.id)) == "timed_out"
    assert_golden(request, "session_timeout", session)


def test_a_terminal_session_cannot_be_cancelled(chain):
    chain([{"name": "investigation", "agents": ["LogAgent"]}], [{"text": "done"}])
    session = submit()
    run_session(str(session.id))
    with pytest.raises(services.NotCancellable, match="already ended"):
        services.session_cancel(session_id=session.id, by="sre")


def test_the_deep_demo_chain_is_configured():
    chain = get_config().chains["deep-investigation"]
    assert chain.stages[0].parallel
    assert [a.name for a in chain.stages[0].agents] == ["WorkloadAgent", "ChangeAgent"]


@pytest.fixture
def action_chain(tarsy_config, scripted_provider):
    def change(config: dict) -> None:
        config.update(base_config())
        config["agents"]["FixAgent"] = {"type": "action", "mcp_servers": ["kubernetes"]}
        config["agent_chains"]["scenario"] = {
            "alert_types": ["scenario"],
            "stages": [{"name": "remediate", "agents": ["FixAgent"]}],
        }

    tarsy_config(change)
    scripted_provider([{"text": "Changed nothing: the evidence is not conclusive."}])


def test_an_action_agent_gets_the_safety_preamble_and_an_action_stage(action_chain):
    session = submit()
    assert run_session(str(session.id)) == "completed"
    assert Stage.objects.get(session=session, index=0).stage_type == "action"
    prompt = first_request_of("FixAgent", session)
    assert "You may take actions that change running systems" in prompt
    assert "never delete data" in prompt
