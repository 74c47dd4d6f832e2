from __future__ import annotations

import sys
import time

import pytest

from agents.tools import toolbox
from agents.tools.mcp_client import MCPServerError
from agents.tools.toolbox import ToolBox
from config.types import MCPServerConfig, StdioTransport

DEMO = {
    "kubernetes": MCPServerConfig(
        "kubernetes", StdioTransport(sys.executable, ("-m", "agents.demo_mcp"))
    )
}


@pytest.fixture(autouse=True)
def empty_catalog(monkeypatch):
    monkeypatch.setattr(toolbox, "_CATALOG", {})


async def test_the_first_listing_waits_for_the_servers():
    async with ToolBox(DEMO) as tools:
        names = [t.name for t in await tools.list_tools()]
        assert not tools.listed_from_catalog
    assert "kubernetes.get_pods" in names


async def test_a_known_server_set_lists_at_once_and_calls_still_reach_the_server():
    async with ToolBox(DEMO) as tools:
        await tools.list_tools()
    async with ToolBox(DEMO) as tools:
        started = time.monotonic()
        names = [t.name for t in await tools.list_tools()]
        assert time.monotonic() - started < 0.2  # the server is still importing the SDK
        assert tools.listed_from_catalog
        result = await tools.call_tool("kubernetes.get_pods", {"namespace": "payments"})
    assert "kubernetes.get_pods" in names
    assert not result.is_error
    assert "payments-api" in result.content


async def test_a_server_that_cannot_start_fails_the_first_call():
    broken = {"k8s": MCPServerConfig("k8s", StdioTransport("/nonexistent/mcp-server"))}
    async with ToolBox(broken) as tools:
        with pytest.raises(MCPServerError, match=r"'k8s'.*/nonexistent/mcp-server"):
            await tools.list_tools()


async def test_leaving_before_the_servers_are_up_stops_them():
    async with ToolBox(DEMO):
        pass  # cancelled mid-start; must not hang or leak


@pytest.mark.django_db(transaction=True)
def test_warming_fills_the_catalog_for_each_agents_servers():
    from pathlib import Path

    from agents.tools.toolbox import _fingerprint, agent_servers, warm_catalog
    from config.loader import load_config

    config = load_config(Path(__file__).parents[2] / "config" / "tarsy.yaml")
    sets = agent_servers(config)
    assert sorted(list(servers) for servers in sets) == [["changes"], ["kubernetes"], ["workloads"]]
    warm_catalog(config)
    tools = {
        s: [t.name for t in toolbox._CATALOG[_fingerprint(servers)]]
        for servers in sets
        for s in servers
    }
    assert "kubernetes.get_pods" in tools["kubernetes"]
    # The deep demo's agents each see their part of the demo cluster only.
    assert sorted(tools["workloads"]) == [
        "workloads.describe_pod",
        "workloads.get_pod_logs",
        "workloads.get_pods",
    ]
    assert sorted(tools["changes"]) == ["changes.get_deployments", "changes.get_events"]

    from sessions.models import MCPServerHealth

    health = {h.server_id: h for h in MCPServerHealth.objects.all()}
    assert set(health) == {"kubernetes", "workloads", "changes"}
    assert all(h.healthy and not h.error for h in health.values())
    assert {t["name"] for t in health["changes"].tools} == {"get_deployments", "get_events"}
