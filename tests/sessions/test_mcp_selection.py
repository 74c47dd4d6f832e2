"""The alert's ``mcp`` override: validated at submission (API and form), stored on the
session, shown on its page and honoured by the investigating agent."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.memory import MEMORY_TOOLS
from sessions import services
from sessions.models import AlertSession, LLMInteraction, MCPServerHealth, TimelineEvent
from tests.sessions.test_api import post_alert
from worker.tasks import run_session

GET_PODS = {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
GET_EVENTS = {"name": "kubernetes.get_events", "arguments": {"namespace": "payments"}}


def listed(server_id: str, *tools: str) -> None:
    """What a worker's health check would have recorded."""
    MCPServerHealth.objects.create(
        server_id=server_id,
        healthy=True,
        tools=[{"name": t, "description": ""} for t in tools],
        checked_at=timezone.now(),
    )


@pytest.mark.django_db
def test_a_valid_selection_is_stored_and_returned(client, api_token, browser_client):
    listed("kubernetes", "get_pods", "get_events")
    selection = {
        "servers": [{"name": "kubernetes", "tools": ["get_pods"]}, {"name": "changes"}],
        "native_tools": {"google_search": False},
    }
    response = post_alert(client, {"data": "pod down", "mcp": selection}, api_token)
    assert response.status_code == 202, response.json()
    session = AlertSession.objects.get()
    assert session.mcp_selection == selection
    detail = client.get(
        f"/api/v1/sessions/{session.id}", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    ).json()
    assert detail["mcp_selection"] == selection

    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert "Tools chosen for this alert:" in page
    assert "<code>kubernetes</code> (get_pods)" in page
    assert "<code>changes</code> (all tools)" in page
    assert "google_search off" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mcp", "message"),
    [
        (
            {"servers": [{"name": "prometheus"}]},
            "MCP server 'prometheus' not found in configuration; configured: changes, kubernetes, workloads",
        ),
        (
            {"servers": [{"name": "kubernetes", "tools": ["delete_pod"]}]},
            "tool 'delete_pod' not found on MCP server 'kubernetes'; its tools: get_events, get_pods",
        ),
        ({"servers": []}, "'mcp.servers' is empty"),
        ({"servers": [{"name": "kubernetes", "tools": []}]}, "'mcp.servers[0].tools' is empty"),
        (
            {"servers": [{"name": "kubernetes", "tools": "get_pods"}]},
            "'mcp.servers[0].tools' must be a list",
        ),
        ({"servers": [{"name": "kubernetes"}, {"name": "kubernetes"}]}, "named twice"),
        (
            {"servers": [{"name": "kubernetes", "tool": ["x"]}]},
            "unknown field(s) in 'mcp.servers[0]': 'tool'",
        ),
        (
            {"servers": [{"tools": ["x"]}]},
            "'mcp.servers[0].name' must be the name of an MCP server",
        ),
        ({"servers": ["kubernetes"]}, "'mcp.servers[0]' must be an object"),
        ({"server": []}, "unknown field(s) in 'mcp': 'server'"),
        (
            {"servers": [{"name": "kubernetes"}], "native_tools": {"google_search": "yes"}},
            "'mcp.native_tools.google_search' must be true or false",
        ),
        (
            {"servers": [{"name": "kubernetes"}], "native_tools": {"web": True}},
            "unknown field(s) in 'mcp.native_tools': 'web'",
        ),
        ("kubernetes", "'mcp' must be an object, got str"),
    ],
)
def test_a_wrong_selection_is_a_400_naming_the_problem(client, api_token, mcp, message):
    listed("kubernetes", "get_pods", "get_events")
    response = post_alert(client, {"data": "pod down", "mcp": mcp}, api_token)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert AlertSession.objects.count() == 0


@pytest.mark.django_db
def test_a_server_never_listed_accepts_any_tool_name(client, api_token):
    response = post_alert(
        client,
        {"data": "pod down", "mcp": {"servers": [{"name": "workloads", "tools": ["anything"]}]}},
        api_token,
    )
    assert response.status_code == 202


