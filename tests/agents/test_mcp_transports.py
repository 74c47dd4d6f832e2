"""MCP over stdio, SSE and streamable HTTP against servers nobody here wrote
(``@modelcontextprotocol/server-everything`` from npm), and the ``mcp`` SDK's own HTTP
server for headers, bearer tokens and ``{{.SESSION_ID}}``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.tools.mcp_client import MCPClientPool, MCPServerError
from agents.tools.toolbox import ToolBox
from config.types import HttpTransport, MCPServerConfig, StdioTransport

NPM_DIR = Path(__file__).parents[1] / "npm"
NPM_BIN = NPM_DIR / "node_modules" / ".bin"
RECORDING_SERVER = str(Path(__file__).with_name("http_mcp_server.py"))


def npm_servers() -> Path:
    """tests/npm/package.json's servers, installed from the registry if bin/test has not."""
    wanted = json.loads((NPM_DIR / "package.json").read_text())["dependencies"]
    installed = all((NPM_DIR / "node_modules" / name).is_dir() for name in wanted)
    if not installed:
        npm = subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--no-package-lock",
                "--prefix",
                str(NPM_DIR),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert npm.returncode == 0, f"npm install failed:\n{npm.stderr[-3000:]}"
    return NPM_BIN


@pytest.fixture(scope="session")
def everything() -> str:
    return str(npm_servers() / "mcp-server-everything")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited: {process.stderr.read()}"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


