"""Mid-run steering through the API and the session page: who, what (masked), when it is
refused, the rate limit, and the timeline item shown at once."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from sessions.models import (
    AlertSession,
    SessionEvent,
    SessionStatus,
    SteeringNote,
    TimelineEvent,
)
from tests import secrets_corpus
from tests.conftest import running_session
from tests.sessions.test_api import post_alert

pytestmark = pytest.mark.django_db

PASSWORD = "password=Zq7xSteerCanary01"


def steer(client, session_id, token, body, **headers):
    return client.post(
        f"/api/v1/sessions/{session_id}/steer",
        data=json.dumps(body) if not isinstance(body, str) else body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **headers,
    )


def test_a_note_on_a_running_session_is_stored_with_its_author_and_shown_at_once(client, api_token):
    session, _ = running_session()
    response = steer(
        client, session.id, api_token, {"text": "  the deploy at 14:02 changed the pool size "}
    )
    assert response.status_code == 202, response.content
    body = response.json()
    note = SteeringNote.objects.get()
    assert (note.author, note.text, note.session_id) == (
        "alice",
        "the deploy at 14:02 changed the pool size",
        session.id,
    )
    assert body["note_id"] == str(note.id)
    assert body["author"] == "alice"
    item = TimelineEvent.objects.get(event_type="steering")
    assert body["event_id"] == str(item.id)
    assert (item.session_id, item.stage_id, item.execution_id) == (session.id, None, None)
    assert item.content == note.text
    assert item.metadata["author"] == "alice"
    # Pushed live: the event log carries the item for every open page.
    created = SessionEvent.objects.filter(session=session, type="timeline_event.created")
    assert [e.payload["event_id"] for e in created] == [item.id]
    # The API's timeline and the page show it with its author.
    timeline = client.get(
        f"/api/v1/sessions/{session.id}/timeline", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    ).json()
    assert any(
        entry.get("event_type") == "steering" and "14:02" in entry.get("content", "")
        for entry in (timeline if isinstance(timeline, list) else timeline.get("events", []))
    ), timeline


def test_a_pending_session_takes_a_note_for_its_first_model_call(client, api_token):
    session_id = post_alert(client, {"data": "pod down"}, api_token).json()["session_id"]
    response = steer(client, session_id, api_token, {"text": "check the pool"})
    assert response.status_code == 202, response.content
    assert SteeringNote.objects.filter(session_id=session_id).count() == 1


@pytest.mark.parametrize(
    "status",
    [
        SessionStatus.CANCELLING,
        SessionStatus.COMPLETED,
        SessionStatus.FAILED,
        SessionStatus.CANCELLED,
        SessionStatus.TIMED_OUT,
    ],
)
def test_a_session_not_running_refuses_a_note_with_409(client, api_token, status):
    session, _ = running_session(status=status)
    response = steer(client, session.id, api_token, {"text": "too late"})
    assert response.status_code == 409, response.content
    assert f"session is {status}" in response.json()["message"]
    assert "pending or in progress" in response.json()["message"]
    assert not SteeringNote.objects.exists()
    assert not TimelineEvent.objects.filter(event_type="steering").exists()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"text": ""}, "the note is empty"),
        ({"text": "   \n "}, "the note is empty"),
        ({}, "the note is empty"),
        ({"text": 42}, "must be a string"),
        ({"text": "x" * 4001}, "4,001 characters; the limit is 4,000"),
        ({"text": "a\x00b"}, "NUL"),
        ({"text": "a\ud800b"}, "text"),
        ({"text": "hi", "author": "mallory"}, "unknown field(s): 'author'"),
        ("", "send a body"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_a_wrong_note_is_a_400_naming_the_problem(client, api_token, body, problem):
    session, _ = running_session()
    response = steer(client, session.id, api_token, body)
    assert response.status_code == 400, response.content
    assert problem in response.json()["message"]
    assert not SteeringNote.objects.exists()


def test_a_note_of_exactly_the_limit_is_taken(client, api_token):
    session, _ = running_session()
    response = steer(client, session.id, api_token, {"text": "x" * 4000})
    assert response.status_code == 202, response.content


def test_an_unknown_session_is_a_404(client, api_token):
    response = steer(client, "00000000-0000-0000-0000-000000000000", api_token, {"text": "hi"})
    assert response.status_code == 404


def test_without_credentials_nothing_is_taken(client):
    session, _ = running_session()
    response = client.post(
        f"/api/v1/sessions/{session.id}/steer",
        data=json.dumps({"text": "hi"}),
        content_type="application/json",
    )
    assert response.status_code == 401
    assert not SteeringNote.objects.exists()


def test_the_eleventh_note_in_a_minute_is_a_429_with_retry_after(client, api_token, outsider):
    session, _ = running_session()
    for number in range(10):
        response = steer(client, session.id, api_token, {"text": f"note {number}"})
        assert response.status_code == 202, response.content
    response = steer(client, session.id, api_token, {"text": "one too many"})
    assert response.status_code == 429, response.content
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    assert response.json()["retry_after"] == retry_after
    assert "at most 10 per 60 s" in response.json()["message"]
    assert SteeringNote.objects.count() == 10
    # Per author: someone else may still add a note to this session.
    from sessions.auth import api_token_create

    other = api_token_create(username=outsider.username)
    assert steer(client, session.id, other, {"text": "mine"}).status_code == 202
    # Per session: alice may still steer another session.
    another, _ = running_session()
    assert steer(client, another.id, api_token, {"text": "elsewhere"}).status_code == 202
    # Once the oldest note is older than the window, alice may add one again.
    oldest = SteeringNote.objects.filter(session=session, author="alice").first()
    SteeringNote.objects.filter(id=oldest.id).update(
        created_at=oldest.created_at - timedelta(seconds=61)
    )
    assert steer(client, session.id, api_token, {"text": "again"}).status_code == 202


def test_a_secret_in_a_note_is_masked_before_it_is_stored_shown_or_answered(client, api_token):
    session, _ = running_session()
    token = secrets_corpus.LINES["github_token"][1]
    text = f"the pod logs say {PASSWORD} and {token}"
    response = steer(client, session.id, api_token, {"text": text})
    assert response.status_code == 202, response.content
    assert secrets_corpus.CANARY not in response.content.decode()
    note = SteeringNote.objects.get()
    assert "[MASKED_" in note.text
    assert secrets_corpus.CANARY not in note.text
    item = TimelineEvent.objects.get(event_type="steering")
    assert secrets_corpus.CANARY not in item.content
    for event in SessionEvent.objects.filter(session=session):
        assert secrets_corpus.CANARY not in json.dumps(event.payload)


def test_the_page_offers_the_form_while_running_and_sends_a_note(browser_client):
    session, _ = running_session()
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'id="steer-form"' in page
    csrf = browser_client.cookies["csrftoken"].value
    response = browser_client.post(
        f"/sessions/{session.id}/steer/",
        {"text": "look at the pool size"},
        HTTP_X_CSRFTOKEN=csrf,
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert 'id="steer-sent"' in response.content.decode()
    note = SteeringNote.objects.get()
    assert (note.author, note.text) == ("alice", "look at the pool size")
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert "Guidance from alice" in page
    assert "look at the pool size" in page


def test_the_page_shows_why_a_note_was_refused_and_keeps_the_text(browser_client):
    session, _ = running_session()
    browser_client.get(f"/sessions/{session.id}/")
    csrf = browser_client.cookies["csrftoken"].value
    AlertSession.objects.filter(id=session.id).update(status=SessionStatus.COMPLETED)
    response = browser_client.post(
        f"/sessions/{session.id}/steer/",
        {"text": "too late now"},
        HTTP_X_CSRFTOKEN=csrf,
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert 'id="steer-error"' in html
    assert "session is completed" in html
    assert 'id="steer-form"' not in html  # the form is gone once the session ended
    plain = browser_client.post(
        f"/sessions/{session.id}/steer/", {"text": "too late now"}, HTTP_X_CSRFTOKEN=csrf
    )
    assert plain.status_code == 409
    assert not SteeringNote.objects.exists()
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'id="steer-form"' not in page


def test_the_page_keeps_a_too_long_note_with_the_reason(browser_client):
    session, _ = running_session()
    browser_client.get(f"/sessions/{session.id}/")
    csrf = browser_client.cookies["csrftoken"].value
    response = browser_client.post(
        f"/sessions/{session.id}/steer/",
        {"text": "y" * 4001},
        HTTP_X_CSRFTOKEN=csrf,
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert 'id="steer-error"' in html
    assert "the limit is 4,000" in html
    assert "y" * 4001 in html
    assert not SteeringNote.objects.exists()


def test_the_live_status_update_removes_the_form_once_the_session_ends():
    from web import fragments

    session, _ = running_session()
    running = fragments.session_fragments({"type": "session.status", "payload": {}}, session)
    # While it runs the form is left alone: re-rendering it would drop what is being typed.
    assert "steer-box" not in running
    AlertSession.objects.filter(id=session.id).update(status=SessionStatus.COMPLETED)
    session.refresh_from_db()
    ended = fragments.session_fragments({"type": "session.status", "payload": {}}, session)
    assert '<section id="steer-box" class="steer-box" hidden hx-swap-oob="true">' in ended
    assert "steer-form" not in ended


def test_a_live_note_renders_with_its_author(client, api_token):
    from sessions.selectors.timeline import TimelineItem
    from web import fragments

    session, _ = running_session()
    assert steer(client, session.id, api_token, {"text": "pool size <changed>"}).status_code == 202
    event = SessionEvent.objects.get(session=session, type="timeline_event.created")
    html = fragments.render_item(TimelineItem.from_payload(event.payload), live=True)
    assert "Guidance from alice" in html
    assert "pool size &lt;changed&gt;" in html
    assert 'data-upsert-into="#session-items"' in html


def test_a_note_no_agent_got_is_said_so_when_the_session_ends():
    from sessions import services
    from sessions.models import AgentExecution, Stage

    session, lease = running_session()
    stage = Stage.objects.create(session=session, name="s", index=0)
    execution = AgentExecution.objects.create(session=session, stage=stage, agent_name="a")
    heard = services.steering_note_add(session_id=session.id, text="heard", author="alice")
    services.steering_notes_take(lease=lease, execution=execution, after=0)
    # Added after the last model call: no agent will read it.
    services.steering_note_add(session_id=session.id, text="too late", author="bob")
    services.session_end(lease=lease, status=SessionStatus.COMPLETED, final_analysis="done")
    warnings = TimelineEvent.objects.filter(session=session, event_type="warning")
    assert [(w.content, w.metadata["note_id"]) for w in warnings] == [
        (
            "Guidance from bob reached no agent: the investigation made no model call after "
            "it was added.",
            SteeringNote.objects.get(text="too late").id,
        )
    ]
    assert heard.id != warnings[0].metadata["note_id"]
    # The heard note's item says whom it reached; the page shows it.
    heard.item.refresh_from_db()
    assert heard.item.metadata["delivered_to"] == ["a"]
    from sessions.selectors.timeline import TimelineItem
    from web.fragments import render_item

    html = render_item(TimelineItem.from_model(heard.item))
    assert "Reached: a" in html
