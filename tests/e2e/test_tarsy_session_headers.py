"""TARSy's ``test/e2e/session_headers_test.go``, replayed: TestE2E_SessionHeadersAndCleanup,
TestE2E_SessionHeaders_ParallelAgents and TestE2E_SessionHeaders_SubAgents.

Configuration ``session-headers``: an HTTP MCP server, ``session-mcp``, with a bearer
token, ``X-Session-ID: {{.SESSION_ID}}`` and a ``session_cleanup_url``. Each agent
execution (an investigation's agent, a chat's, each parallel agent, an orchestrator and
its sub-agent) must send its own execution id as X-Session-ID — never the session's id —
and have ``DELETE /sessions/<execution id>`` called once its MCP client closes.

The server is real (tests/e2e/session_mcp_server.py: the ``mcp`` SDK's streamable HTTP
server, stateless with JSON responses as TARSy's) and records every request. TARSy's
configuration names it at a placeholder, ``http://127.0.0.1:9``, which TARSy's test
overwrites in memory; nothing in our configuration overrides an MCP server's URL from the
environment, so the deployment runs a copy of the directory with only those two URLs
replaced. The three Go tests share one deployment, one after the other (their scripts
coexist: routed per agent, the rest in order); each looks only at the requests made
while it ran.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agents.test_mcp_transports import free_port, wait_for_port
from tests.e2e.tarsy_scenarios import (
    CONFIGS,
    agents_by_execution,
    dump,
    scenario_deployment,
    wait,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PLACEHOLDER = "http://127.0.0.1:9/"
TOKEN = "e2e-session-token"


def _config_at(tmp_path: Path, url: str) -> Path:
    """TARSy's session-headers directory with the placeholder server address replaced
    (the MCP URL and the clean-up URL), nothing else."""
    copy = tmp_path / "session-headers-config"
    shutil.copytree(CONFIGS / "session-headers", copy)
    text = (copy / "tarsy.yaml").read_text()
    assert text.count(PLACEHOLDER) == 2
    (copy / "tarsy.yaml").write_text(text.replace(PLACEHOLDER, f"{url}/"))
    return copy


class Recorder:
    """What the session MCP server saw: its JSON lines, from ``start`` on."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.start = 0

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines[self.start :]]

    def mark(self) -> None:
        """Only the requests after this count from now on (the next Go test's)."""
        self.start += len(self.requests())

    def headers(self) -> list[str | None]:
        """X-Session-ID of every MCP request that carried one: an agent execution's.
        (The worker's health checks of the server have no execution: they send none.)"""
        return [r["x-session-id"] for r in self.requests() if r["path"] == "/mcp"]

    def deletes(self) -> list[str]:
        return [
            r["path"].removeprefix("/sessions/")
            for r in self.requests()
            if r["method"] == "DELETE" and r["path"].startswith("/sessions/")
        ]

    def wait_for_deletes(self, *ids: str) -> list[str]:
        return wait(lambda: set(ids) <= set(self.deletes()) and self.deletes(), f"DELETE {ids}")


def _executions(session: dict[str, Any]) -> dict[str, str]:
    """Every agent execution of the session, sub-agents too: id → agent name."""
    return agents_by_execution(session)


def _exec_id(executions: dict[str, str], name: str) -> str:
    [found] = [i for i, agent in executions.items() if agent == name]
    return found