class Served:
    """A server process on a port of its own, restartable on the same port."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int) -> None:
        self.argv, self.env, self.port = argv, env, port
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        wait_for_port(self.port, self.process)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def served() -> Iterator:
    started: list[Served] = []

    def serve(argv: list[str], env: dict[str, str] | None = None) -> Served:
        port = free_port()
        # No secrets in its environment: server-everything's get-env returns all of it.
        environment = {"PATH": os.environ["PATH"], "PORT": str(port), **(env or {})}
        server = Served([a.replace("{port}", str(port)) for a in argv], environment, port)
        server.start()
        started.append(server)
        _SERVED[port] = server
        return server

    yield serve
    for server in started:
        server.kill()


def everything_config(everything: str, kind: str, served) -> MCPServerConfig:
    if kind == "stdio":
        return MCPServerConfig("everything", StdioTransport(everything, ("stdio",)))
    mode = "streamableHttp" if kind == "http" else "sse"
    server = served([everything, mode])
    path = "/mcp" if kind == "http" else "/sse"
    return MCPServerConfig(
        "everything", HttpTransport(kind, f"http://127.0.0.1:{server.port}{path}")
    )


@pytest.mark.parametrize("kind", ["stdio", "sse", "http"])
async def test_tools_typed_arguments_and_errors_over_each_transport(everything, served, kind):
    config = everything_config(everything, kind, served)
    async with MCPClientPool({"everything": config}) as pool:
        names = {tool.name for tool in await pool.list_tools()}
        echo = await pool.call_tool("everything.echo", {"message": "pod payments-api down"})
        total = await pool.call_tool("everything.get-sum", {"a": 2, "b": 40})
        # Numbers and booleans arrive as such: the server validates its schema.
        as_strings = await pool.call_tool("everything.get-sum", {"a": "2", "b": "40"})
        annotated = await pool.call_tool(
            "everything.get-annotated-message", {"messageType": "error", "includeImage": True}
        )
        bool_as_string = await pool.call_tool(
            "everything.get-annotated-message", {"messageType": "error", "includeImage": "true"}
        )
        unknown = await pool.call_tool("everything.no-such-tool", {})

    assert {"everything.echo", "everything.get-sum", "everything.get-env"} <= names
    assert not echo.is_error
    assert "pod payments-api down" in echo.content
    assert not total.is_error
    assert "42" in total.content
    assert as_strings.is_error
    assert not annotated.is_error
    assert "error" in annotated.content.lower()
    assert bool_as_string.is_error
    assert unknown.is_error
    assert "Unknown tool 'everything.no-such-tool'" in unknown.content


async def test_a_stdio_server_killed_mid_session_is_restarted_and_the_call_retried(everything):
    config = MCPServerConfig("everything", StdioTransport(everything, ("stdio",)))
    async with MCPClientPool({"everything": config}) as pool:
        before = await pool.call_tool("everything.echo", {"message": "one"})
        children = _children_running("mcp-server-everything")
        assert len(children) == 1
        os.kill(children[0], signal.SIGKILL)
        await asyncio.sleep(0.2)
        after = await pool.call_tool("everything.echo", {"message": "two"})
        assert _children_running("mcp-server-everything") not in ([], children)
    assert not before.is_error
    assert not after.is_error
    assert "two" in after.content


async def test_an_http_server_restarted_mid_session_gets_a_fresh_session(everything, served):
    config = everything_config(everything, "http", served)
    async with MCPClientPool({"everything": config}) as pool:
        before = await pool.call_tool("everything.echo", {"message": "one"})
        process = _server_on(config)
        process.kill()
        process.start()  # same port: its sessions are gone
        after = await pool.call_tool("everything.echo", {"message": "two"})
    assert not before.is_error
    assert not after.is_error, after.content
    assert "two" in after.content


async def test_a_call_that_never_answers_times_out_with_a_message(everything):
    config = MCPServerConfig("everything", StdioTransport(everything, ("stdio",)), call_timeout=1.0)
    async with MCPClientPool({"everything": config}) as pool:
        started = time.monotonic()
        slow = await pool.call_tool(
            "everything.trigger-long-running-operation", {"duration": 30, "steps": 1}
        )
        took = time.monotonic() - started
        quick = await pool.call_tool("everything.echo", {"message": "still there"})
    assert slow.is_error
    assert slow.content == "Tool 'everything.trigger-long-running-operation' timed out after 1s"
    assert took < 5
    assert not quick.is_error  # the session survives a timed-out call


async def test_a_server_that_never_initializes_times_out_naming_it(served):
    silent = served([sys.executable, "-c", _SILENT_HTTP])
    config = MCPServerConfig(
        "silent",
        HttpTransport("http", f"http://127.0.0.1:{silent.port}/mcp", timeout=1.0),
        init_timeout=1.0,
    )
    started = time.monotonic()
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool({"silent": config}):
            pytest.fail("the pool must not open")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert message.startswith(f"MCP server 'silent' (http: http://127.0.0.1:{silent.port}/mcp)")


# --- headers, bearer tokens, {{.SESSION_ID}}: the mcp SDK's own HTTP server ------------------


def recording(served, tmp_path: Path, kind: str = "http", token: str = "") -> tuple[str, Path]:
    log = tmp_path / f"requests-{kind}.jsonl"
    server = served([sys.executable, RECORDING_SERVER, "{port}", kind, str(log), token])
    path = "/mcp" if kind == "http" else "/sse"
    return f"http://127.0.0.1:{server.port}{path}", log


def requests_seen(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("kind", ["http", "sse"])
async def test_a_bearer_token_from_the_environment_is_sent(served, tmp_path, monkeypatch, kind):
    monkeypatch.setenv("TEST_MCP_TOKEN", "s3cret-token-value")
    url, log = recording(served, tmp_path, kind, token="s3cret-token-value")
    config = MCPServerConfig("remote", HttpTransport(kind, url, bearer_token_env="TEST_MCP_TOKEN"))
    async with MCPClientPool({"remote": config}) as pool:
        result = await pool.call_tool("remote.add", {"a": 2, "b": 3, "negate": True})
    assert result.content == "-5 (int, int, bool)"
    seen = requests_seen(log)
    assert seen
    assert all(r["headers"]["authorization"] == "Bearer s3cret-token-value" for r in seen)


async def test_a_wrong_token_fails_the_start_naming_the_server(served, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_MCP_TOKEN", "wrong")
    url, _ = recording(served, tmp_path, token="right")
    config = MCPServerConfig(
        "remote", HttpTransport("http", url, bearer_token_env="TEST_MCP_TOKEN")
    )
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool({"remote": config}):
            pytest.fail("the pool must not open")
    message = str(caught.value)
    assert message.startswith(f"MCP server 'remote' (http: {url})")
    assert "the server answered 401 Unauthorized (check the server's bearer_token_env" in message
    assert "wrong" not in message  # the token itself is never quoted


async def test_an_unset_token_variable_is_named(served, tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_MCP_TOKEN", raising=False)
    url, log = recording(served, tmp_path, token="right")
    config = MCPServerConfig(
        "remote", HttpTransport("http", url, bearer_token_env="TEST_MCP_TOKEN")
    )
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool({"remote": config}):
            pytest.fail("the pool must not open")
    assert "the environment variable TEST_MCP_TOKEN (bearer_token_env) is not set" in str(
        caught.value
    )
    assert not log.exists()  # nothing was sent without it


async def test_headers_carry_the_execution_id_per_execution(served, tmp_path):
    url, log = recording(served, tmp_path)
    transport = HttpTransport(
        "http", url, headers={"X-Tarsy-Execution": "exec-{{.SESSION_ID}}", "X-Team": "sre"}
    )
    servers = {"remote": MCPServerConfig("remote", transport)}
    assert transport.per_execution
    for execution_id in ("41", "42"):
        async with ToolBox(servers, execution_id=execution_id) as box:
            result = await box.call_tool("remote.echo", {"text": "hi"})
            assert result.content == "hi"
    seen = requests_seen(log)
    assert {r["headers"]["x-tarsy-execution"] for r in seen} == {"exec-41", "exec-42"}
    assert all(r["headers"]["x-team"] == "sre" for r in seen)


async def test_tarsys_literal_token_headers_and_session_cleanup(served, tmp_path):
    """TARSy's ``bearer_token``, ``custom_headers`` with ``{{.SESSION_ID}}`` and
    ``session_cleanup_url``: each execution its own id, one DELETE when it ends."""
    url, log = recording(served, tmp_path, token="literal-token-value")
    transport = HttpTransport(
        "http",
        url,
        bearer_token="literal-token-value",
        headers={"X-Session-ID": "{{.SESSION_ID}}"},
        session_cleanup_url=url.replace("/mcp", "/sessions/{{.SESSION_ID}}"),
    )
    assert "literal-token-value" not in repr(transport)
    servers = {"sandbox": MCPServerConfig("sandbox", transport)}
    for execution_id in ("exec-1", "exec-2"):
        async with ToolBox(servers, execution_id=execution_id) as box:
            assert (await box.call_tool("sandbox.echo", {"text": "hi"})).content == "hi"
    seen = requests_seen(log)
    assert all(r["headers"]["authorization"] == "Bearer literal-token-value" for r in seen)
    deletes = [(r["path"], r["headers"]["x-session-id"]) for r in seen if r["path"] != "/mcp"]
    assert deletes == [("/sessions/exec-1", "exec-1"), ("/sessions/exec-2", "exec-2")]
    assert {r["headers"]["x-session-id"] for r in seen} == {"exec-1", "exec-2"}


async def test_a_header_that_renders_empty_is_not_sent(served, tmp_path):
    url, log = recording(served, tmp_path)
    transport = HttpTransport("http", url, headers={"X-Session-ID": "{{.SESSION_ID}}"})
    async with MCPClientPool({"remote": MCPServerConfig("remote", transport)}) as pool:
        assert (await pool.call_tool("remote.echo", {"text": "x"})).content == "x"
    assert all("x-session-id" not in r["headers"] for r in requests_seen(log))


# --- helpers ---------------------------------------------------------------------------------

_SILENT_HTTP = """
import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"]))); s.listen()
held = []
while True:
    conn, _ = s.accept(); held.append(conn)  # accept, read nothing, never answer
"""

_SERVED: dict[int, Served] = {}


def _server_on(config: MCPServerConfig) -> Served:
    port = int(config.transport.url.split(":")[2].split("/")[0])
    return _SERVED[port]


def _children_running(name: str) -> list[int]:
    """Our child processes whose command line mentions ``name``."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = stat.rsplit(")", 1)[1].split()[1]
        if parent == me and name in cmdline and " stdio" in cmdline:
            found.append(int(entry.name))
    return found
