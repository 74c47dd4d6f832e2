"""Cancelling through the API and the page: who, why, and the answers for sessions and
agents that cannot be cancelled any more."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from sessions import services
from sessions.models import AlertSession, SessionEvent
from tests.conftest import running_session
from tests.sessions.test_api import post_alert

pytestmark = pytest.mark.django_db


def cancel(client, session_id, token, body=None, execution_id=None):
    path = f"/api/v1/sessions/{session_id}"
    path += f"/executions/{execution_id}/cancel" if execution_id else "/cancel"
    return client.post(
        path,
        data=json.dumps(body) if body is not None else "",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def test_a_pending_session_is_cancelled_at_once_with_who_and_why(client, api_token):
    session_id = post_alert(client, {"data": "pod down"}, api_token).json()["session_id"]
    response = cancel(client, session_id, api_token, {"reason": "  duplicate alert  "})
    assert response.status_code == 200
    # TARSy answers 409 for a pending session; ours is cancelled at once.
    assert response.json() == {"session_id": session_id, "message": "Session cancelled"}
    session = AlertSession.objects.get(id=session_id)
    assert (session.status, session.cancelled_by, session.cancel_reason) == (
        "cancelled",
        "alice",
        "duplicate alert",
    )
    statuses = SessionEvent.objects.filter(session=session, type="session.status")
    assert [e.payload["status"] for e in statuses] == ["pending", "cancelled"]
    detail = client.get(
        f"/api/v1/sessions/{session_id}", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    ).json()
    assert (detail["cancelled_by"], detail["cancel_reason"]) == ("alice", "duplicate alert")


def test_a_running_session_becomes_cancelling(client, api_token):
    session, _ = running_session()
    response = cancel(client, session.id, api_token)
    assert response.status_code == 200
    assert response.json() == {
        "session_id": str(session.id),
        "message": "Session cancellation requested",
    }
    session.refresh_from_db()
    assert session.status == "cancelling"


def test_an_ended_session_answers_409(client, api_token):
    session, _ = running_session(status="completed", lease_token=None)
    response = cancel(client, session.id, api_token)
    assert response.status_code == 409
    assert response.json()["message"] == (
        "session is not in a cancellable state: the session has already ended (completed)"
    )
    session, _ = running_session(status="cancelling")
    assert "already being cancelled" in cancel(client, session.id, api_token).json()["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"reason": "x" * 501}, "field 'reason': 501 characters; the limit is 500"),
        ({"reason": 7}, "validation error on field 'reason': must be a string"),
        ({"why": "x"}, "unknown field(s): 'why'; allowed: reason"),
    ],
)
def test_a_bad_reason_is_a_400(client, api_token, body, message):
    session, _ = running_session()
    response = cancel(client, session.id, api_token, body)
    assert response.status_code == 400
    assert message in response.json()["error"]
    session.refresh_from_db()
    assert session.status == "in_progress"


def test_unknown_sessions_and_executions_are_404(client, api_token):
    assert cancel(client, "00000000-0000-0000-0000-000000000000", api_token).status_code == 404
    session, _ = running_session()
    assert cancel(client, session.id, api_token, execution_id=999).status_code == 404


def test_one_agent_of_a_parallel_stage_can_be_stopped(client, api_token):
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="s", index=0, parallel_type="multi_agent")
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="LogAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )
    response = cancel(client, session.id, api_token, {"reason": "slow"}, execution.id)
    assert response.status_code == 200
    assert response.json() == {
        "session_id": str(session.id),
        "execution_id": str(execution.id),
        "status": "cancelling",
        "message": "Agent cancellation requested",
    }
    execution.refresh_from_db()
    assert execution.cancel_requested_at is not None
    assert execution.cancel_reason == "Cancelled by alice: slow"
    assert services.session_lease_status(lease=lease).cancelled_executions == (
        (execution.id, "Cancelled by alice: slow"),
    )
    again = cancel(client, session.id, api_token, execution_id=execution.id)
    assert again.status_code == 409
    assert "already being cancelled" in again.json()["error"]


def test_the_page_cancels_with_csrf_and_a_login(user):
    session, _ = running_session()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.post(f"/sessions/{session.id}/cancel/").status_code == 403  # no token
    page = browser.get(f"/sessions/{session.id}/")
    assert 'id="cancel-session"' in page.content.decode()
    token = page.cookies["csrftoken"].value
    response = browser.post(
        f"/sessions/{session.id}/cancel/", {"reason": "from the page"}, HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == 302
    session.refresh_from_db()
    assert (session.status, session.cancel_reason) == ("cancelling", "from the page")
    assert Client().post(f"/sessions/{session.id}/cancel/").status_code == 302  # to login
