"""TARSy's memory scenarios, replayed against this implementation (issue 20).

Replays TARSy's ``test/e2e/memory_test.go``:

- config ``memory`` (one deployment, the tests one after another, each with its own
  script, taken by the fake model at its session's first call):
  TestE2E_MemoryInjectionAndRecall (with its golden files: timeline, trace list and
  every trace interaction), TestE2E_SearchPastSessionsInChat (golden files
  ``memory-session-search``) and TestE2E_SearchPastSessionsNoMatches (golden files
  ``memory-session-search-no-match``);
- config ``memory-reflector`` (one deployment): TestE2E_MemoryReflectorCreation, then
  TestE2E_MemoryCRUDAPI;
- TestE2E_MemoryDisabled: config ``memory`` with memory off (below).

The configurations are TARSy's, unchanged (tests/compat/tarsy_configs/memory*/); the
model is TARSy's script at the Gemini wire (tests/compat/scenarios/memory*/). TARSy's
CapturedInputs are what the fake model was sent, in order. Each of TARSy's tests has a
database of its own; here the tests of one configuration share one, so the memory store
is emptied between them (TARSy's fresh database), and the past session TARSy writes into
its database for TestE2E_SearchPastSessionsInChat is a real session run, reviewed and
asked about through the API first.

Where this implementation differs on purpose (docs/tarsy.md):
- TARSy's test embedder gives every text one fixed vector (every lesson is similarity 1
  to every query); ours is the built-in ``local-hashing-v1`` (shared words, gate 0.4).
  The seeded lessons keep TARSy's words and are stored with one fixed vector too (the
  alert's and the chat's query's, summed), so that the real recall finds them all, as
  TARSy's does;
- a lesson's line in the prompt is ``- [category, valence, score: 0.87, learned …]
  content`` in both, inside ``<memory_data>``; the recall tool's lines have no age and
  are in ``<memory_data>`` too (TARSy: numbered, with their age, "Found N relevant
  memories" in ``<historical_context>``): the lessons are compared, not the words around
  them; the ``memory_injected`` item says how many lessons the prompt has (TARSy: their
  lines);
- ``search_past_sessions`` answers with a bounded digest of the matching sessions (their
  alert, analysis, review and chat) instead of a model's summary of them: no
  summarisation call (TARSy's script entry for it is dropped), and its no-match answer is
  "No past session matches every word of this query." (TARSy: "No matching sessions
  found for this query.");
- an answer is one timeline item, streamed and then marked final_analysis (TARSy: an
  ``llm_response``, then a ``final_analysis`` copy); the executive summary is an
  ``executive_summary`` item;
- a chat question's timeline item belongs to its chat stage, not to an execution (TARSy:
  to the chat agent's);
- only staff may change or delete a lesson (TARSy: any caller): the CRUD test makes its
  API user staff, after checking that it could not before;
- memory off: TARSy's test runs config ``memory`` without its memory service; ours reads
  ``memory.enabled`` alone, so it runs a copy of that configuration with ``enabled:
  false`` (the file in tarsy_configs/ is untouched).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import (
    CONFIGS,
    SCENARIOS,
    Running,
    agents_by_execution,
    differences,
    dump,
    golden_interactions,
    replayed,
    scenario_deployment,
    wait,
    without_durations,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

MEMORY = SCENARIOS / "memory"
REFLECTOR = SCENARIOS / "memory-reflector"

# TestE2E_MemoryInjectionAndRecall's seeded lessons (content, category, valence).
SEEDED = [
    ("Check PgBouncer connection pool health before investigating query latency",
     "procedural", "positive"),
    ("Normal error rate for batch-processor during 2-4am is ~200/hr", "semantic", "neutral"),
    ("container_memory_rss metric does not exist in this setup", "procedural", "negative"),
]  # fmt: skip
RECALL_ALERT = "Pod latency alert in production"
RECALL_QUERY = "pod health check patterns"

# TARSy seeds with a fake embedder that gives every text one vector. So do we: the
# lessons' vector is the sum of the alert's and the chat query's (local-hashing-v1),
# near enough to both to pass its gate; the recall itself is ours, unchanged.
SEED_LESSONS = """
import numpy as np
from llm.embeddings import LocalHashingEmbedder
from sessions.services.memory import memory_create

local = LocalHashingEmbedder()
both = local.embed(TEXTS, "query").sum(axis=0)
fixed = both / np.linalg.norm(both)


class Fixed:
    name, dimensions, gate = local.name, local.dimensions, local.gate

    def embed(self, texts, task):
        return np.tile(fixed, (len(texts), 1))


for content, category, valence in LESSONS:
    memory_create(embedder=Fixed(), content=content, category=category, valence=valence)
"""

EMPTY_STORE = (
    "from sessions.models import InvestigationMemory\nInvestigationMemory.objects.all().delete()\n"
)


def _shell(run: Running, code: str) -> str:
    return run.tarsy.manage("shell", "-c", code)


def _seed_lessons(run: Running, texts: list[str]) -> None:
    """TARSy's seeded lessons, stored with the one vector of ``texts`` (summed)."""
    _shell(run, f"TEXTS = {texts!r}\nLESSONS = {SEEDED!r}\n{SEED_LESSONS}")


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


