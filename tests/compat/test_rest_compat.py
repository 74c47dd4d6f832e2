"""TARSy's requests (docs/api.md §1) against sessions that really ran, asserting TARSy's
response shapes: field names, types, null versus absent, envelopes, status codes and
error bodies. Every body is also checked against our OpenAPI document."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import jsonschema
import pytest
from django.test import Client

from api.rest import api
from sessions.auth import api_token_create
from sessions.models import AlertSession, SessionStatus
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = api.get_openapi_schema(path_prefix="/api/v1/")
ALERT = "alert: PodCrashLooping\nnamespace: payments\npod: payments-api-7d9f8b6c5d-x2k4p"
LIST_ITEM_KEYS = {
    "id", "alert_type", "chain_id", "status", "author", "created_at", "started_at",
    "completed_at", "duration_ms", "error_message", "executive_summary",
    "llm_interaction_count", "mcp_interaction_count", "input_tokens", "output_tokens",
    "total_tokens", "total_stages", "completed_stages", "has_parallel_stages",
    "has_sub_agents", "has_action_stages", "actions_executed", "chat_message_count",
    "provider_fallback_count", "current_stage_index", "current_stage_id",
    "matched_in_content", "latest_score", "scoring_status", "review_status", "assignee",
    "quality_rating", "action_taken", "investigation_feedback", "feedback_edited",
    "feedback_edited_by", "feedback_edited_at",
}  # fmt: skip
DETAIL_KEYS = {
    "id", "alert_data", "alert_type", "status", "chain_id", "author", "error_message",
    "final_analysis", "executive_summary", "executive_summary_error", "runbook_url",
    "created_at", "started_at", "completed_at", "duration_ms", "chat_enabled", "chat_id",
    "chat_message_count", "total_stages", "completed_stages", "failed_stages",
    "has_parallel_stages", "has_action_stages", "actions_executed", "input_tokens",
    "output_tokens", "total_tokens", "cost_estimation_enabled", "llm_interaction_count",
    "mcp_interaction_count", "current_stage_index", "current_stage_id", "latest_score",
    "scoring_status", "score_id", "review_status", "assignee", "quality_rating",
    "action_taken", "investigation_feedback", "feedback_edited", "feedback_edited_by",
    "feedback_edited_at", "stages",
}  # fmt: skip
STAGE_KEYS = {
    "id", "stage_name", "stage_index", "stage_type", "status", "parallel_type",
    "expected_agent_count", "started_at", "completed_at",
}  # fmt: skip
EXECUTION_KEYS = {
    "execution_id", "agent_name", "agent_index", "status", "llm_backend", "llm_provider",
    "started_at", "completed_at", "duration_ms", "error_message", "input_tokens",
    "output_tokens", "total_tokens",
}  # fmt: skip


def conforms(body: Any, schema_name: str, *, array: bool = False) -> None:
    """The body matches the OpenAPI document's schema of that name."""
    ref: dict[str, Any] = {"$ref": f"#/components/schemas/{schema_name}"}
    schema = {"type": "array", "items": ref} if array else ref
    jsonschema.validate(
        body,
        {**schema, "components": DOCUMENT["components"]},
        cls=jsonschema.Draft202012Validator,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def is_time(value: Any) -> bool:
    return isinstance(value, str) and value.endswith("Z") and "T" in value


class Api:
    def __init__(self, client: Client, token: str) -> None:
        self.client = client
        self.auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def get(self, path: str, **extra):
        return self.client.get(f"/api/v1{path}", **self.auth, **extra)

    def send(self, method: str, path: str, body: Any = None, **extra):
        data = "" if body is None else body if isinstance(body, str) else json.dumps(body)
        return getattr(self.client, method)(
            f"/api/v1{path}",
            data=data,
            content_type=extra.pop("content_type", "application/json"),
            **self.auth,
            **extra,
        )


@pytest.fixture
def tarsy(client, api_token) -> Api:
    return Api(client, api_token)


@pytest.fixture
def ran(tarsy, demo_provider) -> AlertSession:
    """A session submitted over the API and investigated by the demo provider."""
    response = tarsy.send("post", "/alerts", {"data": ALERT, "alert_type": "PodCrashLooping"})
    assert response.status_code == 202
    session_id = response.json()["session_id"]
    assert run_session(session_id) == "completed"
    return AlertSession.objects.get(id=session_id)


def assert_error(response, status: int, text: str = "") -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert isinstance(body["message"], str)
    assert body["error"] == body["message"]  # our first clients read "error"
    assert text in body["message"]
    return body


# --- §1.1 POST /alerts --------------------------------------------------------------------


def test_submitting_an_alert_answers_202_queued(tarsy):
    response = tarsy.send("post", "/alerts", {"data": "pod down", "alert_type": "kubernetes"})
    assert response.status_code == 202
    body = response.json()
    assert body == {
        "session_id": body["session_id"],
        "status": "queued",
        "message": "Alert submitted for processing",
    }
    uuid.UUID(body["session_id"])
    conforms(body, "AlertAccepted")
    # Our extension: an object is serialized, not refused.
    assert tarsy.send("post", "/alerts", {"data": {"labels": {"a": "b"}}}).status_code == 202


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({}, 400, "'data' is required"),
        ({"data": ""}, 400, "'data' is empty"),
        ({"data": "x", "alert_type": "nope"}, 400, "unknown alert_type 'nope'"),
        ({"data": "x", "runbook": "https://evil.example/r.md"}, 400, "invalid runbook URL"),
        ({"data": "x", "mcp": {"servers": [{"name": "x"}]}}, 400, "MCP server 'x' not found"),
        ({"data": "x" * (1024 * 1024 + 1)}, 413, "'data' is 1048577 bytes"),
        ("{not json", 400, "not valid JSON"),
    ],
)
def test_a_bad_alert_gets_a_json_error(tarsy, body, status, text):
    body = assert_error(tarsy.send("post", "/alerts", body), status, text)
    conforms(body, "Error")
    assert not AlertSession.objects.exists()


