"""TARSy's orchestrator scenarios, replayed against this implementation (issue 20).

Replays TARSy's ``test/e2e/orchestrator_test.go`` (TestE2E_Orchestrator with its golden
files, TestE2E_OrchestratorMultiAgent, TestE2E_OrchestratorBuiltinAgent,
TestE2E_OrchestratorMultiPhase, TestE2E_OrchestratorSubAgentFailure,
TestE2E_OrchestratorListAgents, TestE2E_OrchestratorCancelSpecific) and
``test/e2e/orchestrator_cancel_test.go`` (TestE2E_OrchestratorCancellation): an agent
with sub-agents dispatches them, waits for their results and concludes; its configuration
is TARSy's, unchanged (tests/compat/tarsy_configs/orchestrator*/), its model is TARSy's
script at the Gemini wire (tests/compat/scenarios/orchestrator*/). TARSy's six tests on
config ``orchestrator`` run one after another on one deployment, each with its own script
(the fake model takes the next script at the session's first call) and tool results.

TARSy's gates become the fake model's named holds: ``orchestrator-iteration-2`` (TARSy's
orchIter2Gate) and ``sub-agents`` (subAgentGate / phase1Gate), released by the test in
TARSy's order. TARSy's RewriteChunks (the cancel_agent call naming the execution id that
the dispatch returned) is the fake's ``{{execution_id:<Agent>}}`` in the call's arguments.

Where this implementation differs on purpose (docs/tarsy.md):
- the orchestration tools reach the model as ``orchestrator__dispatch_agent`` (all our
  tools are ``server__tool`` at the wire); TARSy's are bare ``dispatch_agent``;
- a dispatch answers ``{"execution_id": <id>, "status": "accepted"}`` alone; TARSy adds
  a paragraph telling the model to wait for the result;
- execution ids are integers (TARSy: UUIDs), so cancel_agent takes an integer;
- an answer is one timeline item, streamed and then marked final_analysis (TARSy: an
  llm_response, then a final_analysis copy); the executive summary is an
  executive_summary item;
- a sub-agent whose model call fails ends failed at once (one call; TARSy iterates on
  and tries a forced conclusion: three calls).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import (
    SCENARIOS,
    Running,
    SocketClient,
    agents_by_execution,
    completed,
    created,
    differences,
    dump,
    events_not_in_order,
    flatten,
    golden_interactions,
    llm_interaction_count,
    open_gate,
    replayed,
    scenario_deployment,
    tools_copy,
    wait,
    without_durations,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


# --- what the tests share ------------------------------------------------------------------


def _held(run: Running, agent: str, since: int = 0) -> int:
    """How many of ``agent``'s model calls waited (TARSy's OnBlock), of the calls from
    ``since`` on (the calls of one session on a shared deployment)."""
    calls = run.scenario.llm_calls()[since:]
    return sum(c["agent"] == agent and c["blocked"] for c in calls)


def _release_in_tarsys_order(
    run: Running, session_id: str, orchestrator: str, since: int = 0
) -> None:
    """TARSy's gate goroutine: once the orchestrator's held call waits, let it answer;
    once that answer is recorded, let the sub-agents' models answer."""
    wait(lambda: _held(run, orchestrator, since) >= 1, f"{orchestrator}'s held call", timeout=60)
    baseline = llm_interaction_count(run, session_id)
    open_gate(run, "orchestrator-iteration-2")
    wait(
        lambda: llm_interaction_count(run, session_id) > baseline, "its answer recorded", timeout=60
    )
    open_gate(run, "sub-agents")


def _collect(run: Running, session_id: str, since: int = 0) -> dict[str, Any]:
    outputs = run.outputs(session_id)
    outputs["llm_calls"] = outputs["llm_calls"][since:]
    trace = outputs["trace"]
    details = {}
    for stage in trace["stages"]:
        for execution in flatten(stage["executions"]):
            for kind in ("llm", "mcp"):
                for item in execution[f"{kind}_interactions"]:
                    path = f"/sessions/{session_id}/trace/{kind}/{item['id']}"
                    details[f"{kind}-{item['id']}"] = run.get(path)
    outputs["details"] = details
    return outputs


def _executions(session: dict[str, Any]) -> list[dict[str, Any]]:
    """TARSy's QueryExecutions: every execution of the session, sub-agents included."""
    return [e for stage in session["stages"] for e in flatten(stage.get("executions", []))]


