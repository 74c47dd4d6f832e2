"""A worker's shared MCP servers: one process per server configuration for every agent
execution and session, safe under concurrent calls, restarted after a crash, and
health-checked into the database."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from agents.tools.mcp_hub import hub
from agents.tools.toolbox import ToolBox
from config.types import MCPServerConfig, StdioTransport

SERVER = str(Path(__file__).with_name("misbehaving_mcp_server.py"))


def misbehaving(**overrides) -> dict[str, MCPServerConfig]:
    return {"m": MCPServerConfig("m", StdioTransport(sys.executable, (SERVER,)), **overrides)}


async def pid_seen_by(servers) -> str:
    async with ToolBox(servers, execution_id="e") as box:
        result = await box.call_tool("m.pid", {})
    assert not result.is_error, result.content
    return result.content


def run(coroutine):
    """Each session runs in an ``asyncio.run`` of its own, as in a worker."""
    return asyncio.run(coroutine)


def test_executions_and_sessions_share_one_server_process():
    first = run(pid_seen_by(misbehaving()))
    second = run(pid_seen_by(misbehaving()))  # another session, another event loop
    assert first == second
    # A different configuration is a different server.
    other = run(pid_seen_by(misbehaving(call_timeout=5)))
    assert other != first


def test_with_sharing_off_each_execution_starts_its_own(settings):
    settings.TARSY_MCP_SHARED = False
    assert run(pid_seen_by(misbehaving())) != run(pid_seen_by(misbehaving()))


def test_parallel_agents_call_one_server_concurrently():
    async def agent(n: int) -> tuple[str, float]:
        async with ToolBox(misbehaving()) as box:
            started = time.monotonic()
            slow = await box.call_tool("m.hang", {"seconds": 1})
            echoed = await box.call_tool("m.echo", {"text": f"agent {n}"})
            assert not slow.is_error
            return echoed.content, time.monotonic() - started

    async def eight_agents():
        return await asyncio.gather(*(agent(n) for n in range(8)))

    run(pid_seen_by(misbehaving()))  # started
    started = time.monotonic()
    results = run(eight_agents())
    assert sorted(text for text, _ in results) == [f"agent {n}" for n in range(8)]
    # Eight one-second calls overlapped on the one session instead of queueing.
    assert time.monotonic() - started < 5


def test_a_crashed_server_is_restarted_on_next_use():
    before = run(pid_seen_by(misbehaving()))

    async def crash():
        async with ToolBox(misbehaving()) as box:
            return await box.call_tool("m.crash", {})

    crashed = run(crash())
    assert crashed.is_error
    assert "crashing on purpose" in crashed.content
    after = run(pid_seen_by(misbehaving()))
    assert after != before


def test_a_server_that_cannot_start_fails_fast_the_second_time():
    broken = {
        "b": MCPServerConfig(
            "b", StdioTransport(sys.executable, ("-c", "import sys; sys.exit('no kubeconfig')"))
        )
    }

    async def call():
        async with ToolBox(broken) as box:
            started = time.monotonic()
            try:
                await box.list_tools()
            except Exception as exc:
                return str(exc), time.monotonic() - started
        raise AssertionError("the server started")

    first, _ = run(call())
    again, took = run(call())
    assert "no kubeconfig" in first
    assert again == first  # the same error, naming the server and quoting its stderr
    assert "MCP server 'b'" in again
    assert took < 0.5


@pytest.mark.django_db(transaction=True)
def test_the_health_check_records_tools_and_errors(settings):
    from sessions.models import MCPServerHealth

    settings.TARSY_MCP_HEALTH_INTERVAL = 0.3
    run(pid_seen_by(misbehaving()))
    deadline = time.monotonic() + 10
    while not MCPServerHealth.objects.filter(server_id="m").exists():
        assert time.monotonic() < deadline, "no health record"
        time.sleep(0.1)
    health = MCPServerHealth.objects.get(server_id="m")
    assert health.healthy
    assert not health.error
    assert {"echo", "crash", "pid", "big"} <= {t["name"] for t in health.tools}
    first_check = health.checked_at

    # The server dies and cannot come back: the next check records why, keeps the tools.
    for shared in hub()._servers.values():
        shared.connection.config = MCPServerConfig(
            "m", StdioTransport(sys.executable, ("-c", "import sys; sys.exit('gone for good')"))
        )
    run(_crash_shared())
    deadline = time.monotonic() + 10
    while True:
        health = MCPServerHealth.objects.get(server_id="m")
        if not health.healthy:
            break
        assert time.monotonic() < deadline, "the failure was not recorded"
        time.sleep(0.1)
    assert health.checked_at > first_check
    assert "gone for good" in health.error
    assert "echo" in {t["name"] for t in health.tools}


async def _crash_shared():
    async with ToolBox(misbehaving()) as box:
        await box.call_tool("m.crash", {})
