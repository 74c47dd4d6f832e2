"""TARSy's end-to-end scenarios, replayed against this implementation (issue 20).

Each scenario runs as TARSy's ``test/e2e`` runs it: its configuration directory
unchanged (tests/compat/tarsy_configs/), TARSy's LLM script answered at the wire of each
provider (tests/compat/scenarios/fake_llm.py: Gemini for ``google`` providers, OpenAI
chat completions for ``openai`` ones), its ``command: mock`` MCP servers as real stdio
servers answering TARSy's tool results (scenarios/mock_mcp.py), and a real daphne and
qcluster. What the API then says is compared with TARSy's own golden files after
normalising ids and times; where this implementation differs on purpose, the
comparison says so (docs/tarsy.md).
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import (
    agents_by_execution,
    differences,
    run_scenario,
    scenario_deployment,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> dict[str, Any]:
    """TARSy's TestE2E_Pipeline: an alert, then two chat questions."""
    return run_scenario(
        "pipeline",
        tmp_path_factory.mktemp("pipeline"),
        "test-alert",
        "Pod OOMKilled",
        ("What caused the OOM kill for pod-1?", "What are the current SLO metrics for pod-1?"),
    )


def test_pipeline_stages_and_executions_are_tarsys(pipeline):
    session, scenario = pipeline["session"], pipeline["scenario"]
    assert session["status"] == "completed", pipeline["log"]
    stages = [
        {"stage_index": s["stage_index"], "stage_name": s["stage_name"], "status": s["status"]}
        for s in session["stages"]
    ]
    assert stages == scenario.golden("stages")
    executions = [
        (stage["stage_name"], execution["agent_name"], execution["status"])
        for stage in session["stages"]
        for execution in stage.get("executions", [])
    ]
    golden = scenario.golden("session")
    expected = [
        (stage["stage_name"], execution["agent_name"], execution["status"])
        for stage in golden["stages"]
        for execution in stage.get("executions", [])
    ]
    assert sorted(executions) == sorted(expected)
    assert len(executions) == 11


def test_pipeline_session_fields_are_tarsys(pipeline):
    session, golden = pipeline["session"], pipeline["scenario"].golden("session")
    same = [
        "alert_data", "alert_type", "author", "chain_id", "chat_enabled", "chat_message_count",
        "completed_stages", "cost_completeness", "cost_estimation_enabled", "error_message",
        "estimated_cost_usd", "executive_summary", "executive_summary_error", "failed_stages",
        "final_analysis", "has_action_stages", "has_parallel_stages", "llm_interaction_count",
        "review_status", "status", "total_stages", "current_stage_index",
    ]  # fmt: skip
    assert {key: session.get(key) for key in same} == {key: golden.get(key) for key in same}
    # Every key TARSy sends is there (ours may add some).
    assert set(golden) - set(session) == set()


def test_pipeline_llm_calls_are_tarsys(pipeline):
    calls = pipeline["llm_calls"]
    assert len(calls) == 22, [c["agent"] for c in calls]
    assert all(call["answered"] for call in calls)
    routed = defaultdict(int)
    for call in calls:
        routed[call["agent"]] += 1
    assert dict(routed) == {
        "": 16,
        "ConfigValidator": 2,
        "MetricsValidator": 2,
        "ScalingReviewer": 2,
    }


def _trace_calls(trace: dict[str, Any]) -> list[tuple]:
    """Per agent: its model calls (type, model, tokens) and tool calls, in order."""
    calls = []
    for stage in trace["stages"]:
        for execution in stage["executions"]:
            llm = [
                (
                    i["interaction_type"],
                    i.get("model_name"),
                    i.get("input_tokens"),
                    i.get("output_tokens"),
                )
                for i in execution["llm_interactions"]
            ]
            mcp = sorted(
                (i["interaction_type"], i["server_name"], i.get("tool_name") or "")
                for i in execution["mcp_interactions"]
            )
            calls.append((stage["stage_name"], execution["agent_name"], llm, mcp))
    return sorted(calls, key=lambda call: (call[0], call[1]))


def test_pipeline_trace_is_tarsys(pipeline):
    assert _trace_calls(pipeline["trace"]) == _trace_calls(
        pipeline["scenario"].golden("trace_list")
    )
    assert pipeline["trace"]["session_interactions"] == []


# Where this timeline differs from TARSy's on purpose (docs/tarsy.md):
# - an answer is one item, streamed as it comes and then marked final_analysis; TARSy
#   streams an llm_response and then adds a final_analysis copy of it;
# - the executive summary is an executive_summary item; TARSy's is that pair again,
#   marked interaction_type executive_summary (and synthesis for a synthesis);
# - Google Search grounding is the answer's metadata (``grounding``); TARSy adds a
#   google_search_result item;
# - a chat question belongs to its chat stage, not to the agent answering it;
# - thinking through LangChain says source "langchain" (TARSy's mock says "native").