def _tool_result(call: dict[str, Any], tool: str) -> str:
    """TARSy's findToolResultMessage: the result of ``tool`` in the conversation sent."""
    found = [
        str((part["functionResponse"].get("response") or {}).get("result", ""))
        for content in call["body"].get("contents", [])
        for part in content.get("parts", [])
        if "functionResponse" in part and part["functionResponse"].get("name") == tool
    ]
    assert found, f"no {tool} result in the conversation sent"
    return found[0]


def _user_prompt(call: dict[str, Any]) -> str:
    return "\n".join(
        str(part.get("text", ""))
        for content in call["body"].get("contents", [])
        if content.get("role") == "user"
        for part in content.get("parts", [])
    )


# --- replaying one of TARSy's tests on a running deployment ------------------------------------


def _use_script(run: Running, script: Path) -> None:
    """The fake model answers from ``script`` from its next call on."""
    scenario = run.scenario
    staged = scenario.tmp / "next-script.json"
    staged.write_text(script.read_text())
    staged.rename(scenario.record.with_name(f"{scenario.record.stem}.script.json"))


def _scoring_done(run: Running, session_id: str) -> str:
    """TARSy's wait for the scoring stage (the Reflector runs in it) to end."""

    def ended() -> str | None:
        stages = run.get(f"/sessions/{session_id}")["stages"]
        scoring = [s for s in stages if s.get("stage_type") == "scoring"]
        if scoring and scoring[0]["status"] not in ("pending", "active", "started"):
            return scoring[0]["status"]
        return None

    return wait(ended, "the scoring stage's end", timeout=120)


def _replay(
    run: Running,
    name: str,
    alert_type: str,
    data: str,
    *,
    question: str | None = None,
    scored: bool = False,
) -> dict[str, Any]:
    """One of TARSy's tests: its alert, the session's end (and its scoring's), its chat
    question answered, and what the API then says (session, timeline, trace and every
    trace interaction's detail, the session's memories)."""
    since = len(run.scenario.llm_calls())
    session_id = run.submit(alert_type, data)
    status = run.wait_status(session_id)
    scoring = _scoring_done(run, session_id) if scored and status == "completed" else None
    chat = run.ask(session_id, question) if question and status == "completed" else None
    outputs = _collect(run, name, session_id, since)
    outputs["chat"] = chat
    outputs["scoring"] = scoring
    return outputs


def _collect(run: Running, name: str, session_id: str, since: int) -> dict[str, Any]:
    """What the API says of a session now (and the model calls since call ``since``)."""
    outputs = run.outputs(session_id)
    outputs["llm_calls"] = outputs["llm_calls"][since:]
    outputs["session_id"] = session_id
    outputs["injected"] = run.get(f"/sessions/{session_id}/injected-memories")
    outputs["taught"] = run.get(f"/sessions/{session_id}/memories")
    details = {}
    for stage in outputs["trace"]["stages"]:
        for execution in stage["executions"]:
            for kind in ("llm", "mcp"):
                for item in execution[f"{kind}_interactions"]:
                    path = f"/sessions/{session_id}/trace/{kind}/{item['id']}"
                    details[f"{kind}-{item['id']}"] = run.get(path)
    outputs["details"] = details
    dump(f"memory-{name}", outputs)
    return outputs


def _seed_past_session(run: Running) -> str:
    """TARSy's seeded past session: completed, reviewed ``accurate`` with feedback, one
    follow-up question answered. TARSy writes it into its database; ours runs it."""
    session_id = run.submit(
        "memory-test", "nginx-proxy pod restarting in namespace coolify with CrashLoopBackOff"
    )
    assert run.wait_status(session_id) == "completed"
    run.call(
        "PATCH",
        "/sessions/review",
        {
            "session_ids": [session_id],
            "action": "complete",
            "quality_rating": "accurate",
            "investigation_feedback": "Good investigation. Probe fix was correct.",
        },
        expect=(200,),
    )
    run.ask(session_id, "Which namespace was the liveness probe misconfigured in?")
    return session_id


@pytest.fixture(scope="module")
def memory_config(tmp_path_factory) -> dict[str, Any]:
    """TARSy's three tests on config ``memory``, one after another on one deployment."""
    tmp = tmp_path_factory.mktemp("memory")
    runs: dict[str, Any] = {}
    with scenario_deployment("memory", tmp) as run:
        try:
            # TestE2E_MemoryInjectionAndRecall: three lessons seeded, an alert, a question.
            _seed_lessons(run, [RECALL_ALERT, RECALL_QUERY])
            runs["recall"] = _replay(
                run,
                "recall",
                "memory-test",
                RECALL_ALERT,
                question="What patterns have we seen before?",
            )
        except Exception as exc:  # the other tests' sessions still run
            runs["recall"] = {"error": exc, "log": run.tarsy.log_tail(80)}
        try:
            # TestE2E_SearchPastSessionsInChat: a past session, then TARSy's.
            _shell(run, EMPTY_STORE)
            _use_script(run, MEMORY / "search_past_sessions.json")
            past = _seed_past_session(run)
            runs["search"] = _replay(
                run,
                "search",
                "memory-test",
                "High latency alert for web service",
                question="Has nginx-proxy been investigated before?",
            )
            runs["search"]["past_session_id"] = past
        except Exception as exc:
            runs["search"] = {"error": exc, "log": run.tarsy.log_tail(80)}
        try:
            # TestE2E_SearchPastSessionsNoMatches.
            _use_script(run, MEMORY / "search_no_matches.json")
            runs["no_match"] = _replay(
                run,
                "no_match",
                "memory-test",
                "Test alert for no-match scenario",
                question="Was nonexistent-service-xyz investigated before?",
            )
        except Exception as exc:
            runs["no_match"] = {"error": exc, "log": run.tarsy.log_tail(80)}
    return runs