def test_bodies_of_other_types_or_over_2_mib_are_refused(tarsy):
    assert_error(tarsy.send("post", "/alerts", "data=x", content_type="text/plain"), 415, "JSON")
    huge = json.dumps({"data": "x", "pad": "y" * (2 * 1024 * 1024)})
    assert_error(tarsy.send("post", "/alerts", huge), 413, "Request Entity Too Large")


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("post", "/alerts", {"data": "pod\u0000down"}, "data"),
        # The field, then where in it, escaped: a NUL is not echoed back.
        ("post", "/alerts", {"data": {"a\u0000": 1}}, "data' (data.a\\x00)"),
        ("get", "/sessions?alert_type=a%00b", None, "alert_type"),
        ("get", "/sessions?start_date=0001-01-01T00:00:00%2B05:00", None, "start_date"),
        ("get", "/sessions?end_date=9999-12-31T23:59:59-05:00", None, "end_date"),
        ("patch", "/sessions/review", {"session_ids": ["x"], "action_taken": "\u0000"}, ""),
    ],
)
def test_input_the_database_cannot_hold_is_a_400(tarsy, method, path, body, field):
    response = tarsy.get(path) if method == "get" else tarsy.send(method, path, body)
    assert_error(response, 400, f"validation error on field '{field}" if field else "")


# --- §1.2 to §1.6 reads of a session that ran -----------------------------------------------


