"""TARSy's provider fallback scenarios (``test/e2e/fallback_test.go``), replayed here.

- config ``fallback``: TestE2E_FallbackOnMaxRetries, TestE2E_FallbackCascade,
  TestE2E_FallbackAllExhausted, TestE2E_FallbackParallelAgents,
  TestE2E_FallbackExecutiveSummary;
- config ``native-tool-fallback``: TestE2E_NativeToolFallbackSkipsIncompatible,
  TestE2E_NativeToolFallbackNonNativeAgent, TestE2E_NativeToolFallbackAllIncompatible.

Each configuration runs unchanged on one deployment (real daphne and qcluster); its
tests' sessions run one after the other, each on its own Go test's script
(tests/compat/scenarios/<config>/<test>.json), merged in that order because the
scripts share agents (Investigator, NativeResearcher).

TARSy's scripted model hands its controller error *chunks* (``max_retries``,
``credentials``); here the model is asked over HTTP, so each becomes what a real
provider sends: a ``credentials`` error is a 401 (never retried: the fallback comes at
once); a ``max_retries`` error is the provider failing the first attempt and the three
retries our LLM layer makes (llm/retry.py): four 429s (with Gemini's retry delay) or
four 503s; a plain error (the executive summary's "overloaded") is Gemini's 503, retried
the same way. So our wire sees more calls than TARSy's mock counts: the counts below say
both. Any error left after the retries hands over to the next fallback at once (TARSy
waits for a second provider_error in a row before it falls back on one); after the last
fallback, a failed call ends the agent (TARSy tries its next iteration, then a forced
conclusion, on the last provider).

TARSy's ClearCache flag (the first call after a fallback tells its Python LLM service
to drop the cached client) has no wire equivalent: the fake instead records which model
each call asked for (Gemini's URL, OpenAI's ``model``), which shows the switch.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.e2e.tarsy_scenarios import SCENARIOS, Running, scenario_deployment

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _merged_script(config: str, tests: list[str], into: Path) -> Path:
    """The Go tests' scripts as one, in the order their sessions run."""
    sequential: list[dict[str, Any]] = []
    routed: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for test in tests:
        script = json.loads((SCENARIOS / config / f"{test}.json").read_text())
        sequential += script.get("sequential", [])
        for agent, entries in script.get("routed", {}).items():
            routed[agent] += entries
    into.write_text(json.dumps({"sequential": sequential, "routed": routed}))
    return into


