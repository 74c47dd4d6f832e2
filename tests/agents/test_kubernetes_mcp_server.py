"""The real ``kubernetes-mcp-server`` (npm), as docs/configuration.md tells operators to run it:
``--read-only`` removes its write tools, its typed arguments arrive typed, a cluster it
cannot reach is an error result (not a crash), and when it cannot start the error quotes
the first line of its stderr, where it prints the cause before pages of usage."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.tools.mcp_client import MCPClientPool, MCPServerError
from config.types import MCPServerConfig, StdioTransport
from tests.agents.test_mcp_transports import npm_servers

WRITE_TOOLS = {
    "pods_run",
    "pods_delete",
    "pods_exec",
    "resources_create_or_update",
    "resources_delete",
}
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: sre
  user: {token: not-a-real-token}
contexts:
- name: nowhere
  context: {cluster: nowhere, user: sre, namespace: default}
current-context: nowhere
"""


@pytest.fixture(scope="module")
def binary() -> str:
    return str(npm_servers() / "kubernetes-mcp-server")


def server(binary: str, *args: str) -> dict[str, MCPServerConfig]:
    return {"kubernetes": MCPServerConfig("kubernetes", StdioTransport(binary, args))}


async def test_read_only_offers_no_write_tools_and_reports_cluster_errors(binary, tmp_path: Path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    async with MCPClientPool(
        server(binary, "--read-only", "--kubeconfig", str(kubeconfig))
    ) as pool:
        names = {tool.name.split(".", 1)[1] for tool in await pool.list_tools()}
        pods = await pool.call_tool(
            "kubernetes.pods_log",
            {"name": "payments-api-0", "namespace": "payments", "previous": True, "tail": 100},
        )
        typed_as_strings = await pool.call_tool(
            "kubernetes.pods_log",
            {"name": "payments-api-0", "namespace": "payments", "previous": "true"},
        )
    assert {"pods_list", "pods_log", "events_list"} <= names
    assert not names & WRITE_TOOLS
    # Arguments were accepted (typed as the schema says); the cluster was not there.
    assert pods.is_error
    assert "connection refused" in pods.content
    assert typed_as_strings.is_error
    assert "connection refused" not in typed_as_strings.content


async def test_disable_destructive_alone_still_offers_pods_run(binary, tmp_path: Path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    config = server(binary, "--disable-destructive", "--kubeconfig", str(kubeconfig))
    async with MCPClientPool(config) as pool:
        names = {tool.name.split(".", 1)[1] for tool in await pool.list_tools()}
    assert "pods_run" in names  # why docs/configuration.md says --read-only


async def test_a_start_failure_quotes_the_cause_from_the_first_line(binary, tmp_path: Path):
    empty = tmp_path / "kubeconfig"
    empty.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(MCPServerError) as caught:
        async with MCPClientPool(server(binary, "--read-only", "--kubeconfig", str(empty))):
            pytest.fail("the pool must not open")
    message = str(caught.value)
    stderr = message.split("Server stderr:\n", 1)[1]
    assert stderr.startswith(
        "Error: unable to create kubernetes target provider: no current-context"
    )
    assert len(stderr) < 3000  # head and tail, not pages of usage