def test_the_list_has_tarsys_envelope_and_items(tarsy, ran):
    response = tarsy.get("/sessions")
    assert response.status_code == 200
    body = response.json()
    conforms(body, "SessionList")
    assert set(body) == {"sessions", "pagination", "cost_estimation_enabled"}
    assert body["pagination"] == {"page": 1, "page_size": 25, "total_pages": 1, "total_items": 1}
    item = body["sessions"][0]
    assert set(item) >= LIST_ITEM_KEYS
    assert set(item) - LIST_ITEM_KEYS <= {"estimated_cost_usd", "cost_completeness"}
    assert item["id"] == str(ran.id)
    assert item["status"] == "completed"
    assert all(is_time(item[k]) for k in ("created_at", "started_at", "completed_at"))
    assert item["duration_ms"] > 0
    assert item["llm_interaction_count"] > 0
    assert item["mcp_interaction_count"] > 0
    assert (
        item["total_tokens"] == item["input_tokens"] + item["output_tokens"]
        or item["total_tokens"] >= item["input_tokens"]
    )
    assert item["total_stages"] >= 1
    assert item["completed_stages"] >= 1
    assert isinstance(item["current_stage_id"], str)
    assert item["review_status"] == "needs_review"
    # T|null keys are present and null; counters and booleans never are.
    assert item["assignee"] is None
    assert item["feedback_edited_at"] is None
    assert item["actions_executed"] is None
    assert item["feedback_edited"] is False
    assert item["matched_in_content"] is False


@pytest.mark.parametrize(
    "query",
    [
        "status=completed,failed",
        "alert_type=PodCrashLooping&chain_id=kubernetes-investigation",
        "sort_by=duration&sort_order=asc",
        "sort_by=score",
        "sort_by=quality_rating&sort_order=desc",
        "sort_by=author",
        "scoring_status=not_scored",
        "scoring_status=scoring_in_progress",
        "review_status=needs_review",
        "quality_rating=accurate",
        "assignee=",
        "search=payments",
        "start_date=2020-01-01T00:00:00Z&end_date=2999-01-01T00:00:00%2B02:00",
        "page=abc&page_size=1000",
    ],
)
def test_every_filter_and_sort_of_the_list_is_taken(tarsy, ran, query):
    response = tarsy.get(f"/sessions?{query}")
    assert response.status_code == 200, response.content
    conforms(response.json(), "SessionList")


def test_filters_select_what_they_say(tarsy, ran):
    def ids(query: str) -> list[str]:
        return [s["id"] for s in tarsy.get(f"/sessions?{query}").json()["sessions"]]

    assert ids("status=completed") == [str(ran.id)]
    assert ids("status=failed") == []
    assert ids("end_date=2020-01-01T00:00:00Z") == []
    assert ids("scoring_status=scored") == []
    assert ids("search=payments-api") == [str(ran.id)]
    assert tarsy.get("/sessions?page_size=0").json()["pagination"]["page_size"] == 25


def test_invalid_list_parameters_are_400_naming_the_field(tarsy):
    for query, field in [
        ("status=done", "status"),
        ("sort_by=size", "sort_by"),
        ("sort_order=sideways", "sort_order"),
        ("sort_by=", "sort_by"),
        ("start_date=2026-13-01", "start_date"),
        ("scoring_status=maybe", "scoring_status"),
        ("quality_rating=great", "quality_rating"),
    ]:
        assert_error(tarsy.get(f"/sessions?{query}"), 400, f"validation error on field '{field}'")


def test_the_detail_has_stages_and_executions(tarsy, ran):
    body = tarsy.get(f"/sessions/{ran.id}").json()
    conforms(body, "SessionDetail")
    assert set(body) >= DETAIL_KEYS
    assert "slack_message_fingerprint" not in body  # opt: absent, not null
    assert "mcp_selection" not in body
    assert body["alert_data"] == ALERT
    assert body["final_analysis"]
    assert body["chat_enabled"] is True
    assert body["runbook_url"] is None
    assert body["chat_id"] is None
    stages = body["stages"]
    assert [s["stage_index"] for s in stages] == list(range(1, len(stages) + 1))
    for stage in stages:
        assert set(stage) >= STAGE_KEYS
        assert isinstance(stage["id"], str)
        for execution in stage.get("executions", []):
            assert set(execution) >= EXECUTION_KEYS
            assert isinstance(execution["execution_id"], str)
            # opt keys: absent when empty, never null
            assert all(execution[k] for k in ("model_name", "task", "sub_agents") if k in execution)
            assert "task" not in execution
            assert "sub_agents" not in execution
    assert stages[0]["executions"][0]["status"] == "completed"
    assert body["current_stage_id"] == stages[-1]["id"]