# --- golden files ------------------------------------------------------------------------------


def _golden(scenario: str, name: str) -> Any:
    text = (SCENARIOS / scenario / f"{name}.golden").read_text()
    return without_durations(json.loads(text.replace("{DURATION_MS}", "0")))


# TARSy's lesson lines, in its prompts and tool results and in ours: (category, valence,
# content), whatever the score, age and numbering around them.
_LESSON = re.compile(r"\[(\w+), (\w+), score: [^\]]*\] (.+)")


def _lessons(text: str) -> list[tuple[str, str, str]]:
    return [
        (m.group(1), m.group(2), m.group(3).strip())
        for m in _LESSON.finditer(text)
        if m.group(1) in ("semantic", "episodic", "procedural")
    ]


def _agent_of(session: dict[str, Any], item: dict[str, Any]) -> str:
    """TARSy's AnnotateTimelineWithAgent; ours: a chat question belongs to its stage, not
    to an execution, so it is its stage's agent's."""
    agents = agents_by_execution(session)
    if item.get("execution_id") is not None:
        return agents[item["execution_id"]]
    [stage] = [s for s in session["stages"] if s["id"] == item["stage_id"]]
    [execution] = stage["executions"]
    return execution["agent_name"]


def _timeline_differences(scenario: str, outputs: dict[str, Any], adapt=None) -> list[str]:
    """TARSy's timeline golden, per agent and in order: each item's kind, text and status,
    and TARSy's metadata key by key (ours adds call ids and durations). ``adapt(golden
    item, ours)`` turns a TARSy item into ours where we differ on purpose."""
    session, timeline = outputs["session"], outputs["timeline"]
    ours = [
        {**item, "agent": _agent_of(session, item)}
        for item in sorted(timeline, key=lambda i: i["sequence_number"])
    ]
    expected: list[dict[str, Any]] = []
    for item in sorted(_golden(scenario, "timeline"), key=lambda i: i["sequence"]):
        item = {**item, "metadata": dict(item.get("metadata") or {})}
        if item["event_type"] == "final_analysis":
            # Ours: the answer is one item, streamed then marked final_analysis; TARSy
            # streams an llm_response, then adds a final_analysis copy.
            expected.remove(
                next(
                    e
                    for e in expected
                    if (e["agent"], e["event_type"], e["content"])
                    == (item["agent"], "llm_response", item["content"])
                )
            )
            if item["metadata"].pop("interaction_type", None) == "executive_summary":
                item["event_type"] = "executive_summary"  # ours: its own kind
        expected.append(item)
    found = []
    for agent in sorted({e["agent"] for e in expected} | {o["agent"] for o in ours}):
        mine = [o for o in ours if o["agent"] == agent]
        theirs = [e for e in expected if e["agent"] == agent]
        if len(mine) != len(theirs):
            found.append(
                f"{agent}: {[o['event_type'] for o in mine]}, TARSy "
                f"{[e['event_type'] for e in theirs]}"
            )
            continue
        for o, e in zip(mine, theirs, strict=True):
            if adapt is not None:
                e = adapt(e, o)
            for key in ("event_type", "content", "status"):
                if o[key] != e[key]:
                    found.append(f"{agent} {e['event_type']} {key}: ours {o[key]!r}, {e[key]!r}")
            metadata = o.get("metadata") or {}
            for key, value in e["metadata"].items():
                if metadata.get(key) != value:
                    found.append(f"{agent} {e['event_type']} metadata {key}: {metadata.get(key)!r}")
    return found


