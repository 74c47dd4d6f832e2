"""The tools of one agent execution, without making the model wait for server start-up.

Servers are shared by the worker (``agents/tools/mcp_hub.py``): after a worker's first session
they are already running. Those that cannot be shared (HTTP headers naming the
execution), or every server when ``TARSY_MCP_SHARED`` is off, get connections of this
execution's own, started in the background. When this worker process has listed the
same servers before, the model's first turn goes ahead with that list while they start.
Every tool call still waits for its live server, and a tool that has since disappeared
comes back to the model as an "unknown tool" result, never as a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import asdict
from types import TracebackType
from typing import Any

from django.conf import settings

from agents.tools.mcp_client import (
    MCPClientPool,
    MCPServerError,
    ToolResult,
    tool_definition,
)
from agents.tools.mcp_hub import hub, record_health, shareable
from config.types import MCPServerConfig, TarsyConfig
from llm.tool_names import split_tool_name, tool_parts
from llm.types import ToolDefinition

logger = logging.getLogger(__name__)

# Per worker process: servers' configuration → the tools they listed last time.
_CATALOG: dict[str, list[ToolDefinition]] = {}


def _fingerprint(servers: Mapping[str, MCPServerConfig]) -> str:
    return json.dumps(
        {sid: asdict(cfg) for sid, cfg in sorted(servers.items())}, sort_keys=True, default=str
    )


class ToolBox:
    def __init__(
        self,
        servers: Mapping[str, MCPServerConfig],
        *,
        execution_id: str = "",
        only: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        # The alert's choice of tools, per server; a server not named keeps all its tools.
        self._only = dict(only or {})
        share = settings.TARSY_MCP_SHARED
        self._shared = {sid: c for sid, c in servers.items() if share and shareable(c)}
        own = {sid: c for sid, c in servers.items() if sid not in self._shared}
        self._pool = MCPClientPool(own, execution_id=execution_id) if own else None
        self._key = _fingerprint(servers)
        self._started: asyncio.Task[None] | None = None
        self.listed_from_catalog = False

    async def __aenter__(self) -> ToolBox:
        self._started = asyncio.create_task(self._start(), name="mcp-start")
        return self

    async def _start(self) -> None:
        """Start this execution's own servers and make sure the shared ones run."""
        starts: list[Awaitable[object]] = [
            hub().list_tools(sid, config) for sid, config in self._shared.items()
        ]
        if self._pool is not None:
            starts.append(self._pool.__aenter__())
        results = await asyncio.gather(*starts, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._started is not None
        if not self._started.done():
            self._started.cancel()  # the pool closes what it started when cancelled
        with contextlib.suppress(BaseException):
            await self._started
        if self._pool is not None:
            with contextlib.suppress(BaseException):
                await self._pool.__aexit__(exc_type, exc, tb)

    async def ready(self) -> None:
        """Wait for the servers; raises ``MCPServerError`` when one failed to start."""
        assert self._started is not None, "use ToolBox as an async context manager"
        await asyncio.shield(self._started)

    async def list_tools(self) -> list[ToolDefinition]:
        return [tool for tool in await self._all_tools() if self._allowed(tool.name)]

    def _allowed(self, name: str) -> bool:
        server_id, tool = tool_parts(name)
        return server_id not in self._only or tool in self._only[server_id]

    async def _all_tools(self) -> list[ToolDefinition]:
        assert self._started is not None
        if self._key in _CATALOG and not self._started.done():
            self.listed_from_catalog = True
            return list(_CATALOG[self._key])
        await self.ready()
        tools = [
            tool_definition(sid, tool)
            for sid, config in self._shared.items()
            for tool in (await hub().list_tools(sid, config)).values()
        ]
        if self._pool is not None:
            tools += await self._pool.list_tools()
        _CATALOG[self._key] = tools
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        await self.ready()
        if self._key not in _CATALOG:
            await self._all_tools()
        server_id = _server_of(name)
        if not self._allowed(name):
            chosen = ", ".join(f"{server_id}.{t}" for t in sorted(self._only[server_id]))
            return ToolResult(
                f"Tool {name!r} was not selected for this alert; selected tools of MCP server "
                f"{server_id!r}: {chosen}",
                True,
                0,
            )
        if server_id in self._shared:
            started = time.monotonic()
            config = self._shared[server_id]
            tool = split_tool_name(name)[1]
            tools = await hub().list_tools(server_id, config)
            if tool not in tools:
                available = ", ".join(f"{server_id}.{t}" for t in tools) or "(none)"
                content = f"Unknown tool {name!r}. Tools of MCP server {server_id!r}: {available}"
                return ToolResult(content, True, 0)
            content, is_error = await hub().call(server_id, config, tool, arguments)
            return ToolResult(content, is_error, round((time.monotonic() - started) * 1000))
        if self._pool is None:
            configured = ", ".join(self._shared) or "(none)"
            return ToolResult(
                f"Unknown MCP server in tool {name!r}. Configured: {configured}", True, 0
            )
        return await self._pool.call_tool(name, arguments)


def _server_of(name: str) -> str:
    try:
        return split_tool_name(name)[0]
    except ValueError:
        return ""


def agent_servers(config: TarsyConfig) -> list[dict[str, MCPServerConfig]]:
    """Each distinct set of MCP servers an agent of ``config`` runs with."""
    from agents.resolver import stage_settings, sub_agent_settings

    sets: dict[str, dict[str, MCPServerConfig]] = {}
    for chain in config.chains.values():
        for stage in chain.stages:
            for agent in stage_settings(config, chain, stage):
                dispatchable = [sub_agent_settings(config, chain, r) for r in agent.sub_agents]
                for settings_ in (agent, *dispatchable):
                    servers = {name: config.mcp_servers[name] for name in settings_.mcp_servers}
                    if servers:
                        sets[_fingerprint(servers)] = servers
    return list(sets.values())


def warm_catalog(config: TarsyConfig, *, timeout: float = 30.0) -> None:
    """List every agent's tools once, so that the processes forked from this one start
    with a catalog, and record each server's health. A server that fails here is only
    logged and recorded: sessions report it."""

    async def warm_one(servers: dict[str, MCPServerConfig]) -> None:
        logger.info("listing the tools of MCP servers %s for the workers", list(servers))
        try:
            async with asyncio.timeout(timeout), MCPClientPool(servers) as pool:
                tools = await pool.list_tools()
                _CATALOG[_fingerprint(servers)] = tools
        except MCPServerError as exc:
            logger.warning("MCP servers %s: could not list tools: %s", list(servers), exc)
            await asyncio.to_thread(record_health, exc.server_id, error=str(exc))
            return
        except Exception as exc:
            logger.warning("MCP servers %s: could not list tools: %s", list(servers), exc)
            return
        for server_id in servers:
            mine = {tool_parts(t.name)[1]: t for t in tools if tool_parts(t.name)[0] == server_id}
            await asyncio.to_thread(record_health, server_id, tools=_as_mcp_tools(mine))

    async def warm() -> None:
        # Side by side: the cluster starts serving after the slowest set, not their sum.
        await asyncio.gather(*(warm_one(servers) for servers in agent_servers(config)))

    asyncio.run(warm())


def _as_mcp_tools(definitions: dict[str, ToolDefinition]):
    from mcp.types import Tool

    return {
        name: Tool(name=name, description=d.description, input_schema=d.parameters_schema)
        for name, d in definitions.items()
    }