def test_summary_and_status(tarsy, ran):
    summary = tarsy.get(f"/sessions/{ran.id}/summary").json()
    conforms(summary, "SessionSummary")
    assert summary["session_id"] == str(ran.id)
    assert summary["total_interactions"] == (
        summary["llm_interactions"] + summary["mcp_interactions"]
    )
    assert set(summary["chain_statistics"]) == {
        "total_stages",
        "completed_stages",
        "failed_stages",
        "current_stage_index",
    }
    assert "total_score" not in summary  # opt while never scored to completion
    status = tarsy.get(f"/sessions/{ran.id}/status").json()
    conforms(status, "SessionStatusOut")
    assert set(status) == {"id", "status", "final_analysis", "executive_summary", "error_message"}
    assert (status["status"], status["error_message"]) == ("completed", None)
    for path in ("", "/summary", "/status"):
        assert_error(tarsy.get(f"/sessions/{uuid.uuid4()}{path}"), 404, "resource not found")


def test_the_timeline_is_a_bare_array_with_empty_keys_omitted(tarsy, ran):
    body = tarsy.get(f"/sessions/{ran.id}/timeline").json()
    conforms(body, "TimelineItem", array=True)
    assert isinstance(body, list)
    assert body
    assert [e["sequence_number"] for e in body] == sorted(e["sequence_number"] for e in body)
    for event in body:
        assert event["edges"] == {}
        assert None not in event.values()
        assert "" not in event.values()
        assert isinstance(event["id"], str)
        assert event["session_id"] == str(ran.id)
    tool_call = next(e for e in body if e["event_type"] == "llm_tool_call")
    assert {"server_name", "tool_name"} <= set(tool_call["metadata"])
    unknown = tarsy.get(f"/sessions/{uuid.uuid4()}/timeline")
    assert (unknown.status_code, unknown.json()) == (200, [])


def test_active_and_filter_options(tarsy, ran):
    queued = tarsy.send("post", "/alerts", {"data": "pod down"}).json()["session_id"]
    body = tarsy.get("/sessions/active").json()
    conforms(body, "ActiveSessions")
    assert body["active"] == []
    assert body["queued"] == [
        {
            "id": queued,
            "alert_type": "kubernetes",
            "chain_id": "kubernetes-investigation",
            "status": "pending",
            "author": "alice",
            "created_at": body["queued"][0]["created_at"],
            "queue_position": 1,
        }
    ]
    options = tarsy.get("/sessions/filter-options").json()
    conforms(options, "FilterOptions")
    assert options == {
        "alert_types": ["PodCrashLooping", "kubernetes"],
        "chain_ids": ["kubernetes-investigation"],
        "statuses": SessionStatus.values,
    }


# --- §1.7 to §1.10 writes -------------------------------------------------------------------


def test_cancel(tarsy, ran):
    assert_error(tarsy.send("post", f"/sessions/{ran.id}/cancel"), 409, "not in a cancellable")
    assert_error(tarsy.send("post", f"/sessions/{uuid.uuid4()}/cancel"), 404, "resource not found")
    pending = tarsy.send("post", "/alerts", {"data": "pod down"}).json()["session_id"]
    response = tarsy.send("post", f"/sessions/{pending}/cancel")
    assert response.status_code == 200
    conforms(response.json(), "CancelOut")
    assert set(response.json()) == {"session_id", "message"}