def _tarsy_timeline(golden: list[dict[str, Any]], backends: dict[str, str]) -> list[tuple]:
    items: list[dict[str, Any]] = []
    for item in sorted(golden, key=lambda i: (i["agent"], i["sequence"])):
        metadata = dict(item.get("metadata") or {})
        kind = item["event_type"]
        if kind == "google_search_result":
            continue  # checked apart: our grounding metadata
        if kind == "final_analysis":
            copies = [
                i for i in items
                if i["event_type"] == "llm_response"
                and (i["agent"], i["content"]) == (item["agent"], item["content"])
            ]  # fmt: skip
            if copies:
                items.remove(copies[-1])
        if metadata.pop("interaction_type", None) == "executive_summary":
            kind = "executive_summary"
        if kind == "llm_thinking":
            metadata["source"] = (
                "native" if backends[item["agent"]] == "google-native" else "langchain"
            )
        items.append({**item, "event_type": kind, "metadata": metadata})
    return sorted(_item_key(i["agent"], i) for i in items)


# TARSy's normalize.go: times inside texts (tool results) become {TIMESTAMP}.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def _item_key(agent: str, item: dict[str, Any]) -> tuple:
    content = _TIMESTAMP.sub("{TIMESTAMP}", item.get("content", ""))
    return (agent, item["event_type"], content, item["status"])


def test_pipeline_timeline_is_tarsys(pipeline):
    session, timeline = pipeline["session"], pipeline["timeline"]
    agents = agents_by_execution(session)
    backends = {}
    stage_agents = {}
    for stage in session["stages"]:
        for execution in stage.get("executions", []):
            backends[execution["agent_name"]] = execution["llm_backend"]
            stage_agents[stage["id"]] = execution["agent_name"]
    ours = []
    metadata_of = defaultdict(list)
    for item in timeline:
        agent = agents.get(item.get("execution_id")) or stage_agents[item["stage_id"]]
        ours.append(_item_key(agent, item))
        metadata_of[_item_key(agent, item)].append(item.get("metadata") or {})
    golden = pipeline["scenario"].golden("timeline")
    assert sorted(ours) == _tarsy_timeline(golden, backends)
    # TARSy's metadata, key by key (ours may add keys: call ids, durations).
    for item in golden:
        if item["event_type"] in ("llm_thinking", "final_analysis", "llm_response"):
            continue  # normalised above
        wanted = item.get("metadata") or {}
        if item["event_type"] == "google_search_result":
            [grounded] = [
                m for key, ms in metadata_of.items() for m in ms
                if key[0] == item["agent"] and "grounding" in m
            ]  # fmt: skip
            sources = grounded["grounding"][0]["grounding_chunks"]
            assert [s["web"]["uri"] for s in sources] == [s["uri"] for s in wanted["sources"]]
            continue
        found = metadata_of[_item_key(item["agent"], item)]
        assert any(wanted.items() <= got.items() for got in found), (item, found)
    forced = [m for key, ms in metadata_of.items() for m in ms if key[0] == "MetricsValidator"]
    assert sum(m.get("forced_conclusion") is True for m in forced) == 2


def test_pipeline_session_is_tarsys_key_by_key(pipeline):
    golden = pipeline["scenario"].golden("session")
    ours = {**pipeline["session"], "duration_ms": 0}
    for stage in ours["stages"]:
        for execution in stage.get("executions", []):
            execution["duration_ms"] = 0
    found = differences(golden, ours)
    # A stage says when it started; TARSy never sets it (null in its golden files).
    started = [d for d in found if re.match(r"\.stages\[\d\]\.started_at: ours '", d)]
    assert len(started) == 9
    assert [d for d in found if d not in started] == [
        # The summary's provider is OpenAI: TARSy records the chain's google-native,
        # which cannot drive it; here the backend that ran it (docs/tarsy.md).
        ".stages[6].executions[0].llm_backend: ours 'langchain', TARSy 'google-native'"
    ]


# --- TestE2E_FailurePropagation ------------------------------------------------------


@pytest.fixture(scope="module")
def failure_propagation(tmp_path_factory) -> dict[str, Any]:
    return run_scenario(
        "failure-propagation",
        tmp_path_factory.mktemp("failure-propagation"),
        "test-failure",
        "System check required",
    )


