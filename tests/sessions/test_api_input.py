"""Hostile and broken input to POST /api/v1/alerts: every bad body gets a JSON 4xx that
names the problem, and nothing is stored."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.db import OperationalError
from django_q.models import OrmQ

from sessions import services
from sessions.models import AlertSession, SessionEvent
from tests.sessions.test_api import post_alert

MIB = 1024 * 1024


def assert_nothing_stored() -> None:
    assert AlertSession.objects.count() == 0
    assert SessionEvent.objects.count() == 0
    assert OrmQ.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"data": "pod down \\ud800 here"}', "'data'"),
        ('{"data": "x", "runbook": "\\udfff"}', "'runbook'"),
        ('{"data": "x", "alert_type": "k8s\\ud800"}', "'alert_type'"),
        ('{"data": {"pod": {"name": "a\\ud83d"}}}', "'data'"),
        ('{"data": {"\\ud800": 1}}', "'data'"),
    ],
)
def test_a_lone_surrogate_is_a_400_that_names_the_field(client, api_token, body, field):
    response = post_alert(client, body, api_token)
    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error
    assert "surrogate" in error
    assert_nothing_stored()


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [33, 1000, 200_000])
def test_deeply_nested_json_is_a_400(client, api_token, depth):
    body = '{"data": ' + "[" * depth + "]" * depth + "}"
    response = post_alert(client, body, api_token)
    assert response.status_code == 400
    assert "nested more than 32 levels" in response.json()["error"]
    assert_nothing_stored()


@pytest.mark.django_db
def test_nesting_within_the_bound_is_accepted(client, api_token):
    data: object = "x"
    for _ in range(30):
        data = {"a": data}
    assert post_alert(client, {"data": data}, api_token).status_code == 202


@pytest.mark.django_db
def test_nan_is_not_json(client, api_token):
    response = post_alert(client, '{"data": {"value": NaN}}', api_token)
    assert response.status_code == 400
    assert "NaN" in response.json()["error"]


@pytest.mark.django_db
def test_a_runbook_over_one_mib_is_a_413(client, api_token):
    response = post_alert(client, {"data": "x", "runbook": "r" * (MIB + 1)}, api_token)
    assert response.status_code == 413
    assert "'runbook' is 1048577 bytes" in response.json()["error"]
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_long_unknown_alert_type_is_not_echoed_whole(client, api_token):
    response = post_alert(client, {"data": "x", "alert_type": "A" * 10_000}, api_token)
    assert response.status_code == 400
    error = response.json()["error"]
    assert len(error) < 400
    assert "'" + "A" * 60 in error
    assert "10000 characters" in error


@pytest.mark.django_db
def test_json_data_is_measured_as_sent_not_as_re_indented(client, api_token):
    # Compact, this object is just under 1 MiB; indented two spaces a level, well over.
    rows = [{"pod": f"p{i:06d}", "ok": True} for i in range(MIB // 29)]
    compact = json.dumps(rows, separators=(",", ":"), ensure_ascii=False)
    assert len(compact) < MIB < len(json.dumps(rows, indent=2))
    response = post_alert(client, '{"data":' + compact + "}", api_token)
    assert response.status_code == 202, response.json()
    too_big = [*rows, {"pod": "x" * (MIB - len(compact))}]
    response = post_alert(client, {"data": too_big}, api_token)
    assert response.status_code == 413


@pytest.mark.django_db
def test_a_body_over_the_request_limit_is_a_json_413(client, api_token, settings):
    response = post_alert(client, {"data": "x" * (9 * MIB)}, api_token)
    assert response.status_code == 413
    assert "limit" in response.json()["error"]


async def _asgi_post(path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> dict:
    """POST through Django's ASGI handler the way daphne hands over a chunked body: no
    Content-Length, the body in pieces."""
    from tarsy_site.asgi import django_application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"transfer-encoding", b"chunked"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive() -> dict:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # the client stays connected until the response
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        sent.append(message)

    await django_application(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = {name.lower(): value for name, value in start["headers"]}
    return {"status": start["status"], "headers": headers, "body": body}


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_body_over_the_limit_is_a_json_413(api_token):
    headers = [
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {api_token}".encode()),
    ]
    chunks = [b'{"data": "', *([b"x" * MIB] * 9), b'"}']
    response = await _asgi_post("/api/v1/alerts", headers, chunks)
    assert response["status"] == 413
    assert response["headers"][b"content-type"] == b"application/json"
    assert "limit" in json.loads(response["body"])["error"]
    assert await AlertSession.objects.acount() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_body_within_the_limit_is_accepted(api_token):
    headers = [
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {api_token}".encode()),
    ]
    response = await _asgi_post("/api/v1/alerts", headers, [b'{"data": "pod ', b'down"}'])
    assert response["status"] == 202
    assert await AlertSession.objects.acount() == 1


@pytest.mark.django_db(transaction=True)
def test_when_queueing_fails_the_client_gets_json_and_nothing_is_kept(
    client, api_token, monkeypatch
):
    from django_q.brokers.orm import ORM

    def refuse(self, task):
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(ORM, "enqueue", refuse)
    response = post_alert(client, {"data": "pod down"}, api_token)
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert "nothing was stored" in response.json()["error"]
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_database_failure_is_a_json_503(client, api_token, monkeypatch):
    def broken(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(services, "alert_accept", broken)  # what the view calls
    response = post_alert(client, {"data": "pod down"}, api_token)
    assert response.status_code == 503
    assert "database" in response.json()["error"]