def test_chat_score_and_review_of_a_session_that_ran(tarsy, ran):
    asked = tarsy.send("post", f"/sessions/{ran.id}/chat/messages", {"content": "Which pod?"})
    assert asked.status_code == 202
    conforms(asked.json(), "ChatAccepted")
    assert all(isinstance(v, str) for v in asked.json().values())
    again = tarsy.send("post", f"/sessions/{ran.id}/chat/messages", {"content": "And?"})
    assert_error(again, 409, "a chat response is already being generated")
    assert_error(tarsy.send("post", f"/sessions/{ran.id}/chat/messages", {}), 400, "content")

    score = tarsy.get(f"/sessions/{ran.id}/score")
    if score.status_code == 200:  # the automatic scoring's row, still pending
        conforms(score.json(), "Score")
        assert_error(tarsy.send("post", f"/sessions/{ran.id}/score"), 409, "already in progress")
    else:
        assert_error(score, 404, "resource not found")
        accepted = tarsy.send("post", f"/sessions/{ran.id}/score")
        assert accepted.status_code == 202
        conforms(accepted.json(), "ScoreAccepted")

    claimed = tarsy.send(
        "patch", "/sessions/review", {"session_ids": [str(ran.id), "nope"], "action": "claim"}
    )
    assert claimed.status_code == 200
    conforms(claimed.json(), "ReviewResults")
    assert claimed.json()["results"] == [
        {"session_id": str(ran.id), "success": True},
        {"session_id": "nope", "success": False, "error": "resource not found"},
    ]
    assert_error(tarsy.send("patch", "/sessions/review", {"session_ids": []}), 400)
    page = tarsy.get("/sessions/triage/in_progress").json()
    conforms(page, "TriagePage")
    assert (page["count"], page["page"], page["page_size"], page["total_pages"]) == (1, 1, 20, 1)
    assert page["sessions"][0]["assignee"] == "alice"
    assert page["sessions"][0]["total_tokens"] == 0  # TARSy leaves counters out here
    assert_error(tarsy.get("/sessions/triage/later"), 400, "field 'group'")
    assert_error(tarsy.get("/sessions/triage/reviewed?page=0"), 400, "field 'page'")
    activity = tarsy.get(f"/sessions/{ran.id}/review-activity").json()
    conforms(activity, "ReviewActivities")
    assert [(a["action"], a["to_status"]) for a in activity["activities"]][-1] == (
        "claim",
        "in_progress",
    )


# --- §1.13, §1.14 system --------------------------------------------------------------------


def test_system_routes(tarsy, client):
    types = tarsy.get("/alert-types").json()
    conforms(types, "AlertTypes")
    assert types["default_alert_type"] == "kubernetes"
    kubernetes = next(t for t in types["alert_types"] if t["type"] == "kubernetes")
    assert kubernetes["chain_id"] == types["default_chain_id"] == "kubernetes-investigation"
    assert tarsy.get("/runbooks").json() == []
    warnings = tarsy.get("/system/warnings").json()
    conforms(warnings, "SystemWarnings")
    assert any(w["category"] == "worker" for w in warnings["warnings"])  # none running here
    conforms(tarsy.get("/system/mcp-servers").json(), "McpServers")
    for path in ("/health", "/api/v1/health"):
        health = client.get(path)  # no credentials
        assert health.status_code == 200
        conforms(health.json(), "Health")
        assert health.json()["checks"]["database"] == {"status": "healthy"}
        assert health.json()["status"] == "degraded"  # no worker cluster in a test


# --- §0 errors, auth, documents -------------------------------------------------------------


def test_unknown_routes_and_wrong_methods_are_json(tarsy):
    assert_error(tarsy.get("/nothing/here"), 404, "Not Found")
    assert_error(tarsy.get("/sessions/not-a-uuid"), 404)
    response = tarsy.send("delete", "/sessions")
    assert_error(response, 405, "Method Not Allowed")
    assert response["Allow"] == "GET"