def test_failure_propagation_fails_fast_as_tarsy(failure_propagation):
    """A parallel stage under ``success_policy: all`` whose CheckerB's model is down:
    the stage and the session fail, the final stage never starts."""
    session = failure_propagation["session"]
    assert session["status"] == "failed", failure_propagation["log"]
    assert session["error_message"]
    stages = session["stages"]
    assert [(s["stage_name"], s["status"]) for s in stages] == [
        ("preparation", "completed"),
        ("parallel-check", "failed"),
    ]
    executions = {
        e["agent_name"]: e["status"] for stage in stages for e in stage.get("executions", [])
    }
    assert executions == {"Preparer": "completed", "CheckerA": "completed", "CheckerB": "failed"}
    assert "LLM service unavailable" in session["error_message"] or any(
        "LLM service unavailable" in (e.get("error_message") or "")
        for stage in stages
        for e in stage.get("executions", [])
    )
    timeline = failure_propagation["timeline"]
    assert timeline
    assert all(item["status"] != "streaming" for item in timeline)
    assert any(item["status"] == "completed" for item in timeline)
    calls = failure_propagation["llm_calls"]
    by_agent = defaultdict(int)
    for call in calls:
        by_agent[call["agent"]] += 1
    # TARSy's count is 4: CheckerB's failed iteration and its failed forced conclusion.
    # Here a provider that answers 503 is retried within the call (3 more attempts), and
    # a failed call ends the agent: one call, four attempts (docs/tarsy.md).
    assert by_agent == {"": 1, "CheckerA": 1, "CheckerB": 4}


# --- TestE2E_Cancellation and TestE2E_Timeout -----------------------------------------
#
# One shape, twice: an investigation whose agents never get an answer ends (cancelled;
# timed out), then on a second session a chat answer ends the same way and the next
# question is answered.

# TARSy's test gives sessions and chat answers 2 s; a loaded CI machine needs a little
# more for the quick session (and the first model call) to fit inside it.
TIMEOUT_SECONDS = "8"