@pytest.fixture(scope="module")
def session_headers(tmp_path_factory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("session-headers")
    port = free_port()
    log = tmp_path / "session-mcp-requests.jsonl"
    server = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("session_mcp_server.py")),
            str(port),
            str(log),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    results: dict[str, Any] = {}
    try:
        wait_for_port(port, server)
        recorder = Recorder(log)
        env = {"TARSY_CONFIG": str(_config_at(tmp_path, f"http://127.0.0.1:{port}"))}
        with scenario_deployment("session-headers", tmp_path, env) as run:
            # --- TestE2E_SessionHeadersAndCleanup
            recorder.mark()
            sid = run.submit("test-session-headers", "session header probe")
            run.wait_status(sid, "completed", "failed")
            investigation = _executions(run.get(f"/sessions/{sid}"))
            agent = _exec_id(investigation, "SessionAgent")
            recorder.wait_for_deletes(agent)
            after_investigation = {
                "headers": recorder.headers(),
                "deletes": recorder.deletes(),
            }
            chat = run.ask(sid, "Follow up with session MCP")
            session = run.get(f"/sessions/{sid}")
            executions = _executions(session)
            chat_agent = _exec_id(executions, "ChatAgent")
            recorder.wait_for_deletes(chat_agent)
            results["cleanup"] = {
                "session_id": sid,
                "session": session,
                "chat_stage": run.stage_status(sid, chat["stage_id"]),
                "investigation": investigation,
                "executions": executions,
                "agent": agent,
                "chat_agent": chat_agent,
                "after_investigation": after_investigation,
                "requests": recorder.requests(),
                "headers": recorder.headers(),
                "deletes": recorder.deletes(),
            }

            # --- TestE2E_SessionHeaders_ParallelAgents
            recorder.mark()
            sid = run.submit("test-session-headers-parallel", "parallel session header probe")
            run.wait_status(sid, "completed", "failed")
            session = run.get(f"/sessions/{sid}")
            executions = _executions(session)
            a, b = _exec_id(executions, "SessionAgentA"), _exec_id(executions, "SessionAgentB")
            recorder.wait_for_deletes(a, b)
            results["parallel"] = {
                "session_id": sid,
                "session": session,
                "executions": executions,
                "a": a,
                "b": b,
                "requests": recorder.requests(),
                "headers": recorder.headers(),
                "deletes": recorder.deletes(),
            }

            # --- TestE2E_SessionHeaders_SubAgents
            recorder.mark()
            sid = run.submit(
                "test-session-headers-orchestrator", "orchestrator session header probe"
            )
            run.wait_status(sid, "in_progress", "completed", "failed")
            record = run.scenario.record

            def held(agent: str) -> bool:
                return any(c["agent"] == agent and c["blocked"] for c in run.scenario.llm_calls())

            def interactions() -> int:
                [(count,)] = run.tarsy.query(
                    "SELECT COUNT(*) FROM alert_sessions_llminteraction WHERE session_id = %s",
                    (uuid.UUID(sid).hex,),
                )
                return count

            # TARSy's gates: the orchestrator's second call waits; once it is let go and
            # recorded, the sub-agent's first call (waiting meanwhile) is let go.
            wait(lambda: held("SessionOrchestrator"), "the orchestrator's second call")
            baseline = interactions()
            record.with_name(f"{record.stem}.orchestrator.release").touch()
            wait(lambda: interactions() > baseline, "the orchestrator's second call recorded")
            record.with_name(f"{record.stem}.worker.release").touch()
            run.wait_status(sid, "completed", "failed")
            session = run.get(f"/sessions/{sid}")
            executions = _executions(session)
            orchestrator = _exec_id(executions, "SessionOrchestrator")
            worker = _exec_id(executions, "SessionWorker")
            recorder.wait_for_deletes(orchestrator, worker)
            results["sub_agents"] = {
                "session_id": sid,
                "session": session,
                "executions": executions,
                "orchestrator": orchestrator,
                "worker": worker,
                "requests": recorder.requests(),
                "headers": recorder.headers(),
                "deletes": recorder.deletes(),
                "llm_calls": run.scenario.llm_calls(),
            }
            results["log"] = run.tarsy.log_tail(150)
    finally:
        server.kill()
        server.wait()
        if server.stderr:
            server.stderr.close()
    dump("session-headers", results)
    return results


def _assert_headers_are_execution_ids(headers, executions: dict[str, str], session_id: str):
    """TARSy's assertHeadersAreExecutionIDs."""
    sent = [h for h in headers if h is not None]
    assert sent, "expected X-Session-ID on MCP requests"
    for header in sent:
        assert header != session_id, "the session's id must not be used as X-Session-ID"
        assert header.strip(), "X-Session-ID must not be blank"
        assert header in executions, f"X-Session-ID {header!r} must be an agent execution id"


