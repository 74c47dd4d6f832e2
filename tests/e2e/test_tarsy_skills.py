"""TARSy's skills scenarios, replayed against this implementation (issue 20).

Replays TARSy's ``test/e2e/skills_test.go``: TestE2E_SkillsRequiredAndOnDemand (with
its golden files: session, trace list and every trace interaction), then
TestE2E_SkillsPartialFailure and TestE2E_SkillsAllInvalid, one after another on one
deployment of config ``skills`` (each its own script, taken by the fake model at the
session's first call); TestE2E_SkillsOrchestratorSubAgent (config
``skills-orchestrator``) and TestE2E_SkillsDirectoryLayout (config
``skills-dir-layout``). The configurations are TARSy's, unchanged
(tests/compat/tarsy_configs/skills*/), the model is TARSy's script at the Gemini wire
(tests/compat/scenarios/skills*/). TARSy's CapturedInputs are what the fake model was
sent, in order; its gates (orchIter2Gate, subAgentGate) are the fake's named holds.

Where this implementation differs on purpose:
- the system prompt's words and order are ours (the skill sections come after the MCP
  tool instructions): the prompts are compared by their parts (TARSy's skill sections
  word for word, the tools offered, the conversation's roles, the tool results), not
  as a whole;
- a tool result marked ``is_error`` (``load_skill`` naming no skill it has) is a
  ``failed`` timeline item (TARSy: ``completed``, with ``is_error`` true);
- an answer is one timeline item, streamed and then marked ``final_analysis`` (TARSy: an
  ``llm_response``, then a ``final_analysis`` copy);
- a chat question is its chat stage's first item: the stage starts, then the
  ``user_question`` item (TARSy: the other way round);
- the orchestration tools reach the model as ``orchestrator__dispatch_agent`` (TARSy:
  ``dispatch_agent``); ``load_skill`` is bare at the wire in both.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import (
    SCENARIOS,
    Running,
    SocketClient,
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

SKILLS = SCENARIOS / "skills"


# --- what the model was sent (TARSy's CapturedInputs), at the Gemini wire ------------------


def _system(call: dict[str, Any]) -> str:
    body = call["body"]
    parts = (body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts")
    return "\n".join(str(part.get("text", "")) for part in parts or [])


def _tools(call: dict[str, Any]) -> list[str]:
    """TARSy's assertHasTool: the names of the functions offered."""
    return [
        declaration["name"]
        for tool in call["body"].get("tools", [])
        for declaration in tool.get("functionDeclarations", [])
    ]


def _tool_results(call: dict[str, Any], tool: str) -> list[str]:
    """TARSy's findToolResultMessage: the results of ``tool`` in the conversation sent."""
    return [
        str((part["functionResponse"].get("response") or {}).get("result", ""))
        for content in call["body"].get("contents", [])
        for part in content.get("parts", [])
        if "functionResponse" in part and part["functionResponse"].get("name") == tool
    ]


def _tool_result(call: dict[str, Any], tool: str) -> str:
    found = _tool_results(call, tool)
    assert found, f"no {tool} result in the conversation sent"
    return found[0]


