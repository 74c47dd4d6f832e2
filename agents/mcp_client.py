"""The MCP client: one pool of stdio server connections per agent execution.

``async with MCPClientPool(servers) as pool`` starts every configured server concurrently;
``list_tools`` and ``call_tool`` speak canonical ``server.tool`` names. A server that cannot
start raises ``MCPServerError``; a tool call never raises (bar cancellation): failures come
back as ``ToolResult(is_error=True)`` so the LLM can read them and carry on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import tempfile
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from mcp import Client, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent, Tool

from agents.config_types import MCPServerConfig
from llm.tool_names import split_tool_name
from llm.types import ToolDefinition

logger = logging.getLogger(__name__)

_STDERR_TAIL_BYTES = 2000


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool
    duration_ms: int


class MCPServerError(Exception):
    """A configured MCP server could not be started, initialized or asked for its tools."""

    def __init__(self, server_id: str, message: str) -> None:
        super().__init__(message)
        self.server_id = server_id
        self.message = message


class _ServerConnection:
    """One stdio server. A dedicated task owns the connection because the SDK's transport
    and session are anyio task groups, which must be entered and exited by the same task."""

    def __init__(self, server_id: str, config: MCPServerConfig, init_timeout: float) -> None:
        self.server_id = server_id
        self.config = config
        self.init_timeout = init_timeout
        self.client: Client | None = None
        self.tools: dict[str, Tool] | None = None
        self.start_error: Exception | None = None
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # A real file: the child process needs a file descriptor for its stderr.
        self._stderr: IO[str] | None = None

    @property
    def command(self) -> str:
        return shlex.join([self.config.transport.command, *self.config.transport.args])

    def start(self) -> None:
        # Closed by stop(), which outlives this call.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._task = asyncio.create_task(self._run(self._stderr), name=f"mcp:{self.server_id}")

    async def _run(self, stderr: IO[str]) -> None:
        transport = self.config.transport
        params = StdioServerParameters(
            command=transport.command, args=list(transport.args), env=dict(transport.env)
        )
        try:
            async with AsyncExitStack() as stack:
                client = Client(stdio_client(params, errlog=stderr), cache=None)
                async with asyncio.timeout(self.init_timeout):
                    self.client = await stack.enter_async_context(client)
                self.ready.set()
                await self._stop.wait()
        except Exception as exc:
            self.start_error = exc
        finally:
            self.client = None
            self.ready.set()

    async def stop(self) -> None:
        self._stop.set()
        try:
            if self._task is not None:
                if not self.ready.is_set():
                    self._task.cancel()  # still initializing: don't wait out init_timeout
                await asyncio.wait([self._task])
        finally:
            if self._stderr is not None:
                if tail := self.stderr_tail():
                    logger.debug("MCP server %r stderr (tail):\n%s", self.server_id, tail)
                self._stderr.close()

    def start_failure(self) -> MCPServerError:
        exc = _leaf(self.start_error)
        if isinstance(exc, TimeoutError):
            cause = f"did not initialize within {self.init_timeout:g}s"
        elif isinstance(exc, OSError):
            cause = f"could not be started: {exc}"
        else:
            cause = f"failed to initialize: {_describe(exc)}"
        return MCPServerError(self.server_id, self.with_stderr(f"{self.label} {cause}"))

    def with_stderr(self, message: str) -> str:
        tail = self.stderr_tail()
        return f"{message}\nServer stderr (last lines):\n{tail}" if tail else message

    def stderr_tail(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        # pread leaves the file offset alone, which the child shares with us.
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        offset = max(0, size - _STDERR_TAIL_BYTES)
        tail = os.pread(fd, size - offset, offset).decode("utf-8", "replace")
        lines = tail.splitlines()[1:] if offset else tail.splitlines()
        return "\n".join(lines).strip()

    @property
    def label(self) -> str:
        return f"MCP server {self.server_id!r} (command: {self.command})"


class MCPClientPool:
    def __init__(
        self,
        servers: Mapping[str, MCPServerConfig],
        *,
        init_timeout: float = 30.0,
        call_timeout: float = 60.0,
    ) -> None:
        self._connections = {
            server_id: _ServerConnection(server_id, config, init_timeout)
            for server_id, config in servers.items()
        }
        self._call_timeout = call_timeout
        self._tools: list[ToolDefinition] | None = None

    async def __aenter__(self) -> MCPClientPool:
        connections = list(self._connections.values())
        try:
            for connection in connections:
                connection.start()
            for next_ready in asyncio.as_completed([c.ready.wait() for c in connections]):
                await next_ready
                if any(c.start_error is not None for c in connections):
                    break  # fail fast: don't wait out the other servers' init_timeout
        except BaseException:
            await self._close()
            raise
        failed = [c for c in connections if c.start_error is not None]
        if failed:
            error = failed[0].start_failure()  # before closing: it quotes the server's stderr
            await self._close()
            raise error
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        await asyncio.gather(*(c.stop() for c in self._connections.values()))

    async def list_tools(self) -> list[ToolDefinition]:
        """Every server's tools as ``server.tool``; raises ``MCPServerError`` if a server
        cannot list them."""
        if self._tools is None:
            connections = list(self._connections.values())
            listings = await asyncio.gather(*(self._server_tools(c) for c in connections))
            self._tools = [
                ToolDefinition(
                    name=f"{connection.server_id}.{tool.name}",
                    description=tool.description or "",
                    parameters_schema=dict(tool.input_schema),
                )
                for connection, tools in zip(connections, listings, strict=True)
                for tool in tools.values()
            ]
        return list(self._tools)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        started = time.monotonic()
        content, is_error = await self._call_tool(name, arguments)
        duration_ms = round((time.monotonic() - started) * 1000)
        return ToolResult(content=content, is_error=is_error, duration_ms=duration_ms)

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        servers = ", ".join(self._connections) or "(none)"
        try:
            server_id, tool = split_tool_name(name)
        except ValueError as exc:
            return f"Invalid tool name: {exc}. Configured MCP servers: {servers}", True
        connection = self._connections.get(server_id)
        if connection is None:
            return f"Unknown MCP server {server_id!r} in tool {name!r}. Configured: {servers}", True
        try:
            tools = await self._server_tools(connection)
        except MCPServerError as exc:
            return str(exc), True
        if tool not in tools:
            available = ", ".join(f"{server_id}.{t}" for t in tools) or "(none)"
            return f"Unknown tool {name!r}. Tools of MCP server {server_id!r}: {available}", True
        client = connection.client
        if client is None:
            return f"MCP server {server_id!r} is not running", True
        try:
            async with asyncio.timeout(self._call_timeout):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            return f"Tool {name!r} timed out after {self._call_timeout:g}s", True
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                message = f"MCP server {server_id!r} closed the connection (did it crash?)"
                return connection.with_stderr(message), True
            return f"MCP server {server_id!r} rejected the call to {name!r}: {exc}", True
        except Exception as exc:
            logger.warning("Tool call %s failed", name, exc_info=True)
            return f"Tool {name!r} failed: {_describe(exc)}", True
        return _result_text(result), bool(result.is_error)

    async def _server_tools(self, connection: _ServerConnection) -> dict[str, Tool]:
        if connection.tools is None:
            client = connection.client
            if client is None:
                raise MCPServerError(connection.server_id, f"{connection.label} is not running")
            tools: dict[str, Tool] = {}
            cursor: str | None = None
            try:
                async with asyncio.timeout(self._call_timeout):
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        tools.update((tool.name, tool) for tool in page.tools)
                        if not (cursor := page.next_cursor):
                            break
            except Exception as exc:
                message = f"{connection.label} could not list its tools: {_describe(exc)}"
                raise MCPServerError(connection.server_id, connection.with_stderr(message)) from exc
            connection.tools = tools
        return connection.tools


def _result_text(result: CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, indent=2, default=str)
    if result.content:
        kinds = ", ".join(sorted({block.type for block in result.content}))
        return f"(the tool returned only non-text content: {kinds})"
    return "(the tool returned no content)"


def _leaf(exc: BaseException | None) -> BaseException | None:
    # anyio task groups wrap failures in exception groups; the first leaf is the cause.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException | None) -> str:
    exc = _leaf(exc)
    if exc is None:
        return "unknown error"
    if isinstance(exc, MCPError):
        return f"{exc} (MCP error {exc.code})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
