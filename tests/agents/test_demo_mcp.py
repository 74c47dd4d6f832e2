"""The demo Kubernetes MCP server, driven in-process through the SDK's ``Client``."""

from __future__ import annotations

import json

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from agents.demo_mcp.server import DATA_DIR, create_server

CRASHING = "payments-api-7d9f8b6c5d-x2k4p"
CRASHING_2 = "payments-api-7d9f8b6c5d-q8m7n"
WORKER = "payments-worker-5c8d7f9b44-h6tzr"


@pytest.fixture(scope="module")
def server() -> MCPServer:
    return create_server()


async def call(server: MCPServer, tool: str, **arguments: object) -> tuple[str, bool]:
    # A client per call: the SDK's in-process connection must be opened and closed by one
    # task, and pytest-asyncio runs fixture setup and teardown in different tasks.
    async with Client(server) as client:
        result = await client.call_tool(tool, arguments)
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    return text, bool(result.is_error)


async def ok(server: MCPServer, tool: str, **arguments: object) -> str:
    text, is_error = await call(server, tool, **arguments)
    assert not is_error, text
    return text


def rows(table: str) -> dict[str, list[str]]:
    """A kubectl-style table keyed by its first column."""
    lines = [line.split() for line in table.splitlines() if line.strip()]
    return {cells[0]: cells[1:] for cells in lines[1:]}


async def test_tools_have_typed_described_parameters(server: MCPServer) -> None:
    async with Client(server) as client:
        listing = await client.list_tools()
    tools = {tool.name: tool for tool in listing.tools}

    assert set(tools) == {
        "get_pods",
        "describe_pod",
        "get_pod_logs",
        "get_events",
        "get_secret",
        "get_deployments",
    }
    logs = tools["get_pod_logs"].input_schema
    assert set(logs["properties"]) == {"namespace", "name", "tail_lines", "previous"}
    assert sorted(logs["required"]) == ["name", "namespace"]
    assert logs["properties"]["tail_lines"]["type"] == "integer"
    assert logs["properties"]["tail_lines"]["default"] == 50
    assert logs["properties"]["previous"]["type"] == "boolean"
    for tool in tools.values():
        assert tool.description
        assert tool.input_schema["properties"]["namespace"]["description"]


async def test_get_pods_shows_the_crash_loop_and_the_healthy_pods(server: MCPServer) -> None:
    pods = rows(await ok(server, "get_pods", namespace="payments"))

    assert set(pods) == {CRASHING, CRASHING_2, WORKER, "payments-worker-5c8d7f9b44-wp2lk"} | {
        "postgres-0",
        "redis-0",
    }
    assert pods[CRASHING][:3] == ["0/1", "CrashLoopBackOff", "12"]
    assert pods[CRASHING_2][:3] == ["0/1", "CrashLoopBackOff", "11"]
    assert pods[CRASHING][-1] == "ip-10-0-2-17.ec2.internal"
    assert pods["redis-0"][:3] == ["1/1", "Running", "0"]
    assert pods[WORKER][:4] == ["1/1", "Running", "0", "3d4h"]

    default = rows(await ok(server, "get_pods", namespace="default"))
    assert set(default) == {"hello-web-6d4cf56db6-2xk9p", "hello-web-6d4cf56db6-zt7lm"}


async def test_describe_pod_shows_the_exit_code_and_no_database_password(server: MCPServer) -> None:
    text = await ok(server, "describe_pod", namespace="payments", name=CRASHING)

    assert "Image:          registry.example.com/payments/payments-api:2.14.0" in text
    assert "State:          Waiting\n      Reason:       CrashLoopBackOff" in text
    assert "Last State:     Terminated\n      Reason:       Error\n      Exit Code:    1" in text
    assert "Restart Count:  12" in text
    assert "DATABASE_HOST:  postgres.payments.svc" in text
    assert "DATABASE_PASSWORD" not in text
    assert "Ready             False" in text
    assert "BackOff     14s (x181 over 41m)" in text
    assert CRASHING_2 not in text  # only this pod's events


async def test_describe_pod_names_secret_refs_without_values(server: MCPServer) -> None:
    text = await ok(server, "describe_pod", namespace="payments", name=WORKER)

    password = "DATABASE_PASSWORD:  <set to the key 'password' in secret 'payments-db-credentials'>"
    assert password in text
    assert "Restart Count:  0" in text
    assert "Events:  <none>" in text


async def test_logs_show_the_root_cause(server: MCPServer) -> None:
    text = await ok(server, "get_pod_logs", namespace="payments", name=CRASHING)

    assert "WARN  config: DATABASE_PASSWORD is not set" in text
    assert "port 5432 failed: fe_sendauth: no password supplied" in text
    assert text.startswith("2025-11-21T14:29:47.812Z INFO  payments-api 2.14.0 starting")

    tail = await ok(server, "get_pod_logs", namespace="payments", name=CRASHING, tail_lines=2)
    assert tail.splitlines() == [
        '    raise DatabaseUnavailable(f"cannot connect to database {host}:{port}: {last_error}")',
        "payments_api.db.DatabaseUnavailable: cannot connect to database "
        "postgres.payments.svc:5432: fe_sendauth: no password supplied",
    ]


