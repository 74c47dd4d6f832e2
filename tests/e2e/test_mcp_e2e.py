"""One investigation, two kinds of MCP server at once: the bundled demo cluster over stdio
and a remote server over streamable HTTP behind a bearer token (the ``mcp`` SDK's own
HTTP server). Real daphne and qcluster; the scripted model calls only tools it is
offered, so a completed session proves both servers' tools reached it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.agents.test_mcp_transports import free_port, wait_for_port
from tests.e2e.harness import ROOT, deployment
from tests.e2e.test_faults import statuses, wait_until

pytestmark = pytest.mark.e2e

TOKEN = "e2e-remote-mcp-token-7f3a"


def write_config(tmp_path: Path, url: str) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["mcp_servers"]["remote"] = {
        "transport": {
            "type": "http",
            "url": url,
            "bearer_token_env": "E2E_REMOTE_MCP_TOKEN",
            "headers": {"X-Tarsy-Execution": "{{.SESSION_ID}}"},
        },
        "instructions": "A remote calculator.",
    }
    config["agents"]["KubernetesAgent"]["mcp_servers"] = ["kubernetes", "remote"]
    path = tmp_path / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_script(tmp_path: Path) -> Path:
    path = tmp_path / "script.yaml"
    calls = [
        {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}},
        {"name": "remote.add", "arguments": {"a": 40, "b": 2}},
    ]
    path.write_text(
        yaml.safe_dump(
            {
                "chunk_delay": 0,
                "turns": [
                    {"text": "Pods first, and the sum.", "tool_calls": calls},
                    {"text": "Both servers answered."},
                ],
            }
        )
    )
    return path


def test_one_investigation_uses_a_stdio_and_an_http_server(tmp_path):
    port = free_port()
    log = tmp_path / "remote-requests.jsonl"
    remote = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "agents" / "http_mcp_server.py"),
            str(port),
            "http",
            str(log),
            TOKEN,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, remote)
        provider = {
            "name": "scripted",
            "type": "scripted",
            "model": "script",
            "options": {"script": str(write_script(tmp_path))},
            "is_default": True,
        }
        env = {
            "TARSY_CONFIG": str(write_config(tmp_path, f"http://127.0.0.1:{port}/mcp")),
            "E2E_REMOTE_MCP_TOKEN": TOKEN,
        }
        with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
            token = tarsy.api_token()
            status, body = tarsy.api(
                "POST", "/api/v1/alerts", token, {"data": "namespace: payments"}
            )
            assert status == 202, body
            key = body["session_id"].replace("-", "")
            wait_until(
                lambda: statuses(tarsy).get(key) in ("completed", "failed"), 60, "done", tarsy
            )
            assert statuses(tarsy)[key] == "completed", tarsy.log_tail()

            calls = tarsy.query(
                "SELECT content, metadata FROM alert_sessions_timelineevent "
                "WHERE session_id = %s AND event_type = 'llm_tool_call' ORDER BY id",
                (key,),
            )
            by_tool = {json.loads(meta)["tool_name"]: content for content, meta in calls}
            assert "payments-api" in by_tool["kubernetes.get_pods"]
            assert by_tool["remote.add"] == "42 (int, int, bool)"

            status, health = tarsy.api("GET", "/api/v1/system/mcp-servers", token)
            servers = {s["id"]: s for s in health["servers"]}
            assert servers["remote"]["healthy"] is True
            assert servers["kubernetes"]["healthy"] is True
            assert {"add", "echo"} == {t["name"] for t in servers["remote"]["tools"]}

        seen = [json.loads(line) for line in log.read_text().splitlines()]
        assert all(r["headers"].get("authorization") == f"Bearer {TOKEN}" for r in seen)
        execution_ids = {r["headers"].get("x-tarsy-execution") for r in seen}
        # The qcluster's warm-up connects without an execution; the agent with its own.
        assert execution_ids - {""}, execution_ids
        logs = "".join(p.read_text() for p in tarsy.logs)
        assert TOKEN not in logs
    finally:
        remote.kill()
        remote.wait()
