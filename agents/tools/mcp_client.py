"""The MCP client: connections to MCP servers over stdio, streamable HTTP or SSE.

``MCPConnection`` is one live session with one server. ``MCPClientPool`` holds the
connections of one agent execution (``async with MCPClientPool(servers) as pool``) and
speaks canonical ``server.tool`` names; a worker's shared connections live in
``agents/tools/mcp_hub.py``. A server that cannot start raises ``MCPServerError``; a tool call
never raises (bar cancellation): failures come back as ``ToolResult(is_error=True)`` so
the LLM can read them and carry on. A call that fails on the transport (the server died,
the connection was reset) is retried once on a fresh session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    CallToolResult,
    TextContent,
    Tool,
)

from config.types import SESSION_ID_PLACEHOLDER, HttpTransport, MCPServerConfig
from llm.tool_names import split_tool_name
from llm.types import ToolDefinition
from masking import mask_text

logger = logging.getLogger(__name__)

# In the environment of every stdio server TARSy starts: the server's id in tarsy.yaml.
SERVER_ID_VARIABLE = "TARSY_MCP_SERVER_ID"

# What a failed start quotes of the server's stderr: kubernetes-mcp-server prints the
# cause on its first line and pages of usage after it, so the head matters as much as
# the tail.
_STDERR_HEAD_LINES = 5
_STDERR_TAIL_BYTES = 2000
# Errors that mean the connection, not the tool, failed: the call is retried once.
_TRANSPORT_ERRORS = (
    httpx2.TransportError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
)


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool
    duration_ms: int


class MCPServerError(Exception):
    """A configured MCP server could not be started, initialized or asked for its tools."""

    def __init__(self, server_id: str, message: str) -> None:
        # Masked once, here: the message names the command and its arguments, quotes the
        # OS's or the server's words, and goes to logs, pages and the database.
        message = mask_text(message)
        super().__init__(message)
        self.server_id = server_id
        self.message = message


class MCPConnection:
    """One live session with one server. A dedicated task owns it, because the SDK's
    transports and sessions are anyio task groups, which must be entered and exited by
    the same task. ``execution_id`` fills ``{{.SESSION_ID}}`` in HTTP headers."""

    def __init__(
        self,
        server_id: str,
        config: MCPServerConfig,
        *,
        init_timeout: float | None = None,
        call_timeout: float | None = None,
        execution_id: str = "",
    ) -> None:
        self.server_id = server_id
        self.config = config
        self.init_timeout = init_timeout or config.init_timeout
        self.call_timeout = call_timeout or config.call_timeout
        self.execution_id = execution_id
        self.client: Client | None = None
        self.tools: dict[str, Tool] | None = None
        self.start_error: BaseException | None = None
        self.http_error = ""  # the last HTTP error status the server answered with
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._restarting: asyncio.Lock | None = None
        self._cleaned_up = False  # session_cleanup_url was called
        # A real file: a stdio child process needs a file descriptor for its stderr.
        self._stderr: TextIO | None = None

    # --- life -------------------------------------------------------------------------------

    def start(self) -> None:
        self.ready, self._stop = asyncio.Event(), asyncio.Event()
        self.client, self.tools, self.start_error = None, None, None
        self.http_error = ""
        if self.is_stdio:
            # Closed by stop(), which outlives this call.
            self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.server_id}")

    async def started(self) -> None:
        """Wait for the start; ``MCPServerError`` if it failed."""
        await self.ready.wait()
        if self.start_error is not None:
            raise self.start_failure()

    @property
    def alive(self) -> bool:
        return self.client is not None and self._task is not None and not self._task.done()

    async def _run(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(self._transport(), cache=None)
                async with asyncio.timeout(self.init_timeout):
                    self.client = await stack.enter_async_context(client)
                self.ready.set()
                await self._stop.wait()
        except Exception as exc:
            self.start_error = exc  # start_failure() reports it
        finally:
            self.client = None
            self.ready.set()

    def _transport(self):
        transport = self.config.transport
        if isinstance(transport, HttpTransport):
            return _http_transport(
                transport, self._headers(transport), self.call_timeout, self._saw_response
            )
        # Each server learns its id (a wrapper serving several knows which it is).
        env = {**transport.env, SERVER_ID_VARIABLE: self.server_id}
        params = StdioServerParameters(
            command=transport.command, args=list(transport.args), env=env
        )
        assert self._stderr is not None  # opened by start()
        return stdio_client(params, errlog=self._stderr)

    def _headers(self, transport: HttpTransport) -> dict[str, str]:
        rendered = {
            name: value.replace(SESSION_ID_PLACEHOLDER, self.execution_id)
            for name, value in transport.headers.items()
        }
        # A header that renders empty is not sent (a health check has no execution id).
        headers = {name: value for name, value in rendered.items() if value.strip()}
        if transport.bearer_token:
            headers["Authorization"] = f"Bearer {transport.bearer_token}"
        if transport.bearer_token_env:
            token = os.environ.get(transport.bearer_token_env)
            if not token:
                raise MCPServerError(
                    self.server_id,
                    f"{self.label}: the environment variable {transport.bearer_token_env} "
                    "(bearer_token_env) is not set",
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def stop(self, *, final: bool = True) -> None:
        """``final=False``: for a restart (the execution's server-side session stays)."""
        self._stop.set()
        try:
            if self._task is not None:
                if not self.ready.is_set():
                    self._task.cancel()  # still initializing: don't wait out init_timeout
                await asyncio.wait([self._task])
                if final:
                    await self._clean_up_session()
        finally:
            if self._stderr is not None and not self._stderr.closed:
                if tail := self.stderr_excerpt():
                    logger.debug("MCP server %r stderr:\n%s", self.server_id, tail)
                self._stderr.close()

    async def _clean_up_session(self) -> None:
        """TARSy's ``session_cleanup_url``: DELETE'd once when an execution's connection
        closes, with the same token and headers; best effort (200, 204, 404 are done)."""
        transport = self.config.transport
        if (
            not isinstance(transport, HttpTransport)
            or not transport.session_cleanup_url
            or not self.execution_id
            or self._cleaned_up
        ):
            return
        self._cleaned_up = True
        url = transport.session_cleanup_url.replace(SESSION_ID_PLACEHOLDER, self.execution_id)
        try:
            headers = self._headers(transport)
            async with httpx2.AsyncClient(verify=transport.verify_ssl, timeout=15) as http:
                response = await http.delete(url, headers=headers)
            if response.status_code not in (200, 204, 404):
                logger.warning(
                    "%s: session clean-up answered HTTP %s", self.label, response.status_code
                )
        except Exception as exc:  # best effort: the execution has ended either way
            logger.warning("%s: session clean-up failed: %s", self.label, _describe(exc))

    async def restart(self) -> None:
        """A fresh session (and process, for stdio) after the old one failed."""
        self._restarting = self._restarting or asyncio.Lock()
        async with self._restarting:
            if self.alive:
                return  # another caller restarted it meanwhile
            await self.stop(final=False)
            self.start()
            await self.started()

    # --- tools ------------------------------------------------------------------------------

    async def list_tools(self) -> dict[str, Tool]:
        if self.tools is None:
            if not self.alive and self._task is not None:
                await self.restart()  # it died since: start it again (MCPServerError if not)
            client = self.client
            if client is None:
                raise MCPServerError(self.server_id, f"{self.label} is not running")
            tools: dict[str, Tool] = {}
            cursor: str | None = None
            try:
                async with asyncio.timeout(self.call_timeout):
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        tools.update((tool.name, tool) for tool in page.tools)
                        if not (cursor := page.next_cursor):
                            break
            except Exception as exc:
                message = f"{self.label} could not list its tools: {_describe(exc)}"
                raise MCPServerError(self.server_id, self.with_stderr(message)) from exc
            self.tools = tools
        return self.tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(text, is_error). A transport failure gets one more try on a fresh session."""
        name = f"{self.server_id}.{tool}"
        for attempt in (1, 2):
            if not self.alive:
                try:
                    await self.restart()
                except MCPServerError as exc:
                    return str(exc), True
            client = self.client
            if client is None:
                return f"MCP server {self.server_id!r} is not running", True
            try:
                async with asyncio.timeout(self.call_timeout):
                    result = await client.call_tool(tool, arguments)
            except TimeoutError:
                return f"Tool {name!r} timed out after {self.call_timeout:g}s", True
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED:
                    failure = f"MCP server {self.server_id!r} closed the connection (did it crash?)"
                elif self._session_lost(exc):
                    failure = f"MCP server {self.server_id!r} no longer knows our session ({exc})"
                else:
                    return (
                        f"MCP server {self.server_id!r} rejected the call to {name!r}: {exc}",
                        True,
                    )
            except _TRANSPORT_ERRORS as exc:
                failure = f"MCP server {self.server_id!r} could not be reached: {_describe(exc)}"
            except Exception as exc:
                logger.warning("Tool call %s failed", name, exc_info=True)
                return f"Tool {name!r} failed: {_describe(exc)}", True
            else:
                return _result_text(result), bool(result.is_error)
            logger.warning("%s (attempt %d of 2)", failure, attempt)
            await self._mark_dead()
        return self.with_stderr(f"{failure}; a retry on a fresh session failed too"), True

    def _session_lost(self, exc: MCPError) -> bool:
        """Over HTTP, a server that restarted answers our old session id with 404 (the
        SDK's "Session terminated") or, in some servers, a bare 400: a fresh session is
        the cure, as for a dropped connection."""
        if self.is_stdio:
            return False
        message = str(exc)
        return (exc.code == INVALID_REQUEST and "Session terminated" in message) or (
            exc.code == INTERNAL_ERROR and "Server returned an error response" in message
        )

    async def _mark_dead(self) -> None:
        if self._task is not None and not self._task.done():
            self._stop.set()
            await asyncio.wait([self._task], timeout=5)

    # --- reporting ----------------------------------------------------------------------------

    def start_failure(self) -> MCPServerError:
        exc = _leaf(self.start_error)
        if isinstance(exc, MCPServerError):
            return exc
        if isinstance(exc, TimeoutError):
            cause = f"did not initialize within {self.init_timeout:g}s"
        elif isinstance(exc, OSError | httpx2.TransportError):
            cause = f"could not be started: {exc}"
        else:
            cause = f"failed to initialize: {_describe(exc)}"
        if self.http_error:
            cause += f"; the server answered {self.http_error}"
            if self.http_error.startswith(("401", "403")):
                cause += " (check the server's bearer_token_env and headers)"
        return MCPServerError(self.server_id, self.with_stderr(f"{self.label} {cause}"))

    async def _saw_response(self, response: httpx2.Response) -> None:
        """The SDK reports an HTTP error only as "an error response": keep its status."""
        if response.status_code >= 400:
            self.http_error = f"{response.status_code} {response.reason_phrase}".strip()

    def with_stderr(self, message: str) -> str:
        excerpt = self.stderr_excerpt()
        return f"{message}\nServer stderr:\n{excerpt}" if excerpt else message

    def stderr_excerpt(self) -> str:
        """Its first lines and its last ones: the cause is often first, then pages of usage."""
        if self._stderr is None or self._stderr.closed:
            return ""
        # pread leaves the file offset alone, which the child shares with us.
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        text = os.pread(fd, size, 0).decode("utf-8", "replace")
        lines = text.strip().splitlines()
        head = lines[:_STDERR_HEAD_LINES]
        tail_text = text[-_STDERR_TAIL_BYTES:]
        tail = tail_text.splitlines()[1:] if len(text) > _STDERR_TAIL_BYTES else lines
        tail = [line for line in tail if line not in head] if len(lines) > len(head) else []
        if not tail:
            return "\n".join(head).strip()
        return "\n".join([*head, "…", *tail]).strip()

    @property
    def is_stdio(self) -> bool:
        return not isinstance(self.config.transport, HttpTransport)

    @property
    def label(self) -> str:
        transport = self.config.transport
        if isinstance(transport, HttpTransport):
            return f"MCP server {self.server_id!r} ({transport.type}: {transport.url})"
        command = shlex.join([transport.command, *transport.args])
        return f"MCP server {self.server_id!r} (command: {command})"


@contextlib.asynccontextmanager
async def _http_transport(
    transport: HttpTransport, headers: dict[str, str], call_timeout: float, on_response
) -> AsyncIterator[Any]:
    timeout = httpx2.Timeout(transport.timeout, read=max(call_timeout, transport.timeout))
    hooks = {"response": [on_response]}
    if transport.type == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                verify=transport.verify_ssl,
                event_hooks=hooks,
                headers=headers,
                timeout=timeout,
                auth=auth,
            )

        async with sse_client(
            transport.url,
            headers=headers,
            timeout=transport.timeout,
            sse_read_timeout=max(call_timeout, transport.timeout),
            httpx_client_factory=factory,
        ) as streams:
            yield streams
        return
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=timeout, verify=transport.verify_ssl, event_hooks=hooks
        ) as http,
        streamable_http_client(transport.url, http_client=http) as streams,
    ):
        yield streams


class MCPClientPool:
    """The connections of one agent execution, started together."""

    def __init__(
        self,
        servers: Mapping[str, MCPServerConfig],
        *,
        init_timeout: float | None = None,
        call_timeout: float | None = None,
        execution_id: str = "",
    ) -> None:
        self._connections = {
            server_id: MCPConnection(
                server_id,
                config,
                init_timeout=init_timeout,
                call_timeout=call_timeout,
                execution_id=execution_id,
            )
            for server_id, config in servers.items()
        }

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
        connections = list(self._connections.values())
        listings = await asyncio.gather(*(c.list_tools() for c in connections))
        return [
            tool_definition(connection.server_id, tool)
            for connection, tools in zip(connections, listings, strict=True)
            for tool in tools.values()
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        started = time.monotonic()
        content, is_error = await call_on(self._connections, name, arguments)
        duration_ms = round((time.monotonic() - started) * 1000)
        return ToolResult(content=content, is_error=is_error, duration_ms=duration_ms)


def tool_definition(server_id: str, tool: Tool) -> ToolDefinition:
    return ToolDefinition(
        name=f"{server_id}.{tool.name}",
        description=tool.description or "",
        parameters_schema=dict(tool.input_schema),
    )


async def call_on(
    connections: Mapping[str, MCPConnection], name: str, arguments: dict[str, Any]
) -> tuple[str, bool]:
    """Route ``server.tool`` to its connection; unknown names are error results."""
    servers = ", ".join(connections) or "(none)"
    try:
        server_id, tool = split_tool_name(name)
    except ValueError as exc:
        return f"Invalid tool name: {exc}. Configured MCP servers: {servers}", True
    connection = connections.get(server_id)
    if connection is None:
        return f"Unknown MCP server {server_id!r} in tool {name!r}. Configured: {servers}", True
    try:
        tools = await connection.list_tools()
    except MCPServerError as exc:
        return str(exc), True
    if tool not in tools:
        available = ", ".join(f"{server_id}.{t}" for t in tools) or "(none)"
        return f"Unknown tool {name!r}. Tools of MCP server {server_id!r}: {available}", True
    return await connection.call(tool, arguments)


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
