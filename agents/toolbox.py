"""The tools of one agent execution, without making the model wait for server start-up.

Starting a stdio MCP server costs about a second even for the bundled demo (most of it
is importing the MCP SDK), and real servers launched through npx cost several. The
servers start in the background; when this worker process has listed the same servers
before, the model's first turn goes ahead with that list while they start. Every tool
call still waits for its live server, and a tool that has since disappeared comes back
to the model as an "unknown tool" result, never as a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from types import TracebackType
from typing import Any

from agents.config_types import MCPServerConfig, TarsyConfig
from agents.mcp_client import MCPClientPool, ToolResult
from llm.types import ToolDefinition

logger = logging.getLogger(__name__)

# Per worker process: servers' configuration → the tools they listed last time.
_CATALOG: dict[str, list[ToolDefinition]] = {}


def _fingerprint(servers: Mapping[str, MCPServerConfig]) -> str:
    return json.dumps({sid: asdict(cfg) for sid, cfg in sorted(servers.items())}, sort_keys=True)


class ToolBox:
    def __init__(self, servers: Mapping[str, MCPServerConfig]) -> None:
        self._pool = MCPClientPool(servers)
        self._key = _fingerprint(servers)
        self._started: asyncio.Task[MCPClientPool] | None = None
        self.listed_from_catalog = False

    async def __aenter__(self) -> ToolBox:
        self._started = asyncio.create_task(self._pool.__aenter__(), name="mcp-start")
        return self

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
            await self._pool.__aexit__(exc_type, exc, tb)

    async def ready(self) -> MCPClientPool:
        """The running pool; raises ``MCPServerError`` when a server failed to start."""
        assert self._started is not None, "use ToolBox as an async context manager"
        return await asyncio.shield(self._started)

    async def list_tools(self) -> list[ToolDefinition]:
        assert self._started is not None
        if self._key in _CATALOG and not self._started.done():
            self.listed_from_catalog = True
            return list(_CATALOG[self._key])
        tools = await (await self.ready()).list_tools()
        _CATALOG[self._key] = tools
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        pool = await self.ready()
        if self._key not in _CATALOG:
            _CATALOG[self._key] = await pool.list_tools()
        return await pool.call_tool(name, arguments)


def agent_servers(config: TarsyConfig) -> list[dict[str, MCPServerConfig]]:
    """Each distinct set of MCP servers an agent of ``config`` runs with."""
    from agents.resolver import stage_settings, sub_agent_settings

    sets: dict[str, dict[str, MCPServerConfig]] = {}
    for chain in config.chains.values():
        for stage in chain.stages:
            for agent in stage_settings(config, chain, stage):
                dispatchable = [sub_agent_settings(config, chain, r) for r in agent.sub_agents]
                for settings in (agent, *dispatchable):
                    servers = {name: config.mcp_servers[name] for name in settings.mcp_servers}
                    if servers:
                        sets[_fingerprint(servers)] = servers
    return list(sets.values())


def warm_catalog(config: TarsyConfig, *, timeout: float = 30.0) -> None:
    """List every agent's tools once, so that the processes forked from this one start
    with a catalog. A server that fails here is only logged: sessions report it."""

    async def warm() -> None:
        for servers in agent_servers(config):
            logger.info("listing the tools of MCP servers %s for the workers", list(servers))
            try:
                async with asyncio.timeout(timeout), ToolBox(servers) as tools:
                    await tools.list_tools()
            except Exception as exc:
                logger.warning("MCP servers %s: could not list tools: %s", list(servers), exc)

    asyncio.run(warm())
