"""GET /api/v1/system/mcp-servers and the system page: each server's last health check."""

from __future__ import annotations

import pytest
from django.utils import timezone

from sessions import services

pytestmark = pytest.mark.django_db


def test_the_api_reports_every_configured_server_sorted(client, api_token):
    services.mcp_server_health_record(
        server_id="kubernetes",
        healthy=True,
        tools=[{"name": "get_pods", "description": "List pods"}],
    )
    services.mcp_server_health_record(
        server_id="changes", healthy=False, tools=[], error="MCP server 'changes' exited"
    )
    response = client.get("/api/v1/system/mcp-servers", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 200
    servers = response.json()["servers"]
    assert [s["id"] for s in servers] == ["changes", "kubernetes", "workloads"]
    changes, kubernetes, workloads = servers
    assert kubernetes == {
        "id": "kubernetes",
        "healthy": True,
        "last_check": kubernetes["last_check"],
        "tool_count": 1,
        "tools": [{"name": "get_pods", "description": "List pods"}],
        "error": None,
    }
    assert changes["healthy"] is False
    assert changes["error"] == "MCP server 'changes' exited"
    assert workloads["last_check"] is None
    assert "not checked yet" in workloads["error"]


def test_an_unhealthy_check_keeps_the_last_known_tools():
    from sessions.models import MCPServerHealth

    services.mcp_server_health_record(
        server_id="kubernetes", healthy=True, tools=[{"name": "get_pods", "description": ""}]
    )
    services.mcp_server_health_record(server_id="kubernetes", healthy=False, tools=[], error="gone")
    health = MCPServerHealth.objects.get()
    assert (health.healthy, health.error, health.tools) == (
        False,
        "gone",
        [{"name": "get_pods", "description": ""}],
    )
    assert health.checked_at <= timezone.now()


def test_the_api_needs_a_login(client):
    assert client.get("/api/v1/system/mcp-servers").status_code == 401


def test_the_system_page_shows_health_and_errors(browser_client):
    services.mcp_server_health_record(
        server_id="changes", healthy=False, tools=[], error="could not start: <no kubeconfig>"
    )
    page = browser_client.get("/system/").content.decode()
    assert 'id="mcp-changes" class="unhealthy"' in page
    assert "could not start: &lt;no kubeconfig&gt;" in page  # escaped
    assert 'id="mcp-workloads"' in page