async def test_previous_logs_are_those_of_the_crash_before(server: MCPServer) -> None:
    text = await ok(server, "get_pod_logs", namespace="payments", name=CRASHING, previous=True)
    assert text.startswith("2025-11-21T14:24:43.812Z INFO  payments-api 2.14.0 starting")

    text, is_error = await call(
        server, "get_pod_logs", namespace="payments", name="redis-0", previous=True
    )
    assert is_error
    assert 'previous terminated container "redis" in pod "redis-0" not found' in text


async def test_tail_lines_must_be_positive(server: MCPServer) -> None:
    text, is_error = await call(
        server, "get_pod_logs", namespace="payments", name=CRASHING, tail_lines=0
    )
    assert is_error
    assert "tail_lines" in text


async def test_events_are_oldest_first_with_warnings(server: MCPServer) -> None:
    lines = (await ok(server, "get_events", namespace="payments")).splitlines()

    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]
    assert "Scaled down replica set payments-api-6f7b9c8d4 to 0 from 2" in lines[1]
    assert lines[-1].split()[:5] == ["8s", "Warning", "BackOff", f"pod/{CRASHING_2}", "176"]
    assert any("Readiness probe failed" in line for line in lines)

    assert "No events in namespace 'default'" in await ok(server, "get_events", namespace="default")


async def test_get_deployments_shows_the_failed_rollout(server: MCPServer) -> None:
    text = await ok(server, "get_deployments", namespace="payments")
    deployments = rows(text.split("\n\n")[0])

    assert deployments["payments-api"] == [
        "0/2",
        "2",
        "0",
        "262d",
        "registry.example.com/payments/payments-api:2.14.0",
        "Recreate",
    ]
    assert deployments["payments-worker"][0] == "2/2"
    assert "payments-api: revision 7 (change-cause: Deploy payments-api 2.14.0" in text
    assert "Progressing=False ProgressDeadlineExceeded" in text
    default = await ok(server, "get_deployments", namespace="default")
    assert list(rows(default.split("\n\n")[0])) == ["hello-web"]


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("get_pods", {}),
        ("get_events", {}),
        ("get_deployments", {}),
        ("describe_pod", {"name": CRASHING}),
        ("get_pod_logs", {"name": CRASHING}),
        ("get_secret", {"name": "payments-db-credentials"}),
    ],
)
async def test_unknown_namespace_is_a_tool_error_listing_namespaces(
    server: MCPServer, tool: str, extra: dict[str, str]
) -> None:
    text, is_error = await call(server, tool, namespace="kube-system", **extra)

    assert is_error
    assert "namespace 'kube-system' not found" in text
    assert "default, payments" in text


@pytest.mark.parametrize("tool", ["describe_pod", "get_pod_logs"])
async def test_unknown_pod_is_a_tool_error_listing_pods(server: MCPServer, tool: str) -> None:
    text, is_error = await call(server, tool, namespace="payments", name="payments-api")

    assert is_error
    assert "pod 'payments-api' not found in namespace 'payments'" in text
    assert f"{CRASHING}, {CRASHING_2}" in text


async def test_a_pod_in_another_namespace_is_pointed_out(server: MCPServer) -> None:
    text, is_error = await call(server, "describe_pod", namespace="default", name="redis-0")

    assert is_error
    assert "exists in namespace 'payments'" in text


def test_the_data_files_agree_with_each_other() -> None:
    cluster = json.loads((DATA_DIR / "cluster.json").read_text())
    logs = {path.name for path in (DATA_DIR / "logs").iterdir()}
    for namespace in cluster["namespaces"].values():
        names = {pod["name"] for pod in namespace["pods"]}
        started = {e[2]: e[4] for e in namespace["events"] if e[1] == "Started"}
        for pod in namespace["pods"]:
            assert pod["workload"] in namespace["workloads"]
            assert f"{pod['name']}.log" in logs
            assert (f"{pod['name']}.previous.log" in logs) == (pod["restarts"] > 0)
            if pod["restarts"]:
                assert started[f"pod/{pod['name']}"] == pod["restarts"] + 1
                first_line = (DATA_DIR / "logs" / f"{pod['name']}.log").read_text()
                assert first_line.startswith(pod["last_state"]["started"].rstrip("Z"))
        for event in namespace["events"]:
            kind, _, name = event[2].partition("/")
            if kind == "pod":
                assert name in names


async def test_get_secret_returns_what_kubectl_would_and_names_missing_ones(
    server: MCPServer,
) -> None:
    text = await ok(server, "get_secret", namespace="payments", name="payments-db-credentials")
    assert "kind: Secret" in text
    assert "password: " in text  # base64 as the API returns it; TARSy masks it downstream
    error, is_error = await call(server, "get_secret", namespace="payments", name="db")
    assert is_error
    assert "secret 'db' not found" in error
    assert "payments-db-credentials" in error