def _interrupted_twice(
    name: str,
    tmp_path: Path,
    *,
    alert_types: tuple[str, str],
    waiting_agents: int,
    ended: str,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``ended`` is how the first session and the first chat answer end: "cancelled"
    (the test cancels each once its model calls wait) or "timed_out" (they run out)."""
    with scenario_deployment(name, tmp_path, extra_env) as run:

        def waiting() -> int:
            return sum(call.get("blocked", False) for call in run.scenario.llm_calls())

        first = run.submit(alert_types[0], name)
        if ended == "cancelled":
            wait(lambda: waiting() >= waiting_agents, "the agents waiting on the model")
            run.call("POST", f"/sessions/{first}/cancel")
        run.wait_status(first, ended)

        second = run.submit(alert_types[1], name)
        run.wait_status(second, "completed")
        asked = run.call("POST", f"/sessions/{second}/chat/messages", {"content": "Ask a question"})
        if ended == "cancelled":
            wait(lambda: waiting() >= waiting_agents + 1, "the answer waiting on the model")
            run.call("POST", f"/sessions/{second}/cancel")
        wait(lambda: run.stage_status(second, asked["stage_id"]) == ended, f"the answer {ended}")
        again = run.ask(second, "Follow-up question")
        assert run.stage_status(second, again["stage_id"]) == "completed"
        return {
            "ended": ended,
            "first": run.get(f"/sessions/{first}"),
            "first_timeline": run.get(f"/sessions/{first}/timeline"),
            "second": run.get(f"/sessions/{second}"),
            "second_timeline": run.get(f"/sessions/{second}/timeline"),
            "llm_calls": run.scenario.llm_calls(),
            "log": run.tarsy.log_tail(200),
        }


def _assert_interrupted_twice(outputs: dict[str, Any], agents: list[str], calls: int) -> None:
    """TARSy's assertions, shared by both scenarios."""
    ended, first, second = outputs["ended"], outputs["first"], outputs["second"]
    assert first["status"] == ended, outputs["log"]
    assert [(s["stage_name"], s["status"]) for s in first["stages"]] == [("investigation", ended)]
    assert sorted((e["agent_name"], e["status"]) for e in first["stages"][0]["executions"]) == [
        (agent, ended) for agent in agents
    ]
    assert all(item["status"] != "streaming" for item in outputs["first_timeline"])

    assert second["status"] == "completed"  # an interrupted chat answer leaves it so
    assert [(s["stage_name"], s["status"]) for s in second["stages"]] == [
        ("quick-check", "completed"),
        ("Executive Summary", "completed"),
        ("Chat", ended),
        ("Chat", "completed"),
    ]
    assert [(e["agent_name"], e["status"]) for s in second["stages"] for e in s["executions"]] == [
        ("QuickInvestigator", "completed"),
        ("ExecSummaryAgent", "completed"),
        ("ChatAgent", ended),
        ("ChatAgent", "completed"),
    ]
    timeline = outputs["second_timeline"]
    assert all(item["status"] != "streaming" for item in timeline)
    # TARSy counts 3 final_analysis items: its executive summary is one; ours is an
    # executive_summary item (docs/tarsy.md).
    kinds = [item["event_type"] for item in timeline]
    assert (kinds.count("final_analysis"), kinds.count("executive_summary")) == (2, 1)
    assert len(outputs["llm_calls"]) == calls


@pytest.fixture(scope="module")
def cancellation(tmp_path_factory) -> dict[str, Any]:
    return _interrupted_twice(
        "cancellation",
        tmp_path_factory.mktemp("cancellation"),
        alert_types=("test-cancel", "test-chat-cancel"),
        waiting_agents=2,
        ended="cancelled",
    )


def test_cancellation_as_tarsy(cancellation):
    _assert_interrupted_twice(cancellation, ["InvestigatorA", "InvestigatorB"], calls=6)


@pytest.fixture(scope="module")
def timeout(tmp_path_factory) -> dict[str, Any]:
    return _interrupted_twice(
        "timeout",
        tmp_path_factory.mktemp("timeout"),
        alert_types=("test-timeout", "test-chat-timeout"),
        waiting_agents=1,
        ended="timed_out",
        extra_env={"TARSY_SESSION_TIMEOUT": TIMEOUT_SECONDS},
    )


def test_timeout_as_tarsy(timeout):
    assert "timed out" in timeout["first"]["error_message"]
    _assert_interrupted_twice(timeout, ["TimeoutAgent"], calls=5)


# --- TestE2E_Concurrency (and its configuration's planted secrets) ------------------

# What TARSy's concurrency configuration plants in its MCP servers' settings: a token as
# the command, secrets in arguments, environment, URL and bearer token.
SENTINELS = ("E2E_SENTINEL", "ghp_FAKE_NOT_REAL_GITHUB_TOKEN")


@pytest.fixture(scope="module")
def concurrency(tmp_path_factory) -> dict[str, Any]:
    """TARSy's TestE2E_Concurrency: four sessions with room for two at a time; each
    agent's model holds its answer until the test lets them all go."""
    tmp_path = tmp_path_factory.mktemp("concurrency")
    with scenario_deployment(
        "concurrency", tmp_path, {"TARSY_MAX_CONCURRENT_SESSIONS": "2"}
    ) as run:

        def held() -> int:
            return sum(call.get("blocked", False) for call in run.scenario.llm_calls())

        ids = [run.submit("test-concurrency", f"Concurrency test session {n}") for n in range(1, 5)]
        try:
            wait(lambda: held() >= 2, "two sessions waiting on the model", timeout=60)
        except AssertionError:
            raise AssertionError((run.get(f"/sessions/{ids[0]}"), run.tarsy.log_tail(80))) from None
        time.sleep(1.0)  # room for a third, which must not come
        while_held = {"held": held(), "active": run.get("/sessions/active")}
        run.scenario.record.with_suffix(".release").touch()

        def statuses() -> list[str]:
            return [run.status(i) for i in ids]

        wait(lambda: statuses() == ["completed"] * 4, "all four sessions")
        seen = {
            "config": json.dumps(run.get("/system/config")),
            "servers": json.dumps(run.get("/system/mcp-servers")),
            "warnings": json.dumps(run.get("/system/warnings")),
        }
        return {
            **while_held,
            "sessions": [run.get(f"/sessions/{i}") for i in ids],
            "timelines": [run.get(f"/sessions/{i}/timeline") for i in ids],
            "llm_calls": run.scenario.llm_calls(),
            "seen": seen,
            "logs": "\n".join(path.read_text() for path in run.tarsy.logs if path.exists()),
        }


def test_concurrency_as_tarsy(concurrency):
    assert concurrency["held"] == 2
    active = concurrency["active"]
    assert (len(active["active"]), len(active["queued"])) == (2, 2)
    for session, timeline in zip(concurrency["sessions"], concurrency["timelines"], strict=True):
        assert session["status"] == "completed"
        assert [(s["stage_name"], s["status"]) for s in session["stages"]] == [
            ("analysis", "completed"),
            ("Executive Summary", "completed"),
        ]
        assert [
            (e["agent_name"], e["status"]) for s in session["stages"] for e in s["executions"]
        ] == [("SimpleAgent", "completed"), ("ExecSummaryAgent", "completed")]
        assert all(item["status"] != "streaming" for item in timeline)
    # No session's items leaked into another's.
    assert len({len(timeline) for timeline in concurrency["timelines"]}) == 1
    assert len(concurrency["llm_calls"]) == 8


def test_the_planted_secrets_show_nowhere(concurrency):
    for where, text in {**concurrency["seen"], "logs": concurrency["logs"]}.items():
        for sentinel in SENTINELS:
            assert sentinel not in text, (where, sentinel)
    assert '"bearer_token_set": true' in concurrency["seen"]["config"]