def test_every_mcp_request_carries_the_bearer_token_and_no_request_without_an_execution_calls_a_tool(
    session_headers,
):
    for test in ("cleanup", "parallel", "sub_agents"):
        requests = session_headers[test]["requests"]
        assert requests
        assert all(r["authorization"] == f"Bearer {TOKEN}" for r in requests), test
        # The worker's health checks (no execution, so no X-Session-ID) list tools only;
        # TARSy's test has no health checks and so no such requests.
        assert all(
            r["rpc"] != "tools/call"
            for r in requests
            if r["path"] == "/mcp" and not r["x-session-id"]
        )


def test_the_investigation_sends_its_agent_execution_id_not_the_session_id(session_headers):
    run = session_headers["cleanup"]
    assert run["session"]["status"] == "completed", session_headers["log"]
    agent, sid = run["agent"], run["session_id"]
    headers = [h for h in run["after_investigation"]["headers"] if h]
    _assert_headers_are_execution_ids(headers, run["investigation"], sid)
    assert set(headers) == {agent}, "investigation MCP traffic must use SessionAgent's id"
    assert any(r["rpc"] == "tools/call" and r["x-session-id"] == agent for r in run["requests"])
    assert agent in run["after_investigation"]["deletes"]
    assert sid not in run["after_investigation"]["deletes"]


def test_the_chat_gets_its_own_execution_id_and_clean_up(session_headers):
    run = session_headers["cleanup"]
    assert run["chat_stage"] == "completed"
    agent, chat_agent, sid = run["agent"], run["chat_agent"], run["session_id"]
    assert chat_agent != agent, "chat must create its own agent execution"
    assert len(run["deletes"]) > len(run["after_investigation"]["deletes"])
    assert agent in run["deletes"]
    assert chat_agent in run["deletes"]
    assert sid not in run["deletes"]
    _assert_headers_are_execution_ids(run["headers"], run["executions"], sid)
    assert any(
        r["rpc"] == "tools/call" and r["x-session-id"] == chat_agent for r in run["requests"]
    )


def test_parallel_agents_get_distinct_sandbox_ids_each_cleaned_up_once(session_headers):
    run = session_headers["parallel"]
    assert run["session"]["status"] == "completed", session_headers["log"]
    a, b, sid = run["a"], run["b"], run["session_id"]
    assert a != b
    unique = {h for h in run["headers"] if h}
    assert a in unique
    assert b in unique
    assert sid not in unique
    assert len(unique) == 2, "exactly two sandbox ids for two parallel agents"
    _assert_headers_are_execution_ids(run["headers"], run["executions"], sid)
    assert sid not in run["deletes"]
    assert sorted(run["deletes"]) == sorted([a, b]), "exactly one DELETE per parallel agent"


def test_an_orchestrator_and_its_sub_agent_each_get_their_own_sandbox_id(session_headers):
    run = session_headers["sub_agents"]
    assert run["session"]["status"] == "completed", session_headers["log"]
    orchestrator, worker, sid = run["orchestrator"], run["worker"], run["session_id"]
    [parent] = [
        e for s in run["session"]["stages"] for e in s.get("executions", [])
        if e["execution_id"] == orchestrator
    ]  # fmt: skip
    [child] = [c for c in parent.get("sub_agents", []) if c["execution_id"] == worker]
    assert child["parent_execution_id"] == orchestrator
    assert orchestrator != worker
    unique = {h for h in run["headers"] if h}
    assert orchestrator in unique, "the parent must send its execution id as X-Session-ID"
    assert worker in unique, "the sub-agent must send its execution id as X-Session-ID"
    assert sid not in unique
    _assert_headers_are_execution_ids(run["headers"], run["executions"], sid)
    assert sid not in run["deletes"]
    assert len(unique) >= 2, "expected at least parent + sub sandbox ids"
    assert {orchestrator, worker} <= set(run["deletes"])


def test_the_sub_agent_test_follows_tarsys_script(session_headers):
    calls = [c["agent"] for c in session_headers["sub_agents"]["llm_calls"]]
    # The whole module's calls: the first two tests' 7 + 4, then 3 + 2 + 1 here.
    assert calls.count("SessionOrchestrator") == 3
    assert calls.count("SessionWorker") == 2
    assert calls.count("SessionAgentA") == calls.count("SessionAgentB") == 2
    assert calls.count("") == 8
    assert all(c["answered"] for c in session_headers["sub_agents"]["llm_calls"])