def test_credentials_are_required_and_reported_as_json(client, api_token):
    assert_error(client.get("/api/v1/sessions"), 401, "authentication required")
    assert_error(
        client.get("/api/v1/sessions", HTTP_AUTHORIZATION="Bearer tarsy_nope"), 401, "invalid"
    )
    assert_error(client.get("/api/v1/openapi.json"), 401)


def test_a_trusted_proxy_names_the_author(client, settings, demo_provider):
    settings.TARSY_TRUSTED_PROXIES = ["10.0.0.0/8"]
    headers = {"HTTP_X_FORWARDED_EMAIL": "jdoe@example.com", "REMOTE_ADDR": "10.1.2.3"}
    response = client.post(
        "/api/v1/alerts", {"data": "x"}, content_type="application/json", **headers
    )
    assert response.status_code == 202
    assert AlertSession.objects.get().author == "jdoe@example.com"
    # X-Forwarded-User wins over the email; anyone else's headers are ignored.
    headers["HTTP_X_FORWARDED_USER"] = "jdoe"
    assert client.get("/api/v1/sessions", **headers).json()["sessions"][0]["author"] == (
        "jdoe@example.com"
    )
    claimed = client.patch(
        "/api/v1/sessions/review",
        {"session_ids": [str(AlertSession.objects.get().id)], "action": "acknowledge"},
        content_type="application/json",
        **headers,
    )
    assert claimed.status_code == 200
    headers["REMOTE_ADDR"] = "192.0.2.1"
    assert_error(client.get("/api/v1/sessions", **headers), 401)
    # From elsewhere the headers are ignored: the token's owner is the author.
    token = api_token_create(username="bot")
    response = client.post(
        "/api/v1/alerts",
        {"data": "y"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **headers,
    )
    assert AlertSession.objects.get(id=response.json()["session_id"]).author == "bot"


def test_a_malformed_trusted_proxy_entry_is_skipped(client, settings):
    settings.TARSY_TRUSTED_PROXIES = ["not-an-address", "10.0.0.0/8"]
    headers = {"HTTP_X_FORWARDED_USER": "jdoe", "REMOTE_ADDR": "10.1.2.3"}
    assert client.get("/api/v1/sessions", **headers).status_code == 200
    headers["REMOTE_ADDR"] = "192.0.2.1"
    assert_error(client.get("/api/v1/sessions", **headers), 401)


def test_the_openapi_document_and_its_docs_page(tarsy, user):
    document = tarsy.get("/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert "/api/v1/sessions/{session_id}/timeline" in document["paths"]
    assert "AlertIn" in document["components"]["schemas"]
    browser = Client()
    assert browser.get("/api/docs").status_code == 302  # to the login page
    browser.force_login(user)
    page = browser.get("/api/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page
    # Every script and style from this site: none from a CDN (a CSRF token in the page
    # may spell "cdn" by chance, so look at where things are loaded from).
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sources
    assert all(source.startswith("/") for source in sources), sources
    assert "/api/v1/openapi.json" in page
    assert 'data-api-csrf="true"' in page  # "Try it out" sends the CSRF token


# --- issue 20: the trace, usage and metadata TARSy's clients read ----------------------


def test_the_trace_lists_every_call_by_stage_and_agent(tarsy, ran):
    trace = tarsy.get(f"/sessions/{ran.id}/trace")
    assert trace.status_code == 200, trace.content
    body = trace.json()
    assert set(body) == {"stages", "session_interactions"}
    first = body["stages"][0]
    assert set(first) >= {"stage_id", "stage_name", "stage_type", "executions"}
    execution = first["executions"][0]
    assert set(execution) >= {"execution_id", "agent_name", "llm_interactions", "mcp_interactions"}
    llm = execution["llm_interactions"][0]
    assert set(llm) >= {"id", "interaction_type", "model_name", "created_at"}
    assert is_time(llm["created_at"])
    tool_calls = [m for m in execution["mcp_interactions"] if m["interaction_type"] == "tool_call"]
    assert tool_calls
    assert set(tool_calls[0]) >= {"id", "server_name", "tool_name", "created_at"}

    detail = tarsy.get(f"/sessions/{ran.id}/trace/llm/{llm['id']}").json()
    assert detail["id"] == llm["id"]
    roles = [message["role"] for message in detail["conversation"]]
    assert roles[:2] == ["system", "user"]
    # TARSy's counters: the agent's first call, its messages, the answer's size.
    assert detail["llm_request"]["iteration"] == 1
    answer = detail["llm_response"]
    assert answer["text_length"] == len(answer["text"].encode())
    assert answer["tool_calls_count"] == len(answer["tool_calls"])
    # The answer closes the conversation; the request's messages are counted.
    assert detail["conversation"][-1]["role"] == "assistant"
    assert detail["conversation"][-1]["content"] == answer["text"]
    assert len(detail["conversation"]) == detail["llm_request"]["messages_count"] + 1
    later = tarsy.get(f"/sessions/{ran.id}/trace/llm/{execution['llm_interactions'][-1]['id']}")
    calls = [c for m in later.json()["conversation"] for c in m.get("tool_calls", [])]
    assert calls
    iterations = [
        i for i in execution["llm_interactions"] if i["interaction_type"] != "summarization"
    ]
    assert later.json()["llm_request"]["iteration"] == len(iterations)
    assert all(isinstance(call["arguments"], str) for call in calls)
    json.loads(calls[0]["arguments"])

    mcp = tarsy.get(f"/sessions/{ran.id}/trace/mcp/{tool_calls[0]['id']}").json()
    assert mcp["tool_name"] == tool_calls[0]["tool_name"]
    assert set(mcp["tool_result"]) == {"content", "is_error"}

    assert_error(tarsy.get(f"/sessions/{ran.id}/trace/llm/999999"), 404, "not found")
    assert_error(tarsy.get(f"/sessions/{uuid.uuid4()}/trace"), 404, "not found")


def test_timeline_metadata_uses_tarsys_keys(tarsy, ran):
    items = tarsy.get(f"/sessions/{ran.id}/timeline").json()
    tool_call = next(i for i in items if i["event_type"] == "llm_tool_call")
    metadata = tool_call["metadata"]
    assert metadata["tool_type"] == "mcp"
    assert "." not in metadata["tool_name"]
    assert metadata["server_name"]
    assert isinstance(metadata["arguments"], str)
    numbers = [item["sequence_number"] for item in items]
    # Numbered through the session, as TARSy does: no two items share a number.
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == len(numbers)


def test_usage_summary_as_tarsy_shapes_it(tarsy, ran):
    window = "start_date=2000-01-01T00:00:00Z&end_date=2000-12-01T00:00:00Z"
    empty = tarsy.get(f"/usage/summary?{window}").json()
    assert empty["totals"]["total_tokens"] == 0
    assert empty["by_model"] == []
    now = ran.created_at
    start = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = tarsy.get(f"/usage/summary?start_date={start}&end_date={end}").json()
    assert set(summary) == {
        "cost_estimation_enabled", "window", "rank_by", "totals", "by_model",
        "by_alert_type", "by_chain", "top_sessions",
    }  # fmt: skip
    assert summary["totals"]["session_count"] == 1
    assert summary["top_sessions"][0]["session_id"] == str(ran.id)
    assert summary["by_chain"][0]["chain_id"] == ran.chain_id
    assert_error(tarsy.get("/usage/summary"), 400, "start_date is required")
    assert_error(tarsy.get(f"/usage/summary?start_date={end}&end_date={start}"), 400, "before")
    far = "start_date=2000-01-01T00:00:00Z&end_date=2002-01-01T00:00:00Z"
    assert_error(tarsy.get(f"/usage/summary?{far}"), 400, "365 days")
    assert_error(tarsy.get(f"/usage/summary?{window}&rank_by=vibes"), 400, "rank_by")