def _our_interactions(outputs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """TARSy's walk of the trace: per stage and execution, its model calls and tool
    interactions by creation (a tie: by server), then the session's; each named as TARSy
    names its golden file, less the number (``<Agent>_<kind>_<label>_<count>``)."""
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
    counts: dict[str, int] = {}
    named = []
    for agent, kind, label, item in entries:
        key = f"{agent}_{label}"
        counts[key] = counts.get(key, 0) + 1
        name = f"{agent}_{kind}_{label.replace(' ', '_')}_{counts[key]}.golden"
        named.append((name, outputs["details"][f"{kind}-{item['id']}"]))
    return named


def _trace_interaction_differences(
    scenario: str,
    outputs: dict[str, Any],
    *,
    skip: tuple[str, ...] = (),
    last: tuple[str, ...] = (),
) -> list[str]:
    """TARSy's trace detail files, in its order and by its names (less ``skip``): what
    each call was, sent and answered (the messages' roles; the MCP tools' results word for
    word; the lessons in the system prompt, where TARSy has them: the rest of the prompts'
    words are our own); each tool list, and each tool call's arguments (and the MCP
    tools' results). The memory tools' results are asserted by the tests themselves."""
    ours = _our_interactions(outputs)
    golden = [g for g in golden_interactions(SCENARIOS / scenario) if not g[0].endswith(skip)]
    # ``last``: agents whose calls come after the others' in ours (stable otherwise).
    golden.sort(key=lambda g: g[0].split("_")[1] in last)
    theirs_names = [name.split("_", 1)[1] for name, _, _ in golden]
    if [name for name, _ in ours] != theirs_names:
        return [f"ours {[n for n, _ in ours]}, TARSy {theirs_names}"]
    found = []
    for (name, detail), (_, head, in_order) in zip(ours, golden, strict=True):
        sections = dict(in_order)
        same = ["interaction_type", "model_name", "input_tokens", "output_tokens",
                "total_tokens", "thinking_content", "server_name", "tool_name"]  # fmt: skip
        if {k: detail.get(k) for k in same if k in head} != {k: head[k] for k in same if k in head}:
            found.append(f"{name}: {[(k, detail.get(k), head[k]) for k in same if k in head]}")
        if "_llm_" in name:
            for part in ("llm_request", "llm_response"):
                if not head[part].items() <= detail[part].items():
                    found.append(f"{name} {part}: {detail[part]}, TARSy {head[part]}")
            roles = [key.split(":")[1].split()[0] for key, _ in in_order]
            if [m["role"] for m in detail["conversation"]] != roles:
                found.append(f"{name} roles: {[m['role'] for m in detail['conversation']]}")
            system = sections.get("MESSAGE: system", "")
            [ours_system] = [m["content"] for m in detail["conversation"] if m["role"] == "system"]
            has = "Lessons from Past Investigations" in ours_system
            if has != ("Lessons from Past Investigations" in system):
                found.append(f"{name}: lessons in our system prompt: {has}")
            elif has and _lessons(ours_system) != _lessons(system):
                found.append(f"{name}: lessons {_lessons(ours_system)}, TARSy {_lessons(system)}")
            theirs = [
                text.strip()
                for key, text in in_order
                if key.startswith("MESSAGE: tool") and not key.endswith(MEMORY_TOOLS)
            ]
            tool_names = {
                call["id"]: call["name"]
                for m in detail["conversation"]
                for call in m.get("tool_calls") or []
            }
            mine = [
                m["content"].strip()
                for m in detail["conversation"]
                if m["role"] == "tool"
                and not tool_names.get(m.get("tool_call_id"), "").endswith(MEMORY_TOOL_NAMES)
            ]
            if mine != theirs:
                found.append(f"{name} tool results: {mine}, TARSy {theirs}")
        elif head["interaction_type"] == "tool_list":
            tools = json.loads(sections["AVAILABLE_TOOLS"])
            if sorted(detail["available_tools"]) != sorted(t["name"] for t in tools):
                found.append(f"{name}: {detail['available_tools']}")
        else:
            if detail["tool_arguments"] != json.loads(sections["TOOL_ARGUMENTS"]):
                found.append(f"{name}: {detail['tool_arguments']}")
            result = json.loads(sections["TOOL_RESULT"])
            if detail["tool_result"]["is_error"] != result["is_error"]:
                found.append(f"{name}: is_error {detail['tool_result']['is_error']}")
            if detail["tool_name"] not in MEMORY_TOOL_NAMES and (
                detail["tool_result"]["content"] != result["content"]
            ):
                found.append(f"{name}: {detail['tool_result']['content']!r}")
    return found


MEMORY_TOOL_NAMES = ("recall_past_investigations", "search_past_sessions")
MEMORY_TOOLS = tuple(f", {name})" for name in MEMORY_TOOL_NAMES)  # TARSy's section names


# --- TestE2E_MemoryInjectionAndRecall ---------------------------------------------------------


@pytest.fixture(scope="module")
def recall(memory_config) -> dict[str, Any]:
    return replayed(memory_config, "recall")


def test_recall_session_completes_and_its_chat_is_answered(recall):
    session = recall["session"]
    assert session["status"] == "completed", recall["log"]
    [chat] = [s for s in session["stages"] if s["id"] == recall["chat"]["stage_id"]]
    assert chat["status"] == "completed"


def test_recall_makes_tarsys_five_model_calls(recall):
    # Investigation: 2 (tool call + answer) + executive summary: 1 + chat: 2 (recall + answer)
    calls = recall["llm_calls"]
    assert len(calls) == 5
    assert all(call["answered"] for call in calls)


def test_seeded_lessons_are_in_the_investigators_prompt_with_the_recall_tool(recall):
    investigator = recall["llm_calls"][0]
    system = _system(investigator)
    assert "You are MemoryInvestigator" in system
    assert "Lessons from Past Investigations" in system
    assert "[procedural, positive, score:" in system
    assert "Check PgBouncer connection pool health" in system
    assert "recall_past_investigations" in _tools(investigator)
    # Ours: the lessons are the prompt's last section, inside <memory_data>.
    section = system[system.index("## Lessons from Past Investigations") :]
    assert section.rstrip().endswith("</memory_data>")
    assert sorted(_lessons(section)) == sorted((c, v, t) for t, c, v in SEEDED)


def test_the_chat_gets_no_lessons_but_may_recall_them(recall):
    chat = recall["llm_calls"][3]
    assert "Lessons from Past Investigations" not in _system(chat)
    assert "recall_past_investigations" in _tools(chat)


def test_the_chats_recall_result_is_sent_back_to_it(recall):
    result = _tool_result(recall["llm_calls"][4], "recall_past_investigations")
    # Ours: the lessons in <memory_data> (TARSy: "Found 3 relevant memories:" in
    # <historical_context>); the same three, in TARSy's order.
    assert result.startswith("<memory_data>")
    golden = _golden("memory", "timeline")
    [theirs] = [
        i
        for i in golden
        if (i.get("metadata") or {}).get("tool_name") == "recall_past_investigations"
    ]
    assert _lessons(result) == _lessons(theirs["content"])
    assert len(_lessons(result)) == 3


def test_all_three_seeded_lessons_are_recorded_as_injected(recall):
    injected = recall["injected"]
    assert len(injected) == 3
    contents = [m["content"] for m in injected]
    assert "Check PgBouncer connection pool health before investigating query latency" in contents
    assert "Normal error rate for batch-processor during 2-4am is ~200/hr" in contents
    # The memory_injected item names the same lessons.
    [item] = [i for i in recall["timeline"] if i["event_type"] == "memory_injected"]
    assert sorted(item["metadata"]["memory_ids"]) == sorted(m["id"] for m in injected)
    # None of them was taught by this session.
    assert recall["taught"] == []


def _memory_adapt(theirs: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Where our memory items differ from TARSy's on purpose (the module's docstring):
    the same lessons, in other words."""
    if theirs["event_type"] == "memory_injected":
        # Ours names how many lessons (TARSy: their lines); the ids are the injected ones.
        assert len(ours["metadata"]["memory_ids"]) == theirs["metadata"]["count"]
        metadata = {k: v for k, v in theirs["metadata"].items() if k != "memory_ids"}
        return {**theirs, "content": ours["content"], "metadata": metadata}
    tool = theirs["metadata"].get("tool_name")
    if tool == "recall_past_investigations":
        assert _lessons(ours["content"]) == _lessons(theirs["content"])
        return {**theirs, "content": ours["content"]}
    if tool == "search_past_sessions":
        # Ours: a digest of the sessions, no summarising model (its provider and model).
        metadata = {
            k: v for k, v in theirs["metadata"].items() if not k.startswith("summarization_")
        }
        return {**theirs, "content": ours["content"], "metadata": metadata}
    return theirs


def test_recall_timeline_is_tarsys_golden(recall):
    assert _timeline_differences("memory", recall, _memory_adapt) == []


def test_recall_trace_list_is_tarsys_golden(recall):
    assert differences(_golden("memory", "trace_list"), without_durations(recall["trace"])) == []


def test_recall_trace_interactions_are_tarsys_golden(recall):
    assert _trace_interaction_differences("memory", recall) == []


# --- TestE2E_SearchPastSessionsInChat ----------------------------------------------------------


@pytest.fixture(scope="module")
def search(memory_config) -> dict[str, Any]:
    return replayed(memory_config, "search")


def test_search_makes_tarsys_model_calls_less_the_summary(search):
    assert search["session"]["status"] == "completed", search["log"]
    # TARSy: investigation 2 + executive summary 1 + chat 1 + summarisation 1 + chat 1 = 6.
    # Ours: no summarisation call (search_past_sessions answers a digest itself).
    calls = search["llm_calls"]
    assert len(calls) == 5
    assert all(call["answered"] for call in calls)


def test_both_memory_tools_are_offered_to_the_investigator_and_the_chat(search):
    investigator, chat = search["llm_calls"][0], search["llm_calls"][3]
    assert {"search_past_sessions", "recall_past_investigations"} <= set(_tools(investigator))
    assert "search_past_sessions" in _tools(chat)


def test_the_past_session_is_what_search_past_sessions_answers(search):
    """TARSy's A4 (what its summarising model is sent) and A5 (what the chat is sent):
    ours sends the chat the digest itself."""
    result = _tool_result(search["llm_calls"][4], "search_past_sessions")
    assert search["past_session_id"] in result
    assert "nginx-proxy pod restarting in namespace coolify" in result
    assert "misconfigured liveness probe" in result
    assert "accurate" in result
    assert "Good investigation" in result
    assert "Which namespace was the liveness probe misconfigured in?" in result
    assert "misconfigured in namespace coolify on the nginx-proxy deployment" in result
    # Only the one past session: not the session asking, nor the earlier tests'.
    assert result.count("### Session ") == 1


def test_search_timeline_is_tarsys_golden(search):
    assert _timeline_differences("memory-session-search", search, _memory_adapt) == []


def test_search_trace_list_is_tarsys_golden_less_the_summary(search):
    golden = _golden("memory-session-search", "trace_list")
    [chat] = golden["stages"][2]["executions"]
    # Ours: no summarisation interaction.
    chat["llm_interactions"] = [
        i for i in chat["llm_interactions"] if i["interaction_type"] != "summarization"
    ]
    assert differences(golden, without_durations(search["trace"])) == []


def test_search_trace_interactions_are_tarsys_golden_less_the_summary(search):
    found = _trace_interaction_differences(
        "memory-session-search", search, skip=("_llm_summarization_1.golden",)
    )
    assert found == []


# --- TestE2E_SearchPastSessionsNoMatches -------------------------------------------------------


@pytest.fixture(scope="module")
def no_match(memory_config) -> dict[str, Any]:
    return replayed(memory_config, "no_match")


def test_no_match_makes_tarsys_four_model_calls(no_match):
    assert no_match["session"]["status"] == "completed", no_match["log"]
    assert len(no_match["llm_calls"]) == 4
    assert all(call["answered"] for call in no_match["llm_calls"])


def test_no_match_says_so_to_the_chat(no_match):
    result = _tool_result(no_match["llm_calls"][3], "search_past_sessions")
    # Ours: TARSy's "No matching sessions found for this query.", in our words.
    assert result == "No past session matches every word of this query."


def test_no_match_timeline_is_tarsys_golden(no_match):
    assert _timeline_differences("memory-session-search-no-match", no_match, _memory_adapt) == []


def _without_test_mcp_lists(outputs: dict[str, Any]) -> dict[str, Any]:
    """TARSy's no-match test gives test-mcp no tools (and its trace no list of them); ours
    serves the scenario's one tools file (get_pods) to the tests sharing the deployment,
    so test-mcp's list is on the trace: left out here."""
    trace = json.loads(json.dumps(outputs["trace"]))
    for stage in trace["stages"]:
        for execution in stage["executions"]:
            execution["mcp_interactions"] = [
                i
                for i in execution["mcp_interactions"]
                if (i["interaction_type"], i.get("server_name")) != ("tool_list", "test-mcp")
            ]
    return {**outputs, "trace": trace}


def test_no_match_trace_list_is_tarsys_golden(no_match):
    golden = _golden("memory-session-search-no-match", "trace_list")
    ours = _without_test_mcp_lists(no_match)["trace"]
    assert differences(golden, without_durations(ours)) == []


def test_no_match_trace_interactions_are_tarsys_golden(no_match):
    ours = _without_test_mcp_lists(no_match)
    assert _trace_interaction_differences("memory-session-search-no-match", ours) == []


# --- TestE2E_MemoryReflectorCreation, TestE2E_MemoryCRUDAPI ----------------------------------

STAFF = (
    "from django.contrib.auth import get_user_model\n"
    "get_user_model().objects.filter(username='api-client').update(is_staff=True)\n"
)


def _crud(run: Running, session_id: str) -> dict[str, Any]:
    """TARSy's calls of the memory API, in its order, each answer kept."""
    seen: dict[str, Any] = {}
    seen["session_memories"] = run.get(f"/sessions/{session_id}/memories")
    seen["injected"] = run.get(f"/sessions/{session_id}/injected-memories")
    ids = [m["id"] for m in seen["session_memories"]]
    if len(ids) != 2:
        return seen
    seen["one"] = run.get(f"/memories/{ids[0]}")
    seen["list"] = run.get("/memories")
    seen["procedural"] = run.get("/memories?category=procedural")
    seen["by_session"] = run.get(f"/memories?source_session_id={session_id}")
    seen["page_1"] = run.get("/memories?page_size=1&page=1")
    change = {"content": "Updated memory content", "deprecated": True}
    # Ours: only staff may change or delete a lesson (TARSy: any caller).
    seen["patch_not_staff"] = run.call("PATCH", f"/memories/{ids[0]}", change, expect=(403,))
    _shell(run, STAFF)
    seen["updated"] = run.call("PATCH", f"/memories/{ids[0]}", change, expect=(200,))
    seen["fetched"] = run.get(f"/memories/{ids[0]}")
    seen["deprecated"] = run.get("/memories?deprecated=true")
    run.call("DELETE", f"/memories/{ids[1]}", expect=(204,))
    seen["deleted"] = run.call("GET", f"/memories/{ids[1]}", expect=(404,))
    seen["after_delete"] = run.get("/memories")
    seen["ids"] = ids
    return seen


@pytest.fixture(scope="module")
def reflector_config(tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("memory-reflector")
    runs: dict[str, Any] = {}
    with scenario_deployment("memory-reflector", tmp) as run:
        try:
            # TestE2E_MemoryReflectorCreation.
            outputs = _replay(
                run,
                "reflector",
                "test-memory-reflector",
                "Pod OOMKilled in production",
                scored=True,
            )
            outputs["store"] = run.get("/memories")
            runs["reflector"] = outputs
        except Exception as exc:  # the other test's session still runs
            runs["reflector"] = {"error": exc, "log": run.tarsy.log_tail(80)}
        try:
            # TestE2E_MemoryCRUDAPI, on an empty store (TARSy's fresh database).
            _shell(run, EMPTY_STORE)
            _use_script(run, REFLECTOR / "crud.json")
            outputs = _replay(run, "crud", "test-memory-reflector", "Pod OOMKilled", scored=True)
            outputs["api"] = _crud(run, outputs["session_id"])
            runs["crud"] = outputs
        except Exception as exc:
            runs["crud"] = {"error": exc, "log": run.tarsy.log_tail(80)}
        try:
            # TestE2E_MemoryFeedbackReflector, on an empty store.
            _shell(run, EMPTY_STORE)
            _use_script(run, REFLECTOR / "feedback.json")
            since = len(run.scenario.llm_calls())
            scored = _replay(
                run, "feedback-scored", "test-memory-reflector", "Pod OOMKilled in production",
                scored=True,
            )  # fmt: skip
            session_id = scored["session_id"]
            review = {
                "session_ids": [session_id],
                "action": "complete",
                "quality_rating": "partially_accurate",
                "action_taken": "Needs more evidence on resource limits.",
                "investigation_feedback": FEEDBACK,
            }
            run.call("PATCH", "/sessions/review", review, expect=(200,))
            wait(lambda: _feedback_reflector_ended(run, session_id), "the feedback Reflector")
            outputs = _collect(run, "feedback", session_id, since)
            outputs["initial"] = scored["taught"]
            outputs["scoring"] = scored["scoring"]
            runs["feedback"] = outputs
        except Exception as exc:
            runs["feedback"] = {"error": exc, "log": run.tarsy.log_tail(80)}
    return runs


FEEDBACK = (
    "The investigation missed checking Kubernetes resource limits. Always verify limits "
    "before diagnosing OOM."
)


def _feedback_reflector_ended(run: Running, session_id: str) -> str | None:
    for stage in run.get(f"/sessions/{session_id}")["stages"]:
        for execution in stage["executions"]:
            if execution["agent_name"] == "FeedbackReflector" and execution["status"] not in (
                "pending",
                "active",
            ):
                return execution["status"]
    return None


@pytest.fixture(scope="module")
def reflector(reflector_config) -> dict[str, Any]:
    return replayed(reflector_config, "reflector")


def test_reflector_runs_after_the_score_in_the_scoring_stage(reflector):
    assert reflector["session"]["status"] == "completed", reflector["log"]
    assert reflector["scoring"] == "completed"
    # Investigation 2 + executive summary 1 + scoring 2 + Reflector 1 = 6.
    calls = reflector["llm_calls"]
    assert len(calls) == 6
    assert all(call["answered"] for call in calls)
    [scoring] = [s for s in reflector["trace"]["stages"] if s["stage_type"] == "scoring"]
    [execution] = scoring["executions"]
    kinds = [i["interaction_type"] for i in execution["llm_interactions"]]
    assert kinds == ["scoring", "scoring", "memory_extraction"]
    # What the Reflector is sent: the investigation and its score.
    prompt = _user_prompt(calls[5])
    assert "pod-1 is OOMKilled with 5 restarts" in prompt
    assert "Correct conclusion with gaps in evidence." in prompt


def test_reflector_keeps_its_two_lessons(reflector):
    store = reflector["store"]
    assert store["total"] == 2
    contents = sorted(m["content"] for m in store["memories"])
    assert contents == [
        "Pod restarts above 3 in a short window strongly correlate with OOM kills",
        "When investigating OOMKilled pods, always check memory metrics and resource limits "
        "before concluding",
    ]
    for memory in store["memories"]:
        assert memory["project"] == "default"
        assert memory["source_session_id"] == reflector["session_id"]
        assert memory["deprecated"] is False
    assert sorted(m["id"] for m in reflector["taught"]) == sorted(
        m["id"] for m in store["memories"]
    )


@pytest.fixture(scope="module")
def crud(reflector_config) -> dict[str, Any]:
    outputs = replayed(reflector_config, "crud")
    assert outputs["session"]["status"] == "completed", outputs["log"]
    assert outputs["scoring"] == "completed", outputs["log"]
    return outputs["api"] | {"session_id": outputs["session_id"]}


def test_a_sessions_lessons_are_listed_for_it(crud):
    memories = crud["session_memories"]
    assert len(memories) == 2
    for memory in memories:
        assert memory["source_session_id"] == crud["session_id"]
        assert memory["project"] == "default"
        assert memory["deprecated"] is False


def test_a_first_session_was_given_no_lessons(crud):
    assert crud["injected"] == []


def test_one_lesson_is_read_by_its_id(crud):
    one = crud["one"]
    assert one["id"] == crud["ids"][0]
    assert one["content"]
    assert one["category"]
    assert one["created_at"]


def test_the_store_is_listed_filtered_and_paged(crud):
    assert (crud["list"]["total"], crud["list"]["page"]) == (2, 1)
    assert len(crud["list"]["memories"]) == 2
    assert crud["procedural"]["total"] == 1
    assert crud["procedural"]["memories"][0]["category"] == "procedural"
    assert crud["by_session"]["total"] == 2
    page = crud["page_1"]
    assert (page["total"], page["total_pages"], len(page["memories"])) == (2, 2, 1)


def test_a_lesson_is_changed_and_deprecated(crud):
    assert "staff" in str(crud["patch_not_staff"])
    updated = crud["updated"]
    assert (updated["content"], updated["deprecated"]) == ("Updated memory content", True)
    fetched = crud["fetched"]
    assert (fetched["content"], fetched["deprecated"]) == ("Updated memory content", True)
    assert crud["deprecated"]["total"] == 1


def test_a_deleted_lesson_is_gone(crud):
    assert crud["deleted"]
    assert crud["after_delete"]["total"] == 1


# --- TestE2E_MemoryDisabled ------------------------------------------------------------------


@pytest.fixture(scope="module")
def disabled(tmp_path_factory) -> dict[str, Any]:
    """TARSy runs config ``memory`` without a memory service; ours: its copy with memory
    off (the only switch we have), a lesson in the store that the alert would match."""
    tmp = tmp_path_factory.mktemp("memory-disabled")
    config = tmp / "config"
    config.mkdir()
    for file in (CONFIGS / "memory").iterdir():
        (config / file.name).write_text(file.read_text())
    tarsy_yaml = config / "tarsy.yaml"
    original = tarsy_yaml.read_text()
    assert "    enabled: true\n    max_inject: 5" in original
    tarsy_yaml.write_text(
        original.replace("    enabled: true\n    max_inject", "    enabled: false\n    max_inject")
    )
    with scenario_deployment("memory", tmp, config=str(config), script="disabled.json") as run:
        # Lessons its alert would be given, were memory on.
        _seed_lessons(run, ["Test alert"])
        return _replay(run, "disabled", "memory-test", "Test alert")


def test_memory_off_puts_no_lessons_and_no_memory_tools_in_the_prompt(disabled):
    assert disabled["session"]["status"] == "completed", disabled["log"]
    calls = disabled["llm_calls"]
    assert len(calls) >= 1
    assert "Lessons from Past Investigations" not in _system(calls[0])
    assert "recall_past_investigations" not in _tools(calls[0])
    assert "search_past_sessions" not in _tools(calls[0])
    assert disabled["injected"] == []
    assert not [i for i in disabled["timeline"] if i["event_type"] == "memory_injected"]


# --- TestE2E_MemoryFeedbackReflector ---------------------------------------------------------


@pytest.fixture(scope="module")
def feedback(reflector_config) -> dict[str, Any]:
    outputs = replayed(reflector_config, "feedback")
    assert outputs["session"]["status"] == "completed", outputs["log"]
    assert outputs["scoring"] == "completed", outputs["log"]
    return outputs


def test_feedback_reflector_runs_after_the_review_on_the_scoring_stage(feedback):
    # Investigation 2 + executive summary 1 + scoring 2 + Reflector 1 + feedback 1 = 7.
    calls = feedback["llm_calls"]
    assert len(calls) == 7
    assert all(call["answered"] for call in calls)
    [scoring] = [s for s in feedback["session"]["stages"] if s["stage_type"] == "scoring"]
    agents = {e["agent_name"]: e["status"] for e in scoring["executions"]}
    assert agents == {"ScoringAgent": "completed", "FeedbackReflector": "completed"}
    # What it is sent: the investigation, the review and the session's lesson.
    prompt = _user_prompt(calls[6])
    assert FEEDBACK in prompt
    assert "partially_accurate" in prompt
    assert "pod-1 is OOMKilled with 5 restarts" in prompt
    assert "OOMKilled pods need memory metrics verification" in prompt


def test_feedback_lowers_the_old_lesson_and_keeps_a_trusted_new_one(feedback):
    [initial] = feedback["initial"]
    assert initial["content"] == "OOMKilled pods need memory metrics verification"
    lessons = {m["id"]: m for m in feedback["taught"]}
    assert len(lessons) == 2
    # partially_accurate: the session's lesson is trusted 0.6 times as much.
    assert lessons[initial["id"]]["confidence"] == pytest.approx(initial["confidence"] * 0.6)
    [new] = [m for i, m in lessons.items() if i != initial["id"]]
    assert new["content"] == "Always check Kubernetes resource limits before OOM diagnosis"
    assert new["confidence"] == pytest.approx(0.9)
    assert new["source_session_id"] == feedback["session_id"]


def _reflector_adapt(theirs: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Ours: a Reflector's answer is an ``llm_response`` (TARSy: ``final_analysis``): it
    is what the session teaches, not an analysis of the alert."""
    if theirs["event_type"] == "final_analysis" and theirs["agent"] in REFLECTORS:
        return {**theirs, "event_type": "llm_response"}
    return theirs


# The agents whose last answer is a Reflector's (the scoring execution's is its Reflector's).
REFLECTORS = ("FeedbackReflector", "ScoringAgent")


def test_feedback_timeline_is_tarsys_golden(feedback):
    assert _timeline_differences("memory-feedback", feedback, _reflector_adapt) == []


def test_feedback_trace_list_is_tarsys_golden(feedback):
    # Ours: the FeedbackReflector's execution comes after the ScoringAgent's, whose stage
    # it joined later (TARSy: index 0, before it).
    golden = _golden("memory-feedback", "trace_list")
    [stage] = [s for s in golden["stages"] if s["stage_type"] == "scoring"]
    stage["executions"].reverse()
    ours = without_durations(feedback["trace"])
    assert differences(golden, ours) == []


def test_feedback_trace_interactions_are_tarsys_golden(feedback):
    # Ours: the FeedbackReflector's call after the ScoringAgent's (TARSy: before).
    assert (
        _trace_interaction_differences("memory-feedback", feedback, last=("FeedbackReflector",))
        == []
    )