def _tool_calls(timeline: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    """TARSy's findAllTimelineEvents, by the API's (TARSy's) tool_name; the status is
    asserted where it matters (ours: a result with ``is_error`` is a failed item)."""
    return [
        item
        for item in sorted(timeline, key=lambda i: i["sequence_number"])
        if item["event_type"] == "llm_tool_call"
        and (item.get("metadata") or {}).get("tool_name") == tool
    ]


# --- replaying one of TARSy's tests on a running deployment ------------------------------------


def _replay(
    run: Running,
    name: str,
    alert_type: str,
    data: str,
    *,
    script: str | None = None,
    tools: str | None = None,
    question: str | None = None,
    during=None,
) -> dict[str, Any]:
    """One of TARSy's tests: its script and tool results in place of the last test's, a
    WebSocket client on its session (TARSy's WSConnect), its alert, ``during`` (the
    test's gates), the session's end, its chat question answered, and what the API then
    says (session, timeline, trace and every trace interaction's detail)."""
    scenario = run.scenario
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
        if during is not None:
            during(run, session_id)
        status = run.wait_status(session_id)
        chat = None
        if question is not None and status == "completed":
            chat = run.ask(session_id, question)
            socket.wait_for(
                lambda e: (
                    e["type"] == "stage.status"
                    and e.get("stage_id") == chat["stage_id"]
                    and e.get("status") == "completed"
                ),
                "the chat stage.status completed event",
            )
        else:
            socket.wait_for(
                lambda e: e["type"] == "session.status" and e.get("status") == status,
                f"the session.status {status} event",
            )
        outputs = run.outputs(session_id)
        outputs["events"] = list(socket.events)
        outputs["stored_events"] = socket.stored()
    finally:
        socket.close()
    outputs["llm_calls"] = outputs["llm_calls"][since:]
    outputs["session_id"] = session_id
    outputs["chat"] = chat
    details = {}
    for stage in outputs["trace"]["stages"]:
        for execution in flatten(stage["executions"]):
            for kind in ("llm", "mcp"):
                for item in execution[f"{kind}_interactions"]:
                    path = f"/sessions/{session_id}/trace/{kind}/{item['id']}"
                    details[f"{kind}-{item['id']}"] = run.get(path)
    outputs["details"] = details
    outputs["db_timeline_count"] = run.tarsy.query(
        "SELECT count(*) FROM alert_sessions_timelineevent WHERE session_id = %s",
        (session_id.replace("-", ""),),
    )[0][0]
    dump(f"skills-{name}", outputs)
    return outputs


@pytest.fixture(scope="module")
def skills_config(tmp_path_factory) -> dict[str, Any]:
    """TARSy's three tests on config ``skills``, one after another on one deployment."""
    tmp = tmp_path_factory.mktemp("skills")
    tools = tools_copy(tmp, SKILLS / "mcp_tools.json")
    runs: dict[str, Any] = {}
    replays: list[tuple[str, str, dict[str, Any]]] = [
        # TestE2E_SkillsRequiredAndOnDemand: two stages, the summary, a chat question.
        ("required_and_on_demand", "Pod OOMKilled in production",
         {"question": "What is a Kubernetes pod?"}),
        # TestE2E_SkillsPartialFailure: load_skill naming one skill it has, one it has not.
        ("partial_failure", "Test partial failure",
         {"script": "partial_failure.json", "tools": "empty_pods_tools.json"}),
        # TestE2E_SkillsAllInvalid: load_skill naming no skill it has.
        ("all_invalid", "Test all-invalid skills", {"script": "all_invalid.json"}),
    ]  # fmt: skip
    with scenario_deployment("skills", tmp, tools=tools) as run:
        for name, data, how in replays:
            try:
                runs[name] = _replay(run, name, "test-skills", data, **how)
            except Exception as exc:  # the other tests' sessions still run
                runs[name] = {"error": exc, "log": run.tarsy.log_tail(80)}
    return runs


# --- TestE2E_SkillsRequiredAndOnDemand --------------------------------------------------------


@pytest.fixture(scope="module")
def required_and_on_demand(skills_config) -> dict[str, Any]:
    return replayed(skills_config, "required_and_on_demand")


def test_skills_session_completes_and_its_chat_is_answered(required_and_on_demand):
    outputs = required_and_on_demand
    session = outputs["session"]
    assert session["status"] == "completed", outputs["log"]
    assert session["final_analysis"]
    assert outputs["chat"] is not None
    [chat] = [s for s in session["stages"] if s["id"] == outputs["chat"]["stage_id"]]
    assert chat["status"] == "completed"


def test_skills_make_tarsys_seven_model_calls(required_and_on_demand):
    calls = required_and_on_demand["llm_calls"]
    # 3 (investigation) + 1 (remediation) + 1 (executive summary) + 2 (chat)
    assert len(calls) == 7
    assert all(call["answered"] for call in calls)


def test_required_skill_is_in_the_investigators_prompt_and_the_other_on_demand(
    required_and_on_demand,
):
    investigator = required_and_on_demand["llm_calls"][0]
    system = _system(investigator)
    assert "You are SkillInvestigator" in system
    # A1: the required skill, its heading and its body.
    assert "## Pre-loaded Skills" in system
    assert "### kubernetes-basics" in system
    assert "A pod is the smallest deployable unit" in system
    # A2: the on-demand catalog names networking, and load_skill.
    assert "## Available Skills" in system
    catalog = system[system.index("## Available Skills") :]
    assert "networking" in catalog
    assert "load_skill" in system
    # A required skill is never also on demand.
    assert "**kubernetes-basics**" not in catalog
    # A3: load_skill is offered.
    assert "load_skill" in _tools(investigator)


def test_loaded_skill_is_sent_back_as_the_tool_result(required_and_on_demand):
    # A4: the investigator's second call carries the networking skill's body.
    result = _tool_result(required_and_on_demand["llm_calls"][1], "load_skill")
    assert "DNS Resolution" in result
    assert "TCP Connectivity" in result


def test_an_agent_without_a_skills_list_has_every_skill_on_demand(required_and_on_demand):
    # A5: SkillRemediator names no skills: both are in its catalog.
    remediator = required_and_on_demand["llm_calls"][3]
    system = _system(remediator)
    assert "You are SkillRemediator" in system
    assert "## Available Skills" in system
    catalog = system[system.index("## Available Skills") :]
    assert "kubernetes-basics" in catalog
    assert "networking" in catalog
    assert "## Pre-loaded Skills" not in system
    assert "load_skill" in _tools(remediator)


def test_the_chat_agent_has_skills_on_demand_and_loads_one(required_and_on_demand):
    calls = required_and_on_demand["llm_calls"]
    # A6: the chat agent's first call: the catalog and load_skill.
    assert "## Available Skills" in _system(calls[5])
    assert "load_skill" in _tools(calls[5])
    # A7: its second call carries kubernetes-basics's body.
    assert "A pod is the smallest deployable unit" in _tool_result(calls[6], "load_skill")


def test_skills_timeline_has_both_load_skill_calls_and_the_mcp_call(required_and_on_demand):
    outputs = required_and_on_demand
    timeline = outputs["timeline"]
    assert timeline
    # B1: two load_skill calls (investigation, chat), completed, with the skills' bodies.
    investigation, chat = _tool_calls(timeline, "load_skill")
    assert investigation["event_type"] == "llm_tool_call"
    assert investigation["status"] == "completed"
    assert "DNS Resolution" in investigation["content"]
    assert chat["status"] == "completed"
    assert "A pod is the smallest deployable unit" in chat["content"]
    assert investigation["metadata"]["tool_type"] == "skill"
    # B2: the MCP tool call names its server.
    [pods] = _tool_calls(timeline, "get_pods")
    assert pods["metadata"]["server_name"] == "test-mcp"
    # B3: the API's timeline is the database's.
    assert len(timeline) == outputs["db_timeline_count"]


def test_a_required_skill_is_a_skill_loaded_item(required_and_on_demand):
    """Ours (TARSy too, though its test does not assert it): the investigator's required
    skill is on its timeline, its body the item's text."""
    session, timeline = required_and_on_demand["session"], required_and_on_demand["timeline"]
    [investigator] = session["stages"][0]["executions"]
    loaded = [i for i in timeline if i["event_type"] == "skill_loaded"]
    assert [(i["execution_id"], i["metadata"]["skill_name"]) for i in loaded] == [
        (investigator["execution_id"], "kubernetes-basics")
    ]
    assert "A pod is the smallest deployable unit" in loaded[0]["content"]


def test_skills_stages_and_executions_are_tarsys(required_and_on_demand):
    stages = required_and_on_demand["session"]["stages"]
    assert [s["stage_name"] for s in stages] == [
        "investigation",
        "remediation",
        "Executive Summary",
        "Chat",
    ]
    assert [[e["agent_name"] for e in s["executions"]] for s in stages] == [
        ["SkillInvestigator"],
        ["SkillRemediator"],
        ["ExecSummaryAgent"],
        ["ChatAgent"],
    ]


def _golden(name: str) -> Any:
    return without_durations(
        json.loads((SKILLS / f"{name}.golden").read_text().replace("{DURATION_MS}", "0"))
    )


def test_skills_session_is_tarsys_golden_key_by_key(required_and_on_demand):
    found = differences(_golden("session"), without_durations(required_and_on_demand["session"]))
    # A stage says when it started; TARSy never sets it (null in its golden files).
    started = [d for d in found if re.fullmatch(r"\.stages\[\d\]\.started_at: ours '.*'.*", d)]
    assert len(started) == 4
    assert [d for d in found if d not in started] == []


def test_skills_trace_list_is_tarsys_golden(required_and_on_demand):
    found = differences(_golden("trace_list"), without_durations(required_and_on_demand["trace"]))
    assert found == []


def _skill_sections(system: str) -> str:
    """A system prompt's skill sections: from the first skills heading to the catalog's
    end (the skills' own text holds ``##`` headings, so no heading ends them)."""
    starts = [system.find(h) for h in ("## Pre-loaded Skills", "## Available Skills")]
    starts = [i for i in starts if i >= 0]
    end = system.find("</available_skills>")
    if not starts or end < 0:
        return ""
    return system[min(starts) : end + len("</available_skills>")]


def _our_interactions(outputs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """TARSy's walk of the trace: per stage and execution, its model calls and tool
    interactions by creation (a tie: by server), then the session's; each named as
    TARSy names its golden file (``NN_<Agent>_<kind>_<label>_<count>.golden``)."""
    entries: list[tuple[str, str, str, dict[str, Any]]] = []
    for stage in outputs["trace"]["stages"]:
        for execution in stage["executions"]:
            agent = execution["agent_name"]
            mine = [
                ("llm", i["interaction_type"], i["created_at"], "", i)
                for i in execution["llm_interactions"]
            ] + [
                ("mcp", i.get("tool_name") or i["interaction_type"], i["created_at"],
                 i.get("server_name") or "", i)
                for i in execution["mcp_interactions"]
            ]  # fmt: skip
            mine.sort(key=lambda e: (e[2], e[3]))
            entries += [(agent, kind, label, item) for kind, label, _, _, item in mine]
    for item in outputs["trace"]["session_interactions"]:
        entries.append(("Session", "llm", item["interaction_type"], item))
    counts: dict[str, int] = {}
    named = []
    for index, (agent, kind, label, item) in enumerate(entries, start=1):
        key = f"{agent}_{label}"
        counts[key] = counts.get(key, 0) + 1
        name = f"{index:02d}_{agent}_{kind}_{label.replace(' ', '_')}_{counts[key]}.golden"
        named.append((name, outputs["details"][f"{kind}-{item['id']}"]))
    return named


def test_skills_trace_interactions_are_tarsys_golden(required_and_on_demand):
    """TARSy's trace detail files, in its order and by its names: what each call was,
    what it was sent and answered (the messages' roles, and the tool results word for
    word, and TARSy's skill sections: the rest of the prompts' words are our own); each
    tool list, and each tool call's arguments and result."""
    ours = _our_interactions(required_and_on_demand)
    golden = golden_interactions(SKILLS)
    assert [name for name, _ in ours] == [name for name, _, _ in golden]
    for (name, detail), (_, head, in_order) in zip(ours, golden, strict=True):
        sections = dict(in_order)
        same = ["interaction_type", "model_name", "input_tokens", "output_tokens",
                "total_tokens", "thinking_content", "server_name", "tool_name"]  # fmt: skip
        assert {k: detail.get(k) for k in same if k in head} == {
            k: head[k] for k in same if k in head
        }, name
        if "_llm_" in name:
            # TARSy's iteration, messages_count, text_length, tool_calls_count.
            for part in ("llm_request", "llm_response"):
                assert head[part].items() <= detail[part].items(), (name, detail[part])
            roles = [key.split(":")[1].split()[0] for key, _ in in_order]
            assert [m["role"] for m in detail["conversation"]] == roles, name
            # TARSy's skill sections (required skills' text, the catalog), word for word.
            system = dict(in_order).get("MESSAGE: system", "")
            if block := _skill_sections(system):
                [ours_system] = [m for m in detail["conversation"] if m["role"] == "system"]
                assert block in ours_system["content"], name
            # The tool results the model was sent, word for word.
            theirs = [text.strip() for key, text in in_order if key.startswith("MESSAGE: tool")]
            mine = [m["content"].strip() for m in detail["conversation"] if m["role"] == "tool"]
            assert mine == theirs, name
        elif head["interaction_type"] == "tool_list":
            tools = json.loads(sections["AVAILABLE_TOOLS"])
            assert sorted(detail["available_tools"]) == sorted(t["name"] for t in tools), name
        else:
            assert detail["tool_arguments"] == json.loads(sections["TOOL_ARGUMENTS"]), name
            assert detail["tool_result"] == json.loads(sections["TOOL_RESULT"]), name


# TARSy's testdata.SkillsExpectedEvents. Ours: an answer's item completes as
# final_analysis (TARSy completes an llm_response and creates a final_analysis copy).
SKILLS_EVENTS = [
    {"type": "session.status", "status": "in_progress"},
    {"type": "stage.status", "stage_name": "investigation", "status": "started"},
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed(
        "llm_thinking", content="Let me load the networking skill for this investigation.", group=1
    ),
    completed("llm_response", content="Loading networking knowledge.", group=1),
    created(
        "llm_tool_call",
        status="streaming",
        metadata={"tool_name": "load_skill", "arguments": '{"names":["networking"]}'},
    ),
    completed("llm_tool_call"),
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed("llm_thinking", content="Now let me check the pod status.", group=2),
    completed("llm_response", content="Checking pods.", group=2),
    created(
        "llm_tool_call",
        status="streaming",
        metadata={
            "server_name": "test-mcp",
            "tool_name": "get_pods",
            "arguments": '{"namespace":"default"}',
        },
    ),
    completed("llm_tool_call"),
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed(
        "llm_thinking",
        content="Pod is OOMKilled. The networking skill confirms connectivity is fine.",
        group=3,
    ),
    completed(
        "final_analysis",
        content="Investigation complete: pod-1 is OOMKilled. Network connectivity verified.",
        group=3,
    ),
    {"type": "stage.status", "stage_name": "investigation", "status": "completed"},
    {"type": "stage.status", "stage_name": "remediation", "status": "started"},
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed(
        "llm_thinking",
        content="The investigation found OOM issues. Recommending memory increase.",
        group=4,
    ),
    completed(
        "final_analysis", content="Remediation: increase memory limit for pod-1 to 1Gi.", group=4
    ),
    {"type": "stage.status", "stage_name": "remediation", "status": "completed"},
    {"type": "session.status", "status": "completed"},
    {"type": "chat.created"},
    # Ours: the question is its chat stage's first item, after the stage's start (TARSy:
    # the question, then the stage).
    {"type": "stage.status", "stage_name": "Chat", "status": "started"},
    created("user_question", status="completed", content="What is a Kubernetes pod?"),
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed(
        "llm_thinking",
        content="Let me load the kubernetes-basics skill to answer this question.",
        group=5,
    ),
    completed("llm_response", content="Loading Kubernetes knowledge.", group=5),
    created(
        "llm_tool_call",
        status="streaming",
        metadata={"tool_name": "load_skill", "arguments": '{"names":["kubernetes-basics"]}'},
    ),
    completed("llm_tool_call"),
    created("llm_thinking", status="streaming"),
    created("llm_response", status="streaming"),
    completed(
        "llm_thinking", content="Based on the skill content, pods are the smallest unit.", group=6
    ),
    completed(
        "final_analysis",
        content="A pod is the smallest deployable unit in Kubernetes. The OOMKilled pod needs "
        "its memory limit increased.",
        group=6,
    ),
    {"type": "stage.status", "stage_name": "Chat", "status": "completed"},
]


def test_skills_websocket_events_come_in_tarsys_order(required_and_on_demand):
    outputs = required_and_on_demand
    control = ("connection.established", "subscription.confirmed", "pong", "catchup.overflow")
    events = [e for e in outputs["events"] if e["type"] not in control]
    assert events
    assert {e.get("session_id") for e in events} == {outputs["session_id"]}
    assert events_not_in_order(outputs["stored_events"], SKILLS_EVENTS) == []


# --- TestE2E_SkillsPartialFailure, TestE2E_SkillsAllInvalid -----------------------------------


def test_load_skill_with_one_unknown_name_loads_the_other(skills_config):
    outputs = replayed(skills_config, "partial_failure")
    calls = outputs["llm_calls"]
    assert len(calls) >= 2
    result = _tool_result(calls[1], "load_skill")
    assert "DNS Resolution" in result
    assert "the following skill names were not found: nonexistent-skill" in result
    [loaded] = _tool_calls(outputs["timeline"], "load_skill")
    assert loaded["status"] == "completed"
    assert "DNS Resolution" in loaded["content"]
    assert "nonexistent-skill" in loaded["content"]
    assert loaded["metadata"]["is_error"] is False  # partial success is no error
    assert outputs["session"]["status"] == "completed", outputs["log"]


def test_load_skill_with_no_known_name_is_an_error_result(skills_config):
    outputs = replayed(skills_config, "all_invalid")
    calls = outputs["llm_calls"]
    assert len(calls) >= 2
    assert "no valid skills found" in _tool_result(calls[1], "load_skill")
    [loaded] = _tool_calls(outputs["timeline"], "load_skill")
    assert "no valid skills found" in loaded["content"]
    assert loaded["metadata"]["is_error"] is True
    # Ours: an error result is a failed item (TARSy: completed, with is_error true).
    assert loaded["status"] == "failed"
    assert outputs["session"]["status"] == "completed", outputs["log"]


# --- TestE2E_SkillsOrchestratorSubAgent -------------------------------------------------------


def _release_in_tarsys_order(run: Running, session_id: str) -> None:
    """TARSy's gate goroutine: once the orchestrator's second call waits, let it answer;
    once that answer is recorded, let SkillWorker's model answer."""
    run.wait_status(session_id, "in_progress")
    wait(
        lambda: any(
            c["agent"] == "SREOrchestrator" and c["blocked"] for c in run.scenario.llm_calls()
        ),
        "SREOrchestrator's held call",
        timeout=60,
    )
    baseline = llm_interaction_count(run, session_id)
    open_gate(run, "orchestrator-iteration-2")
    wait(
        lambda: llm_interaction_count(run, session_id) > baseline, "its answer recorded", timeout=60
    )
    open_gate(run, "sub-agents")


@pytest.fixture(scope="module")
def skills_orchestrator(tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("skills-orchestrator")
    with scenario_deployment("skills-orchestrator", tmp) as run:
        return _replay(
            run,
            "orchestrator",
            "test-skills-orchestrator",
            "Network connectivity check needed",
            during=_release_in_tarsys_order,
        )


def test_a_sub_agent_is_offered_its_skills_and_loads_one(skills_orchestrator):
    outputs = skills_orchestrator
    assert outputs["session"]["status"] == "completed", outputs["log"]
    calls = outputs["llm_calls"]
    [first, *_] = [c for c in calls if c["agent"] == "SkillWorker"]
    system = _system(first)
    assert "## Available Skills" in system
    assert "networking" in system[system.index("## Available Skills") :]
    assert "load_skill" in _tools(first)
    # TARSy's first call carrying a load_skill result is SkillWorker's second.
    [with_result, *_] = [c for c in calls if _tool_results(c, "load_skill")]
    assert with_result["agent"] == "SkillWorker"
    assert "DNS Resolution" in _tool_result(with_result, "load_skill")


def test_a_sub_agents_load_skill_is_on_the_timeline_and_in_its_trace(skills_orchestrator):
    outputs = skills_orchestrator
    [loaded, *_] = _tool_calls(outputs["timeline"], "load_skill")
    assert "DNS Resolution" in loaded["content"]
    # In the trace, under the orchestrator's execution, in the sub-agent's tool calls.
    found = [
        item
        for stage in outputs["trace"]["stages"]
        for execution in stage["executions"]
        for sub in execution.get("sub_agents", [])
        for item in sub["mcp_interactions"]
        if item.get("tool_name") == "load_skill"
    ]
    assert found
    assert outputs["session"]["status"] == "completed"


# --- TestE2E_SkillsDirectoryLayout ------------------------------------------------------------


@pytest.fixture(scope="module")
def skills_dir_layout(tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("skills-dir-layout")
    with scenario_deployment("skills-dir-layout", tmp) as run:
        return _replay(run, "dir_layout", "test-dir-layout", "Directory layout test")


def test_a_skill_in_its_own_directory_is_offered_and_loaded(skills_dir_layout):
    outputs = skills_dir_layout
    assert outputs["session"]["status"] == "completed", outputs["log"]
    calls = outputs["llm_calls"]
    assert len(calls) >= 2
    system = _system(calls[0])
    assert "## Available Skills" in system
    assert "simple-skill" in system
    assert "load_skill" in _tools(calls[0])
    assert "directory layout loading works correctly" in _tool_result(calls[1], "load_skill")
    [loaded] = _tool_calls(outputs["timeline"], "load_skill")
    assert "directory layout loading works correctly" in loaded["content"]
