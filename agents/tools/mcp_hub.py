"""A worker's shared MCP connections: one live session per server configuration, reused
by every agent execution and every session the worker runs.

A connection (an anyio task group around a transport) belongs to the loop that opened
it, and its users run in other loops: a worker's engine (worker/engine.py), the
qcluster's warm-up, a test's ``asyncio.run()``. So the hub runs a loop of its own, in a
daemon thread, and owns the connections there; agents reach them with
``run_coroutine_threadsafe`` (cancelling the caller cancels the call). Concurrent calls
from parallel agents share one session: MCP is JSON-RPC with request ids.

A dead server is restarted on its next use. A server that failed to start answers with
its last error at once for ``FAIL_FAST_FOR`` seconds instead of making every agent
wait out ``init_timeout`` again. Every ``TARSY_MCP_HEALTH_INTERVAL`` seconds the hub lists each server's
tools and records the outcome (``MCPServerHealth``), which /api/v1/system/mcp-servers shows.

Servers whose HTTP headers name the agent execution (``{{.SESSION_ID}}``) cannot be
shared; ``ToolBox`` gives those a connection per execution.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import threading
import time
from dataclasses import asdict
from typing import Any

from django.conf import settings
from mcp.types import Tool

from agents.tools.mcp_client import MCPConnection, MCPServerError
from config.types import HttpTransport, MCPServerConfig

logger = logging.getLogger(__name__)

FAIL_FAST_FOR = 15.0


def shareable(config: MCPServerConfig) -> bool:
    transport = config.transport
    return not (isinstance(transport, HttpTransport) and transport.per_execution)


def _key(server_id: str, config: MCPServerConfig) -> str:
    return json.dumps({server_id: asdict(config)}, sort_keys=True, default=str)


class _Shared:
    def __init__(self, connection: MCPConnection) -> None:
        self.connection = connection
        self.failed_at: float | None = None
        self.error: MCPServerError | None = None


class MCPHub:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._servers: dict[str, _Shared] = {}  # touched only in the hub's loop
        self._health: asyncio.Task[None] | None = None

    # --- from agents, in their own loops ------------------------------------------------------

    async def list_tools(self, server_id: str, config: MCPServerConfig) -> dict[str, Tool]:
        return await self._in_hub(self._list_tools(server_id, config))

    async def call(
        self, server_id: str, config: MCPServerConfig, tool: str, arguments: dict[str, Any]
    ) -> tuple[str, bool]:
        return await self._in_hub(self._call(server_id, config, tool, arguments))

    async def _in_hub(self, coroutine):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())
        return await asyncio.wrap_future(future)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready: concurrent.futures.Future[None] = concurrent.futures.Future()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set_result, None)
                    loop.run_forever()

                threading.Thread(target=run, name="tarsy-mcp-hub", daemon=True).start()
                ready.result()
                self._loop = loop
            return self._loop

    def close(self, timeout: float = 10.0) -> None:
        """Stop every server and the hub's loop (tests; a process about to exit)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return

        async def stop_all() -> None:
            if self._health is not None:
                self._health.cancel()
                self._health = None
            servers, self._servers = list(self._servers.values()), {}
            await asyncio.gather(*(s.connection.stop() for s in servers), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)

    # --- in the hub's loop -------------------------------------------------------------------

    async def _connection(self, server_id: str, config: MCPServerConfig) -> MCPConnection:
        if self._health is None:
            self._health = asyncio.create_task(self._check_health(), name="mcp-health")
        shared = self._servers.get(_key(server_id, config))
        if shared is None:
            shared = _Shared(MCPConnection(server_id, config))
            self._servers[_key(server_id, config)] = shared
        connection = shared.connection
        if connection.alive:
            return connection
        if (
            shared.error is not None
            and shared.failed_at is not None  # set with the error
            and time.monotonic() - shared.failed_at < FAIL_FAST_FOR
        ):
            raise shared.error  # it failed moments ago: say so now, not after init_timeout
        try:
            await connection.restart()
        except MCPServerError as exc:
            shared.error, shared.failed_at = exc, time.monotonic()
            raise
        shared.error = shared.failed_at = None
        return connection

    async def _list_tools(self, server_id: str, config: MCPServerConfig) -> dict[str, Tool]:
        return await (await self._connection(server_id, config)).list_tools()

    async def _call(
        self, server_id: str, config: MCPServerConfig, tool: str, arguments: dict[str, Any]
    ) -> tuple[str, bool]:
        try:
            connection = await self._connection(server_id, config)
        except MCPServerError as exc:
            return str(exc), True
        return await connection.call(tool, arguments)

    async def _check_health(self) -> None:
        while True:
            await asyncio.sleep(settings.TARSY_MCP_HEALTH_INTERVAL)
            for shared in list(self._servers.values()):
                connection = shared.connection
                try:
                    if not connection.alive:
                        await connection.restart()
                    connection.tools = None  # ask the server, not the cache
                    tools = await connection.list_tools()
                    shared.error = shared.failed_at = None
                    await asyncio.to_thread(record_health, connection.server_id, tools=tools)
                except MCPServerError as exc:
                    shared.error, shared.failed_at = exc, time.monotonic()
                    await asyncio.to_thread(record_health, connection.server_id, error=str(exc))
                except Exception:
                    logger.exception("health check of MCP server %s failed", connection.server_id)


def record_health(server_id: str, *, tools: dict[str, Tool] | None = None, error: str = "") -> None:
    """Write one server's health (from a worker's hub, or the qcluster's warm-up)."""
    from django.db import DatabaseError, connection

    from masking import mask_text, mask_tool_result
    from sessions import services

    try:
        services.mcp_server_health_record(
            server_id=server_id,
            healthy=tools is not None,
            # The server's own words, shown on the system page and by the API. Names
            # stay as they are: alerts and agents call the tools by them.
            tools=[
                {"name": tool.name, "description": mask_text(tool.description or "")}
                for tool in (tools or {}).values()
            ],
            # A server's stderr may quote its credentials: mask it like a tool result.
            error=mask_tool_result(error) if error else "",
        )
    except DatabaseError:
        logger.warning("could not record the health of MCP server %s", server_id, exc_info=True)
    finally:
        # A thread of a pool, maybe in a process about to fork: leave no connection open.
        connection.close()


_hub: MCPHub | None = None


def hub() -> MCPHub:
    """This process's hub (a forked child gets a fresh one: threads do not survive fork)."""
    global _hub
    if _hub is None:
        _hub = MCPHub()
    return _hub


def _forget_after_fork() -> None:
    global _hub
    _hub = None


os.register_at_fork(after_in_child=_forget_after_fork)
