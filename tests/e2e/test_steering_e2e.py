"""Mid-run steering with real processes (daphne, qcluster, an MCP server over stdio, the
scripted model): a note POSTed while the agent runs is in the model's next request,
masked, and in the later stage's first; the finished session refuses a note with 409.

The agent is held in a tool call (tests/agents/steering_mcp_server.py ``wait_for_file``)
until the test has steered it: "while running" without timing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from tests import secrets_corpus
from tests.e2e.harness import ROOT, deployment

pytestmark = pytest.mark.e2e

STEERING_SERVER = str(ROOT / "tests" / "agents" / "steering_mcp_server.py")
NOTE = "the deploy at 14:02 changed the pool size"
PASSWORD = "password=Zq7xSteerE2ECanary"


def _config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["defaults"]["memory"] = {"enabled": False}
    config["mcp_servers"]["steering"] = {
        "transport": {"type": "stdio", "command": sys.executable, "args": [STEERING_SERVER]}
    }
    config["agents"]["SteerAgent"] = {
        "description": "Waits for the SRE, then concludes.",
        "mcp_servers": ["steering"],
    }
    config["agent_chains"]["steered"] = {
        "alert_types": ["Steered"],
        "stages": [
            {"name": "first", "agents": [{"name": "SteerAgent"}]},
            {"name": "second", "agents": [{"name": "KubernetesAgent"}]},
        ],
    }
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _script(tmp_path: Path, gate: Path) -> Path:
    wait = {"name": "steering.wait_for_file", "arguments": {"path": str(gate)}}
    script = {
        "chunk_delay": 0.02,  # a slow model: every word streams
        "turns": [{"text": "unused"}],
        "agents": {
            "SteerAgent": {
                "turns": [
                    {"text": "Waiting for the SRE before I go on.", "tool_calls": [wait]},
                    {"text": "Concluded with the SRE's guidance."},
                ]
            },
            "KubernetesAgent": {"turns": [{"text": "Stage two concluded."}]},
        },
    }
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(script))
    return path


def _wait(what: str, check, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _conversation(tarsy, token: str, session_id: str, agent: str) -> list[list[dict]]:
    """Each model call of ``agent``, oldest first: the conversation it was sent."""
    status, trace = tarsy.api("GET", f"/api/v1/sessions/{session_id}/trace", token)
    assert status == 200, trace
    calls = [
        call["id"]
        for stage in trace["stages"]
        for execution in stage["executions"]
        if execution["agent_name"] == agent
        for call in execution["llm_interactions"]
    ]
    conversations = []
    for call_id in calls:
        status, call = tarsy.api("GET", f"/api/v1/sessions/{session_id}/trace/llm/{call_id}", token)
        assert status == 200, call
        # The request's messages (the answer closes the conversation: left out).
        conversations.append(call["conversation"][: call["llm_request"]["messages_count"]])
    return conversations


def test_a_note_posted_while_running_is_in_the_next_request_and_an_ended_session_refuses(
    tmp_path,
):
    gate = tmp_path / "released"
    provider = {
        "name": "slow-script",
        "type": "scripted",
        "model": "script",
        "options": {"script": str(_script(tmp_path, gate))},
        "is_default": True,
    }
    extra_env = {"TARSY_CONFIG": str(_config(tmp_path))}
    with deployment(tmp_path, provider=provider, extra_env=extra_env) as tarsy:
        token = tarsy.api_token()
        status, accepted = tarsy.api(
            "POST", "/api/v1/alerts", token, {"alert_type": "Steered", "data": "pool exhausted"}
        )
        assert status == 202, accepted
        session_id = accepted["session_id"]

        def tool_running():
            status, items = tarsy.api("GET", f"/api/v1/sessions/{session_id}/timeline", token)
            assert status == 200, items
            return any(
                item["event_type"] == "llm_tool_call" and item["status"] == "streaming"
                for item in items
            )

        _wait("the agent's tool call", tool_running)
        status, note = tarsy.api(
            "POST", f"/api/v1/sessions/{session_id}/steer", token, {"text": f"{NOTE}; {PASSWORD}"}
        )
        assert status == 202, note
        assert note["text"].startswith(NOTE)
        assert secrets_corpus.CANARY not in note["text"]
        assert "[MASKED_" in note["text"]
        guidance = f"Guidance from e2e-client: {note['text']}"
        # On the timeline at once, with its author, before the agent has moved on.
        status, items = tarsy.api("GET", f"/api/v1/sessions/{session_id}/timeline", token)
        steering = [item for item in items if item["event_type"] == "steering"]
        assert [item["content"] for item in steering] == [note["text"]]
        assert steering[0]["metadata"]["author"] == "e2e-client"
        assert tool_running()  # the agent is still held in its tool call

        gate.write_text("go")

        def ended():
            _, detail = tarsy.api("GET", f"/api/v1/sessions/{session_id}", token)
            return detail["status"] if detail["status"] not in ("pending", "in_progress") else ""

        assert _wait("the session to end", ended) == "completed", tarsy.log_tail()

        first, second = _conversation(tarsy, token, session_id, "SteerAgent")
        assert guidance not in [m["content"] for m in first]
        assert second[-1] == {"role": "user", "content": guidance}
        assert second[-2]["role"] == "tool"
        (later,) = _conversation(tarsy, token, session_id, "KubernetesAgent")
        assert [m["content"] for m in later].count(guidance) == 1

        status, refused = tarsy.api(
            "POST", f"/api/v1/sessions/{session_id}/steer", token, {"text": "too late"}
        )
        assert status == 409, refused
        assert refused["message"].startswith("session is completed")
        rows = tarsy.query(
            "SELECT author, text FROM alert_sessions_steeringnote WHERE session_id = %s",
            (session_id.replace("-", ""),),
        )
        assert rows == [("e2e-client", note["text"])]