class _Watch:
    """TARSy's submitAndSubscribe: a WebSocket subscribed to the session right after the
    alert is accepted, keeping every frame until it sees the one awaited."""

    def __init__(self, run: Running, session_id: str) -> None:
        self.frames: list[dict[str, Any]] = []
        self.url = run.tarsy.base_url.replace("http", "ws", 1) + "/api/v1/ws"
        self.token, self.session_id = run.token, session_id
        self.thread = threading.Thread(target=lambda: asyncio.run(self._listen()), daemon=True)
        self.thread.start()

    async def _listen(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with websockets.connect(self.url, additional_headers=headers) as socket:
            await socket.send(
                json.dumps({"action": "subscribe", "channel": f"session:{self.session_id}"})
            )
            async with asyncio.timeout(120):
                while True:
                    frame = json.loads(await socket.recv())
                    self.frames.append(frame)
                    if (frame.get("type"), frame.get("event_type")) == (
                        "timeline_event.created",
                        "provider_fallback",
                    ):
                        return

    def fallback_frames(self, timeout: float = 5) -> list[dict[str, Any]]:
        self.thread.join(timeout)
        return [f for f in self.frames if f.get("event_type") == "provider_fallback"]


def _session_runs(
    run: Running, sessions: list[tuple[str, str, str, str]], watch: str = ""
) -> dict[str, dict[str, Any]]:
    """Each Go test's session, one after the other: what the API then says and the model
    calls it made (the fake's record between its start and its end)."""
    results = {}
    for test, alert_type, data, ends in sessions:
        before = len(run.scenario.llm_calls())
        session_id = run.submit(alert_type, data)
        watching = _Watch(run, session_id) if test == watch else None
        status = run.wait_status(session_id)
        session = run.get(f"/sessions/{session_id}")
        results[test] = {
            "status": status,
            "expected": ends,
            "session": session,
            "timeline": run.get(f"/sessions/{session_id}/timeline"),
            "llm_calls": run.scenario.llm_calls()[before:],
            "ws_fallbacks": watching.fallback_frames() if watching else None,
            "log": run.tarsy.log_tail(120),
        }
    return results


def _execution(outputs: dict[str, Any], agent: str) -> dict[str, Any]:
    [execution] = [
        e for s in outputs["session"]["stages"] for e in s["executions"] if e["agent_name"] == agent
    ]
    return execution


def _fallbacks(outputs: dict[str, Any]) -> list[dict[str, Any]]:
    return [i["metadata"] for i in outputs["timeline"] if i["event_type"] == "provider_fallback"]


def _transition(fallbacks: list[dict[str, Any]], source: str, target: str) -> dict[str, Any]:
    found = [
        m
        for m in fallbacks
        if (m.get("original_provider"), m.get("fallback_provider")) == (source, target)
    ]
    assert len(found) == 1, (source, target, fallbacks)
    return found[0]


def _models(outputs: dict[str, Any], agent: str | None = None) -> list[str]:
    """The model each call asked for, in order (only ``agent``'s routed calls if named;
    "" for the unrouted ones: synthesis, executive summary)."""
    return [c["model"] for c in outputs["llm_calls"] if agent is None or c["agent"] == agent]


def _ended_as_tarsy(outputs: dict[str, Any]) -> None:
    assert outputs["status"] == outputs["expected"], outputs["log"]
    assert outputs["session"]["status"] == outputs["expected"]


# --- config "fallback" ----------------------------------------------------------------

FALLBACK_SESSIONS = [
    ("on_max_retries", "test-fallback", "API server alert triggered", "completed"),
    ("cascade", "test-cascade", "Monitoring alert fired", "completed"),
    ("all_exhausted", "test-exhausted", "Critical outage — all providers down", "failed"),
    ("parallel_agents", "test-parallel-fallback", "Parallel investigation triggered", "completed"),
    ("executive_summary", "test-exec-fallback", "Routine health check", "completed"),
]


@pytest.fixture(scope="module")
def fallback(tmp_path_factory) -> dict[str, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("fallback")
    script = _merged_script(
        "fallback", [s[0] for s in FALLBACK_SESSIONS], tmp_path / "llm_script.json"
    )
    with scenario_deployment("fallback", tmp_path, script=script) as run:
        return _session_runs(run, FALLBACK_SESSIONS, watch="on_max_retries")


PRIMARY, FB1, FB2 = "test-primary", "test-fallback-1", "test-fallback-2"


def test_max_retries_on_the_primary_falls_back_and_the_investigation_completes(fallback):
    """TestE2E_FallbackOnMaxRetries."""
    outputs = fallback["on_max_retries"]
    _ended_as_tarsy(outputs)
    assert outputs["session"]["executive_summary"]
    investigator = _execution(outputs, "Investigator")
    assert investigator["status"] == "completed"
    assert (
        investigator["original_llm_provider"],
        investigator["original_llm_backend"],
        investigator["llm_provider"],
        investigator["original_model_name"],
        investigator["model_name"],
    ) == ("primary-provider", "google-native", "fallback-1", PRIMARY, FB1)
    [event] = _fallbacks(outputs)
    assert {
        key: event.get(key)
        for key in (
            "original_provider",
            "fallback_provider",
            "original_backend",
            "fallback_backend",
            "original_model",
            "fallback_model",
        )
    } == {
        "original_provider": "primary-provider",
        "fallback_provider": "fallback-1",
        "original_backend": "google-native",
        "fallback_backend": "google-native",
        "original_model": PRIMARY,
        "fallback_model": FB1,
    }


def test_max_retries_calls_switch_model_after_the_fallback(fallback):
    """TARSy: 4 calls (1 error + tool call + answer + summary), ClearCache on the second.
    Here the error is 4 replies of 429 (first attempt + 3 retries) and the next call asks
    fallback-1's model (ClearCache has no wire form)."""
    outputs = fallback["on_max_retries"]
    assert _models(outputs, "Investigator") == [PRIMARY] * 4 + [FB1] * 2
    assert [c["answered"] for c in outputs["llm_calls"]] == [False] * 4 + [True] * 3
    # The executive summary (executive_summary_provider: primary-provider) is its own.
    assert _models(outputs, "") == [PRIMARY]
    assert len(outputs["llm_calls"]) == 7


def test_the_provider_fallback_item_reaches_a_websocket_subscriber(fallback):
    frames = fallback["on_max_retries"]["ws_fallbacks"]
    assert frames, "no provider_fallback timeline_event.created on the WebSocket"
    assert frames[0]["type"] == "timeline_event.created"
    assert frames[0]["metadata"]["fallback_provider"] == "fallback-1"


def test_credentials_errors_cascade_through_both_fallbacks(fallback):
    """TestE2E_FallbackCascade."""
    outputs = fallback["cascade"]
    _ended_as_tarsy(outputs)
    assert outputs["session"]["executive_summary"]
    fallbacks = _fallbacks(outputs)
    assert len(fallbacks) == 2
    first = _transition(fallbacks, "primary-provider", "fallback-1")
    assert (first["original_model"], first["fallback_model"]) == (PRIMARY, FB1)
    second = _transition(fallbacks, "fallback-1", "fallback-2")
    # original_model on each hop is the model we fell away from.
    assert (second["original_model"], second["fallback_model"]) == (FB1, FB2)
    investigator = _execution(outputs, "Investigator")
    assert (
        investigator["original_llm_provider"],
        investigator["llm_provider"],
        investigator["original_model_name"],
        investigator["model_name"],
    ) == ("primary-provider", "fallback-2", PRIMARY, FB2)
    # TARSy: 2 errors + 1 success + 1 summary = 4; a 401 is not retried, so ours too.
    assert _models(outputs) == [PRIMARY, FB1, FB2, PRIMARY]


def test_every_provider_failing_fails_the_session(fallback):
    """TestE2E_FallbackAllExhausted."""
    outputs = fallback["all_exhausted"]
    _ended_as_tarsy(outputs)
    limited = _execution(outputs, "LimitedAgent")
    assert limited["status"] == "failed"
    assert limited["error_message"]
    fallbacks = _fallbacks(outputs)
    assert len(fallbacks) == 2
    _transition(fallbacks, "primary-provider", "fallback-1")
    _transition(fallbacks, "fallback-1", "fallback-2")
    assert any(item["event_type"] == "error" for item in outputs["timeline"])
    # TARSy: 4 calls (3 iterations, one per provider, and a forced conclusion on
    # fallback-2). Here each provider's call is 4 replies of 503, the fallbacks follow
    # within the first iteration, and the call failing on the last provider ends the
    # agent: no forced conclusion, and no executive summary for a failed session.
    assert _models(outputs) == [PRIMARY] * 4 + [FB1] * 4 + [FB2] * 4
    assert not any(c["answered"] for c in outputs["llm_calls"])


def test_only_the_parallel_agent_whose_provider_failed_falls_back(fallback):
    """TestE2E_FallbackParallelAgents."""
    outputs = fallback["parallel_agents"]
    _ended_as_tarsy(outputs)
    assert outputs["session"]["stages"][0]["status"] == "completed"
    alpha = _execution(outputs, "AlphaChecker")
    assert alpha["status"] == "completed"
    assert alpha["original_llm_provider"] == "primary-provider"
    beta = _execution(outputs, "BetaChecker")
    assert beta["status"] == "completed"
    assert beta.get("original_llm_provider") is None
    assert len(_fallbacks(outputs)) == 1
    # TARSy: Alpha (1 error + 1) + Beta (2) + synthesis + summary = 6; Alpha's error is
    # 4 replies of 429 here.
    assert _models(outputs, "AlphaChecker") == [PRIMARY] * 4 + [FB1]
    assert _models(outputs, "BetaChecker") == [PRIMARY] * 2
    assert _models(outputs, "") == [PRIMARY] * 2
    assert len(outputs["llm_calls"]) == 9


def test_the_executive_summary_falls_back_on_its_own(fallback):
    """TestE2E_FallbackExecutiveSummary."""
    outputs = fallback["executive_summary"]
    _ended_as_tarsy(outputs)
    session = outputs["session"]
    assert session["executive_summary"]
    assert not session["executive_summary_error"]
    investigator = _execution(outputs, "Investigator")
    assert investigator["status"] == "completed"
    assert investigator.get("original_llm_provider") is None
    fallbacks = _fallbacks(outputs)
    assert len(fallbacks) == 2
    _transition(fallbacks, "primary-provider", "fallback-1")
    _transition(fallbacks, "fallback-1", "fallback-2")
    # TARSy: 5 calls, the last on fallback-2's model with ClearCache, the third (the
    # summary's first) on the primary's. Here each failed summary call is 4 replies of 503.
    assert _models(outputs, "Investigator") == [PRIMARY] * 2
    assert _models(outputs, "") == [PRIMARY] * 4 + [FB1] * 4 + [FB2]
    assert outputs["llm_calls"][-1]["answered"]


# --- config "native-tool-fallback" ----------------------------------------------------

NATIVE_SESSIONS = [
    ("skips_incompatible", "test-native-skip", "Research needed for CVE-2026-1234", "completed"),
    ("non_native", "test-non-native", "Simple alert needs analysis", "completed"),
    # Last: a failing agent leaves its later script entries unasked.
    (
        "all_incompatible",
        "test-native-exhausted",
        "Research needed but all providers down",
        "failed",
    ),
]


@pytest.fixture(scope="module")
def native_tool_fallback(tmp_path_factory) -> dict[str, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("native-tool-fallback")
    script = _merged_script(
        "native-tool-fallback", [s[0] for s in NATIVE_SESSIONS], tmp_path / "llm_script.json"
    )
    with scenario_deployment("native-tool-fallback", tmp_path, script=script) as run:
        return _session_runs(run, NATIVE_SESSIONS)


def test_a_native_tools_agent_skips_the_langchain_fallback(native_tool_fallback):
    """TestE2E_NativeToolFallbackSkipsIncompatible."""
    outputs = native_tool_fallback["skips_incompatible"]
    _ended_as_tarsy(outputs)
    researcher = _execution(outputs, "NativeResearcher")
    assert researcher["status"] == "completed"
    assert (researcher["original_llm_provider"], researcher["llm_provider"]) == (
        "gemini-primary",
        "gemini-compatible",
    )
    [event] = _fallbacks(outputs)
    assert (event["original_provider"], event["fallback_provider"]) == (
        "gemini-primary",
        "gemini-compatible",
    )
    assert "langchain-incompatible" in event["skipped_incompatible"]
    # TARSy: the call after the fallback asks gemini-compatible-model (with ClearCache).
    assert _models(outputs, "NativeResearcher") == ["gemini-primary-model"] * 4 + [
        "gemini-compatible-model"
    ]
    assert not any(c["api"] == "openai" for c in outputs["llm_calls"])


def test_an_agent_without_native_tools_falls_back_to_langchain(native_tool_fallback):
    """TestE2E_NativeToolFallbackNonNativeAgent."""
    outputs = native_tool_fallback["non_native"]
    _ended_as_tarsy(outputs)
    plain = _execution(outputs, "PlainAgent")
    assert plain["status"] == "completed"
    assert (plain["original_llm_provider"], plain["llm_provider"]) == (
        "gemini-primary",
        "langchain-incompatible",
    )
    [event] = _fallbacks(outputs)
    assert event["fallback_provider"] == "langchain-incompatible"
    assert "skipped_incompatible" not in event
    calls = [(c["api"], c["model"]) for c in outputs["llm_calls"] if c["agent"] == "PlainAgent"]
    assert calls == [("gemini", "gemini-primary-model")] * 4 + [("openai", "gpt-incompatible")]


def test_a_native_tools_agent_with_only_incompatible_fallbacks_fails(native_tool_fallback):
    """TestE2E_NativeToolFallbackAllIncompatible."""
    outputs = native_tool_fallback["all_incompatible"]
    _ended_as_tarsy(outputs)
    assert _fallbacks(outputs) == []
    researcher = _execution(outputs, "NativeResearcher")
    assert researcher["status"] == "failed"
    assert researcher.get("original_llm_provider") is None
    # TARSy: 3 iterations and a forced conclusion on the primary (4 calls). Here the
    # first call's 4 replies of 503 (first attempt + 3 retries) end the agent.
    assert _models(outputs) == ["gemini-primary-model"] * 4
    assert not any(c["answered"] for c in outputs["llm_calls"])