def _tool_calls(timeline: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [
        item
        for item in timeline
        if item["event_type"] == "llm_tool_call"
        and (item.get("metadata") or {}).get("tool_name") == tool
    ]


def _assert_parented(session: dict[str, Any], orchestrator: str) -> str:
    """The orchestrator has no parent; every sub-agent names it. Returns its id."""
    [top] = [e for e in _executions(session) if e["agent_name"] == orchestrator]
    assert top.get("parent_execution_id") is None
    for execution in _executions(session):
        if execution.get("parent_execution_id") is not None:
            assert execution["parent_execution_id"] == top["execution_id"]
    return top["execution_id"]


def _assert_trace_nests(trace: dict[str, Any], orchestrator: str, sub_agents: list[str]) -> None:
    """Trace API: the orchestrate stage and the summary's; only the orchestrator at the
    top, its sub-agents under it."""
    assert len(trace["stages"]) == 2
    [top] = trace["stages"][0]["executions"]
    assert top["agent_name"] == orchestrator
    assert sorted(s["agent_name"] for s in top.get("sub_agents", [])) == sorted(sub_agents)


# --- one deployment, several of TARSy's tests -------------------------------------------------


def _replay(
    run: Running,
    name: str,
    alert_type: str,
    data: str,
    *,
    script: str | None = None,
    tools: str | None = None,
    gated: str | None = "SREOrchestrator",
    before_end=None,
) -> dict[str, Any]:
    """One of TARSy's tests on a running deployment: its script (and tool results) in
    place of the last one's, a WebSocket client subscribed to its session (TARSy's
    WSConnect), its alert, its gates opened in TARSy's order (``gated``: the agent whose
    held call opens them), ``before_end`` (the test's own steps) and the session's end."""
    scenario = run.scenario
    for gate in scenario.tmp.glob(f"{scenario.record.stem}.*.release"):
        gate.unlink()  # the last test's gates close again
    if tools is not None:
        scenario.tools.write_text((scenario.dir / tools).read_text())
    if script is not None:
        staged = scenario.tmp / "next-script.json"
        staged.write_text((scenario.dir / script).read_text())
        staged.rename(scenario.record.with_name(f"{scenario.record.stem}.script.json"))
    since = len(scenario.llm_calls())
    socket = SocketClient(run.tarsy.base_url, run.token)
    try:
        session_id = run.submit(alert_type, data)
        socket.subscribe(f"session:{session_id}")
        if gated:
            _release_in_tarsys_order(run, session_id, gated, since)
        if before_end is not None:
            before_end(run, session_id, since)
        status = run.wait_status(session_id)
        socket.wait_for(
            lambda e: e["type"] == "session.status" and e.get("status") == status,
            f"the session.status {status} event",
        )
        outputs = _collect(run, session_id, since)
        outputs["events"] = list(socket.events)
        outputs["stored_events"] = socket.stored()
    finally:
        socket.close()
    outputs["session_id"] = session_id
    dump(f"orchestrator-{name}", outputs)
    return outputs


# --- TestE2E_Orchestrator (golden files) and the other tests on its configuration ---------------


@pytest.fixture(scope="module")
def orchestrator_config(tmp_path_factory) -> dict[str, Any]:
    """TARSy's tests on config ``orchestrator``, one after another on one deployment."""
    tmp = tmp_path_factory.mktemp("orchestrator")
    tools = tools_copy(tmp, SCENARIOS / "orchestrator" / "mcp_tools.json")
    runs: dict[str, Any] = {}
    replays: list[tuple[str, str, dict[str, Any]]] = [
        # TestE2E_Orchestrator: one sub-agent, three orchestrator iterations.
        ("golden", "Payment service 5xx errors spiking", {}),
        # TestE2E_OrchestratorMultiAgent: LogAnalyzer (MCP tools) and GeneralWorker.
        (
            "multi_agent",
            "Payment service 5xx errors after deploy-1234",
            {"script": "multi_agent.json", "tools": "multi_agent_tools.json"},
        ),
        # TestE2E_OrchestratorMultiPhase: GeneralWorker dispatched again on phase 1's results.
        (
            "multi_phase",
            "Payment service 5xx errors after deploy-1234",
            {"script": "multi_phase.json"},
        ),
        # TestE2E_OrchestratorSubAgentFailure: LogAnalyzer's model fails.
        ("sub_agent_failure", "Service degradation alert", {"script": "sub_agent_failure.json"}),
        # TestE2E_OrchestratorListAgents.
        ("list_agents", "Routine check alert", {"script": "list_agents.json"}),
        # TestE2E_OrchestratorCancelSpecific: GeneralWorker answers once LogAnalyzer waits;
        # then the orchestrator cancels LogAnalyzer.
        (
            "cancel_specific",
            "Payment service elevated error rate",
            {"script": "cancel_specific.json", "gated": None, "before_end": _cancel_specific},
        ),
    ]
    with scenario_deployment("orchestrator", tmp, tools=tools) as run:
        for name, data, how in replays:
            try:
                runs[name] = _replay(run, name, "test-orchestrator", data, **how)
            except Exception as exc:  # the other tests' sessions still run
                runs[name] = {"error": exc, "log": run.tarsy.log_tail(80)}
    return runs


def _cancel_specific(run: Running, session_id: str, since: int) -> None:
    wait(lambda: _held(run, "LogAnalyzer", since) >= 1, "LogAnalyzer waiting", timeout=60)
    open_gate(run, "sub-agents")


@pytest.fixture(scope="module")
def orchestrator(orchestrator_config) -> dict[str, Any]:
    """TARSy's TestE2E_Orchestrator: one sub-agent, three orchestrator iterations."""
    return replayed(orchestrator_config, "golden")


def test_orchestrator_session_completes_with_analysis_and_summary(orchestrator):
    session = orchestrator["session"]
    assert session["status"] == "completed", orchestrator["log"]
    assert session["final_analysis"]
    assert session["executive_summary"]


def test_orchestrator_sub_agent_is_a_child_execution_with_its_task(orchestrator):
    session = orchestrator["session"]
    assert [(s["stage_name"], s["status"]) for s in session["stages"]] == [
        ("orchestrate", "completed"),
        ("Executive Summary", "completed"),
    ]
    executions = _executions(session)
    assert len(executions) == 3  # orchestrator + 1 sub-agent + executive summary
    orchestrator_id = _assert_parented(session, "SREOrchestrator")
    [analyzer] = [e for e in executions if e["agent_name"] == "LogAnalyzer"]
    assert analyzer["status"] == "completed"
    assert analyzer["parent_execution_id"] == orchestrator_id
    assert analyzer["task"] == "Find all error patterns in the last 30 minutes"
    assert all(e["status"] == "completed" for e in executions)


def test_orchestrator_timeline_marks_the_sub_agents_items(orchestrator):
    session, timeline = orchestrator["session"], orchestrator["timeline"]
    assert timeline
    ids = {e["agent_name"]: e["execution_id"] for e in _executions(session)}
    kinds = Counter(item["event_type"] for item in timeline)
    # A task_assigned item for each dispatched sub-agent (1 here), first on its timeline.
    assert kinds["task_assigned"] == 1
    [task] = [item for item in timeline if item["event_type"] == "task_assigned"]
    assert task["execution_id"] == ids["LogAnalyzer"]
    assert task["content"] == "Find all error patterns in the last 30 minutes"
    assert task["status"] == "completed"
    first = min(
        (i for i in timeline if i.get("execution_id") == ids["LogAnalyzer"]),
        key=lambda i: i["sequence_number"],
    )
    assert first["id"] == task["id"]
    assert kinds["final_analysis"] >= 2  # orchestrator + sub-agent
    for item in timeline:
        if item.get("execution_id") == ids["LogAnalyzer"]:
            assert item.get("parent_execution_id") == ids["SREOrchestrator"], item
        elif item.get("execution_id") == ids["SREOrchestrator"]:
            assert item.get("parent_execution_id") is None, item


def test_orchestrator_makes_tarsys_six_model_calls(orchestrator):
    calls = orchestrator["llm_calls"]
    # 3 (orchestrator) + 2 (LogAnalyzer) + 1 (executive summary)
    assert [c["agent"] for c in calls].count("SREOrchestrator") == 3
    assert [c["agent"] for c in calls].count("LogAnalyzer") == 2
    assert len(calls) == 6
    assert all(call["answered"] for call in calls)


def test_orchestrator_trace_nests_the_sub_agent(orchestrator):
    _assert_trace_nests(orchestrator["trace"], "SREOrchestrator", ["LogAnalyzer"])


def _golden(name: str) -> Any:
    return without_durations(
        json.loads(
            (SCENARIOS / "orchestrator" / f"{name}.golden")
            .read_text()
            .replace("{DURATION_MS}", "0")
        )
    )


def test_orchestrator_session_is_tarsys_golden_key_by_key(orchestrator):
    found = differences(_golden("session"), without_durations(orchestrator["session"]))
    # A stage says when it started; TARSy never sets it (null in its golden files).
    started = [d for d in found if re.fullmatch(r"\.stages\[\d\]\.started_at: ours '.*'.*", d)]
    assert len(started) == 2
    assert [d for d in found if d not in started] == []


def test_orchestrator_stages_are_tarsys_golden(orchestrator):
    stages = [
        {"stage_index": s["stage_index"], "stage_name": s["stage_name"], "status": s["status"]}
        for s in orchestrator["session"]["stages"]
    ]
    assert stages == _golden("stages")


def test_orchestrator_trace_list_is_tarsys_golden(orchestrator):
    assert differences(_golden("trace_list"), without_durations(orchestrator["trace"])) == []


# TARSy's normalize.go: times inside texts (tool results) become {TIMESTAMP}.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def test_orchestrator_timeline_is_tarsys_golden(orchestrator):
    session, timeline = orchestrator["session"], orchestrator["timeline"]
    agents = agents_by_execution(session)
    ours = [
        (
            agents[item["execution_id"]],
            item["event_type"],
            _TIMESTAMP.sub("{TIMESTAMP}", item["content"]),
            item["status"],
            item.get("metadata") or {},
        )
        for item in sorted(timeline, key=lambda i: i["sequence_number"])
    ]
    expected = []
    for item in _golden("timeline"):
        key = (item["agent"], item["event_type"], item["content"], item["status"])
        metadata = item.get("metadata") or {}
        if item["event_type"] == "final_analysis":
            # Ours: the answer is one item, streamed then marked final_analysis; TARSy
            # streams an llm_response, then adds a final_analysis copy.
            expected.remove(next(e for e in expected if e[:3] == (key[0], "llm_response", key[2])))
            if metadata.pop("interaction_type", None) == "executive_summary":
                key = (key[0], "executive_summary", *key[2:])  # ours: its own kind
        if (item["event_type"], metadata.get("tool_name")) == ("llm_tool_call", "dispatch_agent"):
            # Ours: the dispatch answers its execution id and status alone; TARSy adds a
            # paragraph telling the model to wait for the result.
            [analyzer] = [i for i, name in agents.items() if name == "LogAnalyzer"]
            content = json.dumps({"execution_id": int(analyzer), "status": "accepted"})
            key = (*key[:2], content, key[3])
        expected.append((*key, metadata))
    # Per agent, in order; TARSy's metadata key by key (ours adds call ids, durations).
    for agent in ("SREOrchestrator", "LogAnalyzer", "ExecSummaryAgent"):
        mine = [o for o in ours if o[0] == agent]
        theirs = [e for e in expected if e[0] == agent]
        assert [o[:4] for o in mine] == [e[:4] for e in theirs]
        for o, e in zip(mine, theirs, strict=True):
            assert e[4].items() <= o[4].items(), (o, e)


def test_orchestrator_trace_interactions_are_tarsys_golden(orchestrator):
    """TARSy's trace detail files, in its order (per agent, by creation): what each call
    was, what it was sent and answered (the messages' roles: our prompts' words are our
    own); each tool call's arguments and result."""
    [stage, _summary] = orchestrator["trace"]["stages"]
    [top] = stage["executions"]
    ours = []
    for execution in [top, *top["sub_agents"]]:
        entries = [("llm", i) for i in execution["llm_interactions"]] + [
            ("mcp", i) for i in execution["mcp_interactions"]
        ]
        entries.sort(key=lambda entry: entry[1]["created_at"])
        ours += [
            (execution["agent_name"], orchestrator["details"][f"{k}-{i['id']}"], k)
            for k, i in entries
        ]
    golden = golden_interactions(SCENARIOS / "orchestrator")
    assert len(ours) == len(golden)
    for (agent, detail, kind), (name, head, in_order) in zip(ours, golden, strict=True):
        sections = dict(in_order)
        assert f"_{agent}_{kind}_" in name, (name, agent, kind)
        same = ["interaction_type", "model_name", "input_tokens", "output_tokens",
                "total_tokens", "thinking_content", "server_name", "tool_name"]  # fmt: skip
        assert {k: detail.get(k) for k in same if k in head} == {
            k: head[k] for k in same if k in head
        }, name
        if kind == "llm":
            # TARSy's iteration, messages_count, text_length, tool_calls_count.
            for part in ("llm_request", "llm_response"):
                assert head[part].items() <= detail[part].items(), (name, detail[part])
            # Its conversation, closed by the answer: the roles (the words are ours).
            roles = [key.split(":")[1].split()[0] for key, _ in in_order]
            assert [m["role"] for m in detail["conversation"]] == roles, name
        elif head["interaction_type"] == "tool_list":
            tools = json.loads(sections["AVAILABLE_TOOLS"])
            assert sorted(detail["available_tools"]) == sorted(t["name"] for t in tools), name
        else:
            assert detail["tool_arguments"] == json.loads(sections["TOOL_ARGUMENTS"]), name
            result = json.loads(sections["TOOL_RESULT"])
            assert detail["tool_result"]["is_error"] == result["is_error"], name
            if detail["tool_name"] != "dispatch_agent":  # its words differ (above)
                content = _TIMESTAMP.sub("{TIMESTAMP}", detail["tool_result"]["content"])
                assert content == result["content"], name


# TARSy's testdata.OrchestratorExpectedEvents. Ours: an answer's item completes as
# final_analysis (TARSy completes an llm_response and creates a final_analysis copy).
ORCHESTRATOR_EVENTS = [
    {"type": "session.status", "status": "in_progress"},
    {"type": "stage.status", "stage_name": "orchestrate", "status": "started"},
    created("llm_thinking", status="streaming"),
    completed(
        "llm_thinking",
        content="I need to investigate this alert. Let me dispatch LogAnalyzer to check error "
        "patterns.",
    ),
    created("llm_tool_call", status="streaming", metadata={"tool_name": "dispatch_agent"}),
    completed("llm_tool_call"),
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed("llm_thinking", content="I've dispatched LogAnalyzer. Waiting for results.", group=1),
    completed(
        "llm_response",
        content="Waiting for sub-agent results to complete the investigation.",
        group=1,
    ),
    created("llm_thinking", status="streaming", group=2),
    completed("llm_thinking", content="Let me search the logs for error patterns.", group=2),
    created(
        "llm_tool_call",
        status="streaming",
        group=2,
        metadata={"server_name": "test-mcp", "tool_name": "search_logs"},
    ),
    completed("llm_tool_call", group=2),
    created("llm_thinking", status="streaming", group=2),
    created("llm_response", status="streaming", group=2),
    completed("llm_thinking", content="Found significant error patterns in the logs.", group=2),
    completed(
        "final_analysis",
        content="Found 2,847 5xx errors in the last 30 minutes, primarily from the payment "
        "service.",
        group=2,
    ),
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed(
        "llm_thinking",
        content="LogAnalyzer found 5xx errors from the payment service. Memory pressure from "
        "recent deployment.",
        group=3,
    ),
    completed(
        "final_analysis",
        content="Investigation complete: payment service has 2,847 5xx errors due to memory "
        "pressure from recent deployment. Recommend rollback and memory limit increase.",
        group=3,
    ),
    {"type": "stage.status", "stage_name": "orchestrate", "status": "completed"},
    {"type": "session.status", "status": "completed"},
]


def _assert_all_events_name_the_session(outputs: dict[str, Any]) -> None:
    """TARSy's AssertAllEventsHaveSessionID (its control messages aside)."""
    control = ("connection.established", "subscription.confirmed", "pong", "catchup.overflow")
    events = [e for e in outputs["events"] if e["type"] not in control]
    assert events
    assert {e.get("session_id") for e in events} == {outputs["session_id"]}


def test_orchestrator_websocket_events_come_in_tarsys_order(orchestrator):
    _assert_all_events_name_the_session(orchestrator)
    assert events_not_in_order(orchestrator["stored_events"], ORCHESTRATOR_EVENTS) == []


# --- TestE2E_OrchestratorMultiAgent, _BuiltinAgent, _MultiPhase -------------------------------


def _assert_dispatched_all_completed(
    outputs: dict[str, Any], orchestrator: str, tasks: dict[str, list[str]]
) -> None:
    """What TARSy's multi-agent tests share: the session completed with an analysis and a
    summary; the orchestrator, its sub-agents (each with a task containing the words
    given) and the summary, all completed, the sub-agents its children in the trace."""
    session = outputs["session"]
    assert session["status"] == "completed", outputs["log"]
    assert session["final_analysis"]
    assert session["executive_summary"]
    executions = _executions(session)
    assert len(executions) == 2 + sum(len(t) for t in tasks.values())
    assert all(e["status"] == "completed" for e in executions), executions
    _assert_parented(session, orchestrator)
    for agent, words in tasks.items():
        theirs = [e["task"] for e in executions if e["agent_name"] == agent]
        assert len(theirs) == len(words)
        for word in words:
            assert any(word in task for task in theirs), (agent, word, theirs)
    _assert_trace_nests(
        outputs["trace"], orchestrator, [a for a, words in tasks.items() for _ in words]
    )
    _assert_all_events_name_the_session(outputs)
    assert any(
        e["type"] == "session.status" and e.get("status") == "completed" for e in outputs["events"]
    )


def test_orchestrator_multi_agent_runs_both_sub_agents(orchestrator_config):
    outputs = replayed(orchestrator_config, "multi_agent")
    _assert_dispatched_all_completed(
        outputs,
        "SREOrchestrator",
        {"LogAnalyzer": ["error logs"], "GeneralWorker": ["alert context"]},
    )


def test_orchestrator_multi_phase_dispatches_general_worker_twice(orchestrator_config):
    outputs = replayed(orchestrator_config, "multi_phase")
    _assert_dispatched_all_completed(
        outputs,
        "SREOrchestrator",
        {"LogAnalyzer": ["error logs"], "GeneralWorker": ["Assess", "remediation"]},
    )
    tasks = [
        e["task"] for e in _executions(outputs["session"]) if e["agent_name"] == "GeneralWorker"
    ]
    assert tasks[0] != tasks[1]
    assert len(_tool_calls(outputs["timeline"], "dispatch_agent")) == 3


@pytest.fixture(scope="module")
def builtin_orchestrator(tmp_path_factory) -> dict[str, Any]:
    """TARSy's TestE2E_OrchestratorBuiltinAgent: an agent is an orchestrator because it
    has sub-agents (config ``builtin-orchestrator``, no ``orchestrator:`` block)."""
    tmp = tmp_path_factory.mktemp("builtin-orchestrator")
    with scenario_deployment("builtin-orchestrator", tmp) as run:
        return _replay(
            run,
            "builtin",
            "test-builtin-orchestrator",
            "Payment service 5xx errors after deploy-5678",
            gated="InvestigationOrchestrator",
        )


def test_an_agent_with_sub_agents_orchestrates_them(builtin_orchestrator):
    _assert_dispatched_all_completed(
        builtin_orchestrator,
        "InvestigationOrchestrator",
        {"LogAnalyzer": ["error logs"], "GeneralWorker": ["alert context"]},
    )
    # Its tools are the orchestration tools (it has no MCP server of its own).
    [first, *_] = [
        c for c in builtin_orchestrator["llm_calls"] if c["agent"] == "InvestigationOrchestrator"
    ]
    names = {
        d["name"]
        for tool in first["body"].get("tools", [])
        for d in tool.get("functionDeclarations", [])
    }
    assert names == {
        "orchestrator__dispatch_agent",
        "orchestrator__list_agents",
        "orchestrator__cancel_agent",
    }


# --- TestE2E_OrchestratorSubAgentFailure ------------------------------------------------------


def test_orchestrator_completes_when_a_sub_agent_fails(orchestrator_config):
    outputs = replayed(orchestrator_config, "sub_agent_failure")
    session = outputs["session"]
    assert session["status"] == "completed", outputs["log"]
    assert session["final_analysis"]
    executions = {e["agent_name"]: e for e in _executions(session)}
    assert len(_executions(session)) == 4
    assert executions["SREOrchestrator"]["status"] == "completed"
    assert executions["LogAnalyzer"]["status"] == "failed"
    assert "model overloaded" in executions["LogAnalyzer"]["error_message"]
    assert executions["GeneralWorker"]["status"] == "completed"
    # TARSy asks LogAnalyzer's model three times (two iterations and a forced
    # conclusion); here a failed call ends the agent: one call (docs/tarsy.md).
    assert [c["agent"] for c in outputs["llm_calls"]].count("LogAnalyzer") == 1


# --- TestE2E_OrchestratorListAgents -----------------------------------------------------------


def test_orchestrator_lists_its_agents(orchestrator_config):
    outputs = replayed(orchestrator_config, "list_agents")
    session = outputs["session"]
    assert session["status"] == "completed", outputs["log"]
    [listed] = _tool_calls(outputs["timeline"], "list_agents")
    assert listed["metadata"]["tool_type"] == "orchestrator"
    executions = _executions(session)
    assert len(executions) == 4
    assert all(e["status"] == "completed" for e in executions), executions
    dispatched = json.loads(listed["content"])["dispatched"]
    assert sorted(d["name"] for d in dispatched) == ["GeneralWorker", "LogAnalyzer"]


# --- TestE2E_OrchestratorCancelSpecific -------------------------------------------------------


def test_orchestrator_cancels_one_sub_agent(orchestrator_config):
    outputs = replayed(orchestrator_config, "cancel_specific")
    session = outputs["session"]
    assert session["status"] == "completed", outputs["log"]
    assert session["final_analysis"]
    executions = {e["agent_name"]: e for e in _executions(session)}
    assert len(_executions(session)) == 4
    assert executions["SREOrchestrator"]["status"] == "completed"
    assert executions["LogAnalyzer"]["status"] == "cancelled"
    assert executions["GeneralWorker"]["status"] == "completed"
    [cancel] = _tool_calls(outputs["timeline"], "cancel_agent")
    # The id the dispatch returned, written into the call by the scripted model.
    assert json.loads(cancel["metadata"]["arguments"]) == {
        "execution_id": int(executions["LogAnalyzer"]["execution_id"])
    }
    assert cancel["status"] == "completed"
    _assert_trace_nests(outputs["trace"], "SREOrchestrator", ["GeneralWorker", "LogAnalyzer"])


# --- TestE2E_OrchestratorCancellation (orchestrator_cancel_test.go) ----------------------------


@pytest.fixture(scope="module")
def orchestrator_cancellation(tmp_path_factory) -> dict[str, Any]:
    """The orchestrator and both sub-agents wait on their models; the session is
    cancelled through the API."""

    def cancel_when_all_wait(run: Running, session_id: str, since: int) -> None:
        wait(
            lambda: sum(c["blocked"] for c in run.scenario.llm_calls()[since:]) >= 3,
            "the orchestrator and both sub-agents waiting",
            timeout=30,
        )
        run.call("POST", f"/sessions/{session_id}/cancel")

    tmp = tmp_path_factory.mktemp("orchestrator-cancel")
    # TARSy's WithSessionTimeout(2*time.Minute).
    with scenario_deployment("orchestrator-cancel", tmp, {"TARSY_SESSION_TIMEOUT": "120"}) as run:
        return _replay(
            run,
            "cancellation",
            "test-orchestrator-cancel",
            "Cancellation test alert",
            gated=None,
            before_end=cancel_when_all_wait,
        )


# TARSy's testdata.OrchestratorCancellationExpectedEvents.
CANCELLATION_EVENTS = [
    {"type": "session.status", "status": "in_progress"},
    {"type": "stage.status", "stage_name": "orchestrate", "status": "started"},
    created("llm_tool_call", status="streaming", metadata={"tool_name": "dispatch_agent"}),
    completed("llm_tool_call"),
    created("llm_tool_call", status="streaming", metadata={"tool_name": "dispatch_agent"}),
    completed("llm_tool_call"),
    {"type": "stage.status", "stage_name": "orchestrate", "status": "cancelled"},
    {"type": "session.status", "status": "cancelled"},
]


def test_cancelling_the_session_cancels_the_orchestrator_and_its_sub_agents(
    orchestrator_cancellation,
):
    outputs = orchestrator_cancellation
    session = outputs["session"]
    assert session["status"] == "cancelled", outputs["log"]
    assert [(s["stage_name"], s["status"]) for s in session["stages"]] == [
        ("orchestrate", "cancelled")
    ]
    executions = _executions(session)
    assert sorted(e["agent_name"] for e in executions) == [
        "GeneralWorker",
        "LogAnalyzer",
        "SREOrchestrator",
    ]
    assert all(e["status"] == "cancelled" for e in executions), executions
    assert all(item["status"] != "streaming" for item in outputs["timeline"])
    _assert_all_events_name_the_session(outputs)
    assert events_not_in_order(outputs["stored_events"], CANCELLATION_EVENTS) == []
