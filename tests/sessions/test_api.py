from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django_q.models import OrmQ

from sessions.models import AlertSession, SessionEvent, TimelineEvent

pytestmark = pytest.mark.django_db


def post_alert(client, body, token=None, **headers):
    if token:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post("/api/v1/alerts", data=data, content_type="application/json", **headers)


def test_it_accepts_an_alert_and_queues_it(client, api_token, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_alert(client, {"data": "pod payments-api is crash-looping"}, api_token)
    assert response.status_code == 202
    body = response.json()
    assert body == {
        "session_id": body["session_id"],
        "status": "queued",
        "message": "Alert submitted for processing",
    }
    session = AlertSession.objects.get(id=body["session_id"])
    assert session.alert_type == "kubernetes"  # the configured default
    assert session.chain_id == "kubernetes-investigation"
    assert session.author == "alice"
    assert session.status == "pending"
    assert OrmQ.objects.count() == 1  # enqueued once the row committed
    assert SessionEvent.objects.filter(session=session, type="session.status").count() == 1


def test_it_keeps_alert_data_as_opaque_text(client, api_token):
    text = "alert: PodCrashLooping\nnamespace: payments\n  weird: [indent"
    response = post_alert(
        client, {"data": text, "alert_type": "PodCrashLooping", "runbook": "check db"}, api_token
    )
    session = AlertSession.objects.get(id=response.json()["session_id"])
    assert session.alert_data == text
    assert session.runbook == "check db"


def test_it_rejects_data_over_one_mib_with_413_and_creates_nothing(
    client, api_token, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_alert(client, {"data": "x" * (1024 * 1024 + 1)}, api_token)
    assert response.status_code == 413
    assert "1048577 bytes" in response.json()["error"]
    assert AlertSession.objects.count() == 0
    assert OrmQ.objects.count() == 0


def test_it_accepts_data_of_exactly_one_mib(client, api_token):
    assert post_alert(client, {"data": "x" * (1024 * 1024)}, api_token).status_code == 202


def test_it_measures_the_limit_in_bytes_not_characters(client, api_token):
    response = post_alert(client, {"data": "é" * (512 * 1024 + 1)}, api_token)
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "'data' is required"),
        ({"data": ""}, "'data' is empty"),
        ({"data": "   \n"}, "'data' is empty"),
        ({"data": 42}, "'data' must be a string"),
        ({"data": "x", "alert_typ": "k8s"}, "unknown field(s): 'alert_typ'"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_it_rejects_bad_bodies_with_400(client, api_token, body, message):
    response = post_alert(client, body, api_token)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert AlertSession.objects.count() == 0


def test_it_rejects_malformed_json(client, api_token):
    response = post_alert(client, '{"data": "x",', api_token)
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]
    assert AlertSession.objects.count() == 0


def test_unknown_alert_type_lists_the_known_ones(client, api_token):
    response = post_alert(client, {"data": "x", "alert_type": "nope"}, api_token)
    assert response.status_code == 400
    body = response.json()
    assert "unknown alert_type 'nope'" in body["error"]
    assert "kubernetes" in body["error"]
    assert body["known_alert_types"] == ["DeepInvestigation", "PodCrashLooping", "kubernetes"]


def test_json_object_data_is_stored_as_readable_text(client, api_token):
    response = post_alert(client, {"data": {"pod": "a", "n": 1}}, api_token)
    session = AlertSession.objects.get(id=response.json()["session_id"])
    assert json.loads(session.alert_data) == {"pod": "a", "n": 1}


def test_it_requires_authentication(client):
    response = post_alert(client, {"data": "x"})
    assert response.status_code == 401
    assert "create_api_token" in response.json()["error"]
    assert client.get("/api/v1/sessions").status_code == 401


def test_it_rejects_a_wrong_token(client, api_token):
    assert post_alert(client, {"data": "x"}, "tarsy_wrong").status_code == 401
    response = client.get("/api/v1/sessions", HTTP_AUTHORIZATION=f"Token {api_token}")
    assert response.status_code == 401
    assert "Bearer" in response.json()["error"]


def test_a_logged_in_browser_still_needs_csrf_for_posts(browser_client):
    response = post_alert(browser_client, {"data": "x"})
    assert response.status_code == 403
    assert AlertSession.objects.count() == 0


def test_a_logged_in_browser_can_read(browser_client):
    assert browser_client.get("/api/v1/sessions").status_code == 200


def test_only_the_token_hash_is_stored(api_token):
    from sessions.models import ApiToken

    stored = ApiToken.objects.get()
    assert api_token not in (stored.token_hash, stored.prefix)
    assert len(stored.token_hash) == 64


def test_reading_the_api_writes_nothing_but_a_token_use_a_minute(client, api_token):
    """A client polling the API must not take SQLite's one write lock on every read."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sessions.models import ApiToken

    def read() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/api/v1/sessions", HTTP_AUTHORIZATION=f"Bearer {api_token}")
        assert response.status_code == 200
        return [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]

    assert len(read()) == 1  # the first use is recorded
    first_use = ApiToken.objects.get().last_used_at
    assert first_use is not None
    assert [read() for _ in range(5)] == [[]] * 5  # then reads are reads
    ApiToken.objects.update(last_used_at=first_use - timedelta(minutes=2))
    assert len(read()) == 1  # a use after a minute is recorded again
    assert ApiToken.objects.get().last_used_at > first_use


def make_session(**fields) -> AlertSession:
    defaults = {
        "alert_type": "kubernetes",
        "alert_data": "d",
        "chain_id": "kubernetes-investigation",
    }
    return AlertSession.objects.create(**{**defaults, **fields})


def test_session_list_paginates_and_filters(client, api_token):
    for _ in range(3):
        make_session()
    make_session(status="completed")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"}
    body = client.get("/api/v1/sessions?page_size=2", **auth).json()
    assert body["pagination"] == {"page": 1, "page_size": 2, "total_pages": 2, "total_items": 4}
    assert len(body["sessions"]) == 2
    body = client.get("/api/v1/sessions?status=completed", **auth).json()
    assert [s["status"] for s in body["sessions"]] == ["completed"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=done", "validation error on field 'status': unknown value done"),
        (
            "review_status=done",
            "validation error on field 'review_status': unknown value done; allowed: needs_review",
        ),
        ("quality_rating=great", "field 'quality_rating': Input should be 'accurate'"),
        ("sort_by=size", "field 'sort_by': Input should be 'created_at', 'status'"),
        ("sort_order=up", "field 'sort_order': Input should be 'asc' or 'desc'"),
        ("scoring_status=good", "field 'scoring_status': Input should be 'scored'"),
        ("start_date=yesterday", "field 'start_date': 'yesterday' is not an RFC 3339 time"),
        ("end_date=2026-01-01T00:00:00", "field 'end_date'"),
        ("search=ab", "field 'search': Search needs at least 3 characters"),
    ],
)
def test_session_list_rejects_bad_parameters(client, api_token, query, message):
    response = client.get(f"/api/v1/sessions?{query}", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 400
    assert message in response.json()["message"]


@pytest.mark.parametrize("query", ["page_size=500", "page=x", "page=0", "page_size=-1"])
def test_session_list_replaces_a_bad_page_with_the_default(client, api_token, query):
    make_session()
    response = client.get(f"/api/v1/sessions?{query}", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 200
    pagination = response.json()["pagination"]
    assert (pagination["page"], pagination["page_size"]) == (1, 25)


def test_session_list_filters_by_review(client, api_token):
    waiting = make_session(status="completed", review_status="needs_review")
    mine = make_session(status="completed", review_status="in_progress", assignee="bob")
    good = make_session(
        status="completed", review_status="reviewed", assignee="bob", quality_rating="accurate"
    )
    make_session()  # running: no review yet
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"}

    def ids(query: str) -> set[str]:
        body = client.get(f"/api/v1/sessions?{query}", **auth).json()
        return {s["id"] for s in body["sessions"]}

    assert ids("review_status=needs_review,in_progress") == {str(waiting.id), str(mine.id)}
    assert ids("assignee=bob") == {str(mine.id), str(good.id)}
    assert ids("assignee=&review_status=needs_review") == {str(waiting.id)}
    assert ids("quality_rating=accurate") == {str(good.id)}
    row = client.get(f"/api/v1/sessions/{good.id}", **auth).json()
    assert (row["review_status"], row["assignee"], row["quality_rating"]) == (
        "reviewed",
        "bob",
        "accurate",
    )
    assert row["action_taken"] is None
    assert row["feedback_edited"] is False


def test_session_detail_and_timeline(client, api_token):
    session = make_session(final_analysis="root cause")
    TimelineEvent.objects.create(
        session=session, sequence_number=1, event_type="final_analysis", content="root cause"
    )
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"}
    detail = client.get(f"/api/v1/sessions/{session.id}", **auth).json()
    assert detail["id"] == str(session.id)
    assert detail["final_analysis"] == "root cause"
    timeline = client.get(f"/api/v1/sessions/{session.id}/timeline", **auth).json()
    assert [e["event_type"] for e in timeline] == ["final_analysis"]


def test_unknown_session_is_404(client, api_token):
    response = client.get(
        "/api/v1/sessions/00000000-0000-0000-0000-000000000000",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert response.status_code == 404
    assert response.json()["message"] == "resource not found"


def test_health_needs_no_login(client):
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json()["checks"]["database"] == {"status": "healthy"}
    assert client.get("/api/v1/health").status_code == 200


def test_create_api_token_prints_only_the_token(db, capsys):
    from django.core.management import call_command

    from sessions.auth import user_for_token

    call_command("create_api_token", "bot")
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("tarsy_")
    assert "\n" not in printed
    assert user_for_token(printed).username == "bot"


def test_secrets_in_alert_data_are_masked_before_storage(client, api_token):
    alert = "db: postgres://payments:hunter2@postgres.payments.svc:5432/payments\nsummary: down"
    response = post_alert(client, {"data": alert, "runbook": "token: ghp_" + "a" * 36}, api_token)
    session = AlertSession.objects.get(id=response.json()["session_id"])
    assert "hunter2" not in session.alert_data
    assert "postgres.payments.svc:5432" in session.alert_data  # the evidence stays
    assert "ghp_" not in session.runbook
