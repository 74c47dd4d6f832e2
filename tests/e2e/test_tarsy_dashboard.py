"""TARSy's ``test/e2e/dashboard_test.go`` (TestDashboardEndpoints), replayed here.

Three single-stage sessions of TARSy's ``concurrency`` configuration (unchanged) run one
after another, each with its own scripted investigation and executive summary (TARSy's
texts and token counts, at the Gemini wire: scenarios/dashboard/llm_script.json). Then
the REST endpoints TARSy's dashboard calls are asked what TARSy's test asks them: health,
the session list (pagination, status/search/chain/alert-type filters, sorting), active
sessions, a session's detail, summary and status, filter options, system warnings, MCP
servers, default tools, the sanitised configuration (its skills included: the
configuration's skills/example-skill, SystemConfigSkillDetail, SystemConfigSkillNotFound)
and the alert types.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import Running, scenario_deployment

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# TARSy's sessionSpec: alert data, investigation text (final_analysis), summary text
# (executive_summary), then each call's input and output tokens.
SPECS = [
    ("Session Alpha payload", "Alpha investigation: CPU spike detected on node-1.",
     "Alpha summary: CPU spike resolved.", (100, 50), (30, 10)),
    ("Session Beta payload", "Beta investigation: memory pressure on pod-xyz.",
     "Beta summary: OOM risk mitigated.", (200, 100), (40, 20)),
    ("Session Charlie payload", "Charlie investigation: network latency anomaly.",
     "Charlie summary: latency normalized.", (150, 75), (35, 15)),
]  # fmt: skip


def _expected(spec: tuple) -> dict[str, Any]:
    data, investigation, summary, (inv_in, inv_out), (sum_in, sum_out) = spec
    return {
        "alert_data": data,
        "final_analysis": investigation,
        "executive_summary": summary,
        "input_tokens": inv_in + sum_in,
        "output_tokens": inv_out + sum_out,
        "total_tokens": inv_in + inv_out + sum_in + sum_out,
    }


class Dashboard:
    def __init__(self, run: Running, ids: list[str]) -> None:
        self.run = run
        self.ids = ids
        self.expected = {i: _expected(spec) for i, spec in zip(ids, SPECS, strict=True)}

    def sessions(self, query: str = "") -> dict[str, Any]:
        return self.run.get(f"/sessions?{query}" if query else "/sessions")

    def ids_of(self, query: str) -> list[str]:
        return [s["id"] for s in self.sessions(query)["sessions"]]

    def raw(self, path: str) -> tuple[int, bytes]:
        """A GET whose answer may not be JSON (a 404 of a malformed id)."""
        request = urllib.request.Request(
            f"{self.run.tarsy.base_url}{path}",
            headers={"Authorization": f"Bearer {self.run.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory) -> Iterator[Dashboard]:
    """TARSy submits the three sessions one at a time, each waited for to complete."""
    with scenario_deployment(
        "dashboard", tmp_path_factory.mktemp("dashboard"), config="concurrency"
    ) as run:
        ids = []
        for data, *_ in SPECS:
            ids.append(run.submit("test-concurrency", data))
            assert run.wait_status(ids[-1]) == "completed", run.tarsy.log_tail(80)
        yield Dashboard(run, ids)


def test_health_says_database_and_workers_are_healthy(dashboard):
    status, body = dashboard.raw("/health")
    health = json.loads(body)
    assert (status, health["status"]) == (200, "healthy"), health
    assert health["version"]
    assert health["checks"]["database"]["status"] == "healthy"
    assert health["checks"]["worker_pool"]["status"] == "healthy"


def test_the_session_list_shows_each_session_as_tarsy(dashboard):
    listing = dashboard.sessions()
    assert listing["pagination"] == {"page": 1, "page_size": 25, "total_items": 3, "total_pages": 1}
    items = {s["id"]: s for s in listing["sessions"]}
    assert sorted(items) == sorted(dashboard.ids)
    for session_id, expected in dashboard.expected.items():
        session = items[session_id]
        assert {
            key: session.get(key)
            for key in (
                "alert_type", "chain_id", "status", "executive_summary", "error_message",
                "author", "llm_interaction_count", "mcp_interaction_count", "input_tokens",
                "output_tokens", "total_tokens", "total_stages", "completed_stages",
                "has_parallel_stages", "chat_message_count",
            )
        } == {
            "alert_type": "test-concurrency",
            "chain_id": "concurrency-chain",
            "status": "completed",
            "executive_summary": expected["executive_summary"],
            "error_message": None,
            "author": "api-client",
            "llm_interaction_count": 2,
            "mcp_interaction_count": 0,
            "input_tokens": expected["input_tokens"],
            "output_tokens": expected["output_tokens"],
            "total_tokens": expected["total_tokens"],
            "total_stages": 2,  # the investigation and the executive summary
            "completed_stages": 2,
            "has_parallel_stages": False,
            "chat_message_count": 0,
        }, session_id  # fmt: skip
        for key in ("started_at", "completed_at", "duration_ms"):
            assert session[key] is not None, (session_id, key)


def test_the_session_list_pages_as_tarsy(dashboard):
    first = dashboard.sessions("page=1&page_size=2")
    second = dashboard.sessions("page=2&page_size=2")
    assert first["pagination"] == {"page": 1, "page_size": 2, "total_items": 3, "total_pages": 2}
    assert second["pagination"] == {"page": 2, "page_size": 2, "total_items": 3, "total_pages": 2}
    seen = [s["id"] for s in first["sessions"]] + [s["id"] for s in second["sessions"]]
    assert (len(first["sessions"]), len(second["sessions"])) == (2, 1)
    assert sorted(seen) == sorted(dashboard.ids)


def test_the_session_list_filters_by_status(dashboard):
    completed = dashboard.sessions("status=completed")["sessions"]
    assert sorted(s["id"] for s in completed) == sorted(dashboard.ids)
    assert all(s["status"] == "completed" for s in completed)
    assert dashboard.ids_of("status=pending") == []
    assert dashboard.ids_of("status=failed,cancelled") == []


def test_the_session_list_searches_the_alert_data(dashboard):
    assert dashboard.ids_of("search=Alpha") == [dashboard.ids[0]]
    assert sorted(dashboard.ids_of("search=payload")) == sorted(dashboard.ids)
    assert dashboard.ids_of("search=nonexistent") == []


def test_the_session_list_filters_by_chain_and_alert_type(dashboard):
    assert sorted(dashboard.ids_of("chain_id=concurrency-chain")) == sorted(dashboard.ids)
    assert dashboard.ids_of("chain_id=nonexistent-chain") == []
    assert sorted(dashboard.ids_of("alert_type=test-concurrency")) == sorted(dashboard.ids)
    assert dashboard.ids_of("alert_type=nonexistent") == []


def test_the_session_list_sorts_by_creation(dashboard):
    assert dashboard.ids_of("sort_by=created_at&sort_order=asc") == dashboard.ids
    assert dashboard.ids_of("sort_by=created_at&sort_order=desc") == dashboard.ids[::-1]


def test_no_session_is_active_or_queued_once_all_completed(dashboard):
    active = dashboard.run.get("/sessions/active")
    assert (active["active"], active["queued"]) == ([], [])


def test_a_sessions_detail_is_tarsys(dashboard):
    beta = dashboard.ids[1]
    detail = dashboard.run.get(f"/sessions/{beta}")
    expected = dashboard.expected[beta]
    assert {
        key: detail.get(key)
        for key in (
            "id", "alert_data", "alert_type", "chain_id", "status", "error_message", "author",
            "final_analysis", "executive_summary", "total_stages", "completed_stages",
            "failed_stages", "has_parallel_stages", "llm_interaction_count",
            "mcp_interaction_count", "chat_message_count", "input_tokens", "output_tokens",
            "total_tokens",
        )
    } == {
        "id": beta,
        "alert_data": "Session Beta payload",
        "alert_type": "test-concurrency",
        "chain_id": "concurrency-chain",
        "status": "completed",
        "error_message": None,
        "author": "api-client",
        "final_analysis": expected["final_analysis"],
        "executive_summary": expected["executive_summary"],
        "total_stages": 2,
        "completed_stages": 2,
        "failed_stages": 0,
        "has_parallel_stages": False,
        "llm_interaction_count": 2,
        "mcp_interaction_count": 0,
        "chat_message_count": 0,
        "input_tokens": expected["input_tokens"],
        "output_tokens": expected["output_tokens"],
        "total_tokens": expected["total_tokens"],
    }  # fmt: skip
    for key in ("started_at", "completed_at", "duration_ms"):
        assert detail[key] is not None, key
    stages = detail["stages"]
    assert len(stages) == 2
    analysis = stages[0]
    assert analysis["id"]
    assert {
        key: analysis.get(key)
        for key in ("stage_name", "stage_index", "status", "expected_agent_count")
    } == {
        "stage_name": "analysis",
        "stage_index": 1,
        "status": "completed",
        "expected_agent_count": 1,
    }


def test_a_sessions_summary_adds_up_its_tokens(dashboard):
    alpha = dashboard.ids[0]
    summary = dashboard.run.get(f"/sessions/{alpha}/summary")
    expected = dashboard.expected[alpha]
    assert {
        key: summary.get(key)
        for key in (
            "session_id", "total_interactions", "llm_interactions", "mcp_interactions",
            "input_tokens", "output_tokens", "total_tokens",
        )
    } == {
        "session_id": alpha,
        "total_interactions": 2,
        "llm_interactions": 2,
        "mcp_interactions": 0,
        "input_tokens": expected["input_tokens"],
        "output_tokens": expected["output_tokens"],
        "total_tokens": expected["total_tokens"],
    }  # fmt: skip
    assert summary["total_duration_ms"] is not None
    chain = summary["chain_statistics"]
    assert (chain["total_stages"], chain["completed_stages"], chain["failed_stages"]) == (2, 2, 0)
    # No score: TARSy omits the score's fields.
    assert summary.get("total_score") is None
    assert summary.get("scoring_status") is None


def test_a_sessions_status_is_tarsys(dashboard):
    alpha = dashboard.ids[0]
    status = dashboard.run.get(f"/sessions/{alpha}/status")
    expected = dashboard.expected[alpha]
    assert {
        key: status.get(key)
        for key in ("id", "status", "final_analysis", "executive_summary", "error_message")
    } == {
        "id": alpha,
        "status": "completed",
        "final_analysis": expected["final_analysis"],
        "executive_summary": expected["executive_summary"],
        "error_message": None,
    }


def test_an_unknown_sessions_summary_and_status_are_not_found(dashboard):
    # TARSy's ids are any text; ours are UUIDs. TARSy's "nonexistent-id" and an unknown
    # UUID both answer 404.
    for what in ("summary", "status"):
        for session_id in ("nonexistent-id", "00000000-0000-4000-8000-000000000000"):
            status, body = dashboard.raw(f"/api/v1/sessions/{session_id}/{what}")
            assert status == 404, (what, session_id, body[:200])
            assert body, (what, session_id)


def test_the_filter_options_reflect_the_database(dashboard):
    options = dashboard.run.get("/sessions/filter-options")
    # TARSy's seven session statuses.
    assert sorted(options["statuses"]) == sorted(
        ["pending", "in_progress", "cancelling", "completed", "failed", "cancelled", "timed_out"]
    )
    assert options["alert_types"] == ["test-concurrency"]
    assert options["chain_ids"] == ["concurrency-chain"]


# TARSy's harness runs no MCP health monitor: its warnings and MCP server list are empty.
# Ours run the workers' health checks, and this configuration's two servers are dummies
# (a token for a command, a host on example.com): both are listed unhealthy and warned
# of. The configuration itself warns of nothing (SimpleAgent's ``skills: []`` is valid).
CONFIGURED_SERVERS = ["http-probe-server", "kubernetes-server"]


def test_the_system_warnings_are_only_the_dummy_servers(dashboard):
    warnings = dashboard.run.get("/system/warnings")["warnings"]
    by_category: dict[str, list[str]] = {}
    for warning in warnings:
        by_category.setdefault(warning["category"], []).append(warning["message"])
    assert sorted(by_category) == ["mcp_server"], warnings
    servers = sorted(m.split("'")[1] for m in by_category["mcp_server"])
    assert servers == CONFIGURED_SERVERS


def test_the_mcp_servers_listed_are_the_configured_dummies_unhealthy(dashboard):
    servers = dashboard.run.get("/system/mcp-servers")["servers"]
    assert sorted(s["id"] for s in servers) == CONFIGURED_SERVERS
    assert [(s["healthy"], s["tool_count"]) for s in servers] == [(False, 0)] * 2


def test_the_default_tools_are_all_off_for_the_test_provider(dashboard):
    assert dashboard.run.get("/system/default-tools")["native_tools"] == {
        "google_search": False,
        "code_execution": False,
        "url_context": False,
    }


def test_the_configuration_snapshot_is_sanitised_as_tarsy(dashboard):
    config = dashboard.run.get("/system/config")
    body = json.dumps(config)
    for sentinel in (
        "E2E_SENTINEL_MCP_ARG", "E2E_SENTINEL_MCP_ENV", "E2E_SENTINEL_URL_SECRET",
        "E2E_SENTINEL_QUERY", "E2E_SENTINEL_BEARER", "E2E_SENTINEL_BASE_URL",
        "E2E_SENTINEL_BASE_QUERY", "E2E_SENTINEL_SKILL_BODY",
        "ghp_FAKE_NOT_REAL_GITHUB_TOKEN_XXXXXXXXXXXX",
    ):  # fmt: skip
        assert sentinel not in body, sentinel
    assert config["defaults"]["llm_provider"] == "test-provider"
    simple = config["agents"]["SimpleAgent"]
    assert simple["custom_instructions"] == "You are SimpleAgent, performing a quick analysis."
    assert "llm_provider" not in simple
    assert "test-concurrency" in config["chains"]["concurrency-chain"]["alert_types"]

    kubernetes = config["mcp_servers"]["kubernetes-server"]["transport"]
    assert kubernetes["type"] == "stdio"
    assert kubernetes["command"] == "***"  # a secret-looking command
    assert kubernetes["args"] == ["***"]
    assert "KUBE_TOKEN" in kubernetes["env_keys"]
    assert "env" not in kubernetes
    assert "bearer_token" not in kubernetes
    probe = config["mcp_servers"]["http-probe-server"]["transport"]
    assert probe["url"] == "https://mcp.example.com/v1"
    assert probe["bearer_token_set"] is True
    assert "bearer_token" not in probe

    # TARSy shows the file's base URL, sanitised ("https://llm.example.com/v1"); ours shows
    # where the provider is reached, and TARSY_GOOGLE_BASE_URL sends it to the fake.
    provider = config["llm_providers"]["test-provider"]
    assert provider["base_url"] == dashboard.run.tarsy.env["TARSY_GOOGLE_BASE_URL"]
    assert isinstance(config["queue"]["poll_interval"], str)  # a duration string
    # The configuration's skills, each named, none with its text.
    skills = config["skills"]
    assert isinstance(skills, dict)
    assert "example-skill" in skills
    for name, skill in skills.items():
        assert isinstance(skill, dict), name
        assert "body" not in skill, name
        assert skill["name"] == name


def test_a_skill_of_the_configuration_is_shown_with_its_text(dashboard):
    skill = dashboard.run.get("/system/config/skills/example-skill")
    assert skill["name"] == "example-skill"
    assert skill["description"] == "Example skill for config viewer e2e coverage."
    assert isinstance(skill["body"], str)
    assert "E2E_SENTINEL_SKILL_BODY" in skill["body"]


def test_a_skill_the_configuration_lacks_is_not_found(dashboard):
    answer = dashboard.run.call(
        "GET", "/system/config/skills/definitely-missing-skill", expect=(404,)
    )
    assert answer  # an error body


def test_the_alert_types_come_from_the_configuration(dashboard):
    types = dashboard.run.get("/alert-types")
    # The built-in default alert type "kubernetes" runs the built-in "kubernetes" chain.
    assert (types["default_chain_id"], types["default_alert_type"]) == ("kubernetes", "kubernetes")
    assert [(t["type"], t["chain_id"]) for t in types["alert_types"]] == [
        ("test-concurrency", "concurrency-chain"),
        ("kubernetes", "kubernetes"),
    ]
    assert types["alert_types"][1]["description"] == "Single-stage Kubernetes analysis"
