"""MCPClientPool against real stdio servers: the demo cluster and a misbehaving test server."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agents.tools.mcp_client import MCPClientPool, MCPServerError
from config.types import MCPServerConfig, StdioTransport

# One event loop for the module, so the read-only tests can share one pool of servers.
pytestmark = pytest.mark.asyncio(loop_scope="module")

MISBEHAVING = Path(__file__).with_name("misbehaving_mcp_server.py")
KUBERNETES_TOOLS = [
    "kubernetes.get_pods",
    "kubernetes.describe_pod",
    "kubernetes.get_pod_logs",
    "kubernetes.get_events",
    "kubernetes.get_secret",
    "kubernetes.get_deployments",
]


def server(
    server_id: str, *args: str, command: str = sys.executable, **env: str
) -> MCPServerConfig:
    return MCPServerConfig(server_id, StdioTransport(command, args, env))


def kubernetes() -> MCPServerConfig:
    return server("kubernetes", "-m", "agents.demo_mcp")


def misbehaving() -> MCPServerConfig:
    return server("misbehaving", str(MISBEHAVING), TARSY_TEST_MARKER="42")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[MCPClientPool]:
    servers = {"kubernetes": kubernetes(), "misbehaving": misbehaving()}
    async with MCPClientPool(servers, call_timeout=2) as pool:
        yield pool


async def test_list_tools_gives_canonical_names_and_input_schemas(pool: MCPClientPool) -> None:
    tools = {tool.name: tool for tool in await pool.list_tools()}

    assert [name for name in tools if name.startswith("kubernetes.")] == KUBERNETES_TOOLS
    assert "misbehaving.hang" in tools
    logs = tools["kubernetes.get_pod_logs"]
    assert "logs" in logs.description
    assert logs.parameters_schema["type"] == "object"
    assert set(logs.parameters_schema["properties"]) == {
        "namespace",
        "name",
        "tail_lines",
        "previous",
    }
    assert sorted(logs.parameters_schema["required"]) == ["name", "namespace"]


async def test_call_tool_returns_the_text(pool: MCPClientPool) -> None:
    result = await pool.call_tool(
        "kubernetes.get_pod_logs",
        {"namespace": "payments", "name": "payments-api-7d9f8b6c5d-x2k4p", "tail_lines": 1},
    )

    assert not result.is_error
    assert result.content == (
        "payments_api.db.DatabaseUnavailable: cannot connect to database "
        "postgres.payments.svc:5432: fe_sendauth: no password supplied"
    )
    assert 0 <= result.duration_ms < 2000


async def test_a_tool_error_is_an_error_result(pool: MCPClientPool) -> None:
    result = await pool.call_tool("kubernetes.get_pods", {"namespace": "kube-system"})

    assert result.is_error
    assert "namespace 'kube-system' not found" in result.content
    assert "default, payments" in result.content


async def test_invalid_arguments_are_an_error_result(pool: MCPClientPool) -> None:
    result = await pool.call_tool("kubernetes.get_pods", {})

    assert result.is_error
    assert "namespace" in result.content
    assert "Field required" in result.content


async def test_an_unknown_tool_lists_the_servers_tools(pool: MCPClientPool) -> None:
    result = await pool.call_tool("kubernetes.get_secrets", {"namespace": "payments"})

    assert result.is_error
    assert "Unknown tool 'kubernetes.get_secrets'" in result.content
    assert ", ".join(KUBERNETES_TOOLS) in result.content


@pytest.mark.parametrize("name", ["get_pods", ".get_pods", "kubernetes.", "k8s.get_pods"])
async def test_a_bad_tool_name_is_an_error_result(pool: MCPClientPool, name: str) -> None:
    result = await pool.call_tool(name, {"namespace": "payments"})

    assert result.is_error
    assert repr(name) in result.content
    assert "kubernetes, misbehaving" in result.content


async def test_the_configured_env_is_merged_over_the_sdk_default(pool: MCPClientPool) -> None:
    async def env(name: str) -> str:
        result = await pool.call_tool("misbehaving.getenv", {"name": name})
        assert not result.is_error, result.content
        return result.content

    assert await env("TARSY_TEST_MARKER") == "42"
    assert await env("PATH") != "<unset>"
    # Each server is told its id (TARSy's ``command: mock`` servers need it).
    assert await env("TARSY_MCP_SERVER_ID") == "misbehaving"
    # Only the SDK's short list of safe variables is inherited, not our whole environment.
    assert await env("PYTEST_CURRENT_TEST") == "<unset>"


async def test_structured_only_content_is_dumped_as_json(pool: MCPClientPool) -> None:
    result = await pool.call_tool("misbehaving.structured", {})

    assert not result.is_error
    assert result.content == '{\n  "pods": 3\n}'


async def test_a_call_past_call_timeout_is_an_error_and_the_server_lives_on(
    pool: MCPClientPool,
) -> None:
    result = await pool.call_tool("misbehaving.hang", {"seconds": 30})

    assert result.is_error
    assert result.content == "Tool 'misbehaving.hang' timed out after 2s"
    assert 2000 <= result.duration_ms < 5000
    echo = await pool.call_tool("misbehaving.echo", {"text": "still here"})
    assert (echo.content, echo.is_error) == ("still here", False)


async def test_cancellation_propagates(pool: MCPClientPool) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool.call_tool("misbehaving.hang", {"seconds": 30}), 0.2)

    echo = await pool.call_tool("misbehaving.echo", {"text": "after cancel"})
    assert (echo.content, echo.is_error) == ("after cancel", False)


async def test_a_crash_mid_call_is_retried_once_and_the_server_restarted(
    capfd: pytest.CaptureFixture[str],
) -> None:
    pool = MCPClientPool({"kubernetes": kubernetes(), "misbehaving": misbehaving()})
    async with pool:
        listed = await pool.list_tools()

        crash = await pool.call_tool("misbehaving.crash", {})
        again = await pool.call_tool("misbehaving.echo", {"text": "anyone?"})
        healthy = await pool.call_tool("kubernetes.get_events", {"namespace": "default"})

        assert await pool.list_tools() == listed
        closing = time.monotonic()
    assert time.monotonic() - closing < 10

    # The crash happened on the first try and again on a fresh session: an error, with
    # the server's own words.
    assert crash.is_error
    assert "MCP server 'misbehaving' closed the connection" in crash.content
    assert "a retry on a fresh session failed too" in crash.content
    assert "crashing on purpose" in crash.content
    # The next call starts the server again and goes through.
    assert not again.is_error
    assert "anyone?" in again.content
    assert not healthy.is_error
    # The server's stderr went to a file, not to our terminal.
    assert "crashing on purpose" not in capfd.readouterr().err


async def test_a_command_that_does_not_exist_raises_naming_the_server() -> None:
    servers = {"kubernetes": kubernetes(), "k8s": server("k8s", command="no-such-mcp-server")}
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool(servers):
            pytest.fail("the pool must not open")

    assert caught.value.server_id == "k8s"
    message = str(caught.value)
    assert "MCP server 'k8s' (command: no-such-mcp-server) could not be started" in message
    assert "No such file or directory" in message


async def test_a_server_that_exits_at_startup_raises_with_its_stderr() -> None:
    script = "import sys; sys.stderr.write('KUBECONFIG is not set\\n'); sys.exit(2)"
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool({"broken": server("broken", "-c", script)}):
            pytest.fail("the pool must not open")

    message = str(caught.value)
    assert message.startswith("MCP server 'broken' (command: ")
    assert "failed to initialize" in message
    assert message.endswith("Server stderr:\nKUBECONFIG is not set")


async def test_a_server_that_never_answers_raises_after_init_timeout() -> None:
    silent = server("silent", "-c", "import sys; sys.stdin.read()")
    started = time.monotonic()
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool({"silent": silent}, init_timeout=0.5):
            pytest.fail("the pool must not open")

    assert "MCP server 'silent'" in str(caught.value)
    assert "did not initialize within 0.5s" in str(caught.value)
    assert time.monotonic() - started < 5