@pytest.mark.django_db
def test_the_form_offers_the_listed_tools_and_stores_the_choice(browser_client):
    listed("kubernetes", "get_pods", "get_events")
    page = browser_client.get("/sessions/new/").content.decode()
    assert 'value="kubernetes.get_pods"' in page
    assert 'value="changes"' in page
    token = browser_client.get("/sessions/new/").cookies["csrftoken"].value
    response = browser_client.post(
        "/sessions/new/",
        {
            "alert_type": "kubernetes",
            "data": "namespace: payments",
            "mcp_tools": ["kubernetes.get_pods"],
            "mcp_servers": ["changes"],
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert AlertSession.objects.get().mcp_selection == {
        "servers": [{"name": "changes"}, {"name": "kubernetes", "tools": ["get_pods"]}]
    }


@pytest.mark.django_db
def test_the_form_with_nothing_ticked_keeps_the_chains_servers(browser_client):
    token = browser_client.get("/sessions/new/").cookies["csrftoken"].value
    browser_client.post(
        "/sessions/new/",
        {"alert_type": "kubernetes", "data": "namespace: payments", "csrfmiddlewaretoken": token},
    )
    assert AlertSession.objects.get().mcp_selection is None


@pytest.mark.django_db(transaction=True)
def test_the_agent_gets_only_the_selected_tools(scripted_provider):
    scripted_provider([{"tool_calls": [GET_EVENTS, GET_PODS]}, {"text": "Done."}])
    session = services.session_create(
        alert_type="kubernetes",
        alert_data="namespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
        mcp_selection={"servers": [{"name": "kubernetes", "tools": ["get_pods"]}]},
    )
    assert run_session(str(session.id)) == "completed"
    first = LLMInteraction.objects.filter(session=session, interaction_type="iteration").first()
    assert mcp_tools(first) == ["kubernetes.get_pods"]
    # The (scripted) model can call only what it was offered.
    calls = TimelineEvent.objects.filter(session=session, event_type="llm_tool_call")
    assert [c.metadata["tool_name"] for c in calls] == ["kubernetes.get_pods"]


async def test_a_tool_outside_the_selection_is_refused_by_the_toolbox():
    import sys

    from agents.tools.toolbox import ToolBox
    from config.types import MCPServerConfig, StdioTransport

    servers = {
        "kubernetes": MCPServerConfig(
            "kubernetes", StdioTransport(sys.executable, ("-m", "agents.demo_mcp"))
        )
    }
    async with ToolBox(servers, only={"kubernetes": frozenset({"get_pods"})}) as box:
        assert [t.name for t in await box.list_tools()] == ["kubernetes.get_pods"]
        refused = await box.call_tool("kubernetes.get_events", {"namespace": "payments"})
        allowed = await box.call_tool("kubernetes.get_pods", {"namespace": "payments"})
    assert refused.is_error
    assert refused.content == (
        "Tool 'kubernetes.get_events' was not selected for this alert; selected tools of "
        "MCP server 'kubernetes': kubernetes.get_pods"
    )
    assert not allowed.is_error
    assert "payments-api" in allowed.content


@pytest.mark.django_db(transaction=True)
def test_the_selection_replaces_the_agents_servers(scripted_provider):
    scripted_provider([{"text": "Done."}])
    session = services.session_create(
        alert_type="kubernetes",
        alert_data="namespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
        mcp_selection={"servers": [{"name": "changes"}]},
    )
    assert run_session(str(session.id)) == "completed"
    first = LLMInteraction.objects.filter(session=session, interaction_type="iteration").first()
    assert sorted(mcp_tools(first)) == ["changes.get_deployments", "changes.get_events"]


def test_native_tool_switches_apply_on_top_of_the_providers_own():
    from agents.resolver import ProviderChoice, _switch_native_tools
    from llm.types import ProviderConfig

    choice = ProviderChoice(
        ProviderConfig(
            name="g", type="google", model="m", native_tools=("google_search", "url_context")
        ),
        "google-native",
        None,
    )
    switched = _switch_native_tools(choice, {"google_search": False, "code_execution": True})
    assert switched.config.native_tools == ("url_context", "code_execution")


def mcp_tools(call) -> list[str]:
    """The MCP servers' tools a call offered (memory's own tools come with memory on,
    whatever the selection: it chooses MCP servers)."""
    return [tool for tool in call.tools if tool not in MEMORY_TOOLS]
