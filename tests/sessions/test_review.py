"""The review workflow: every action and its transitions, bulk actions, the activity log,
the API's answers (docs/api.md §1.10), the session page's panel, the triage page and
the session list's review filters."""

from __future__ import annotations

import html
import json
import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sessions import services
from sessions.models import AlertSession, ReviewActivity, SessionEvent
from sessions.services import review
from sessions.services.review import (
    ReviewChange,
    ReviewConflict,
    review_apply,
)
from tests.conftest import running_session
from tests.secrets_corpus import LINES
from web import fragments as live

pytestmark = pytest.mark.django_db


def ended(status: str = "completed", **fields) -> AlertSession:
    """A session that ran through the real services: created, claimed, ended."""
    session = services.session_create(
        alert_type=fields.pop("alert_type", "kubernetes"),
        alert_data="pod down",
        chain_id="kubernetes-investigation",
        author="api-client",
    )
    claim = services.session_claim(session_id=session.id, worker_id="w")
    services.session_end(lease=claim.lease, status=status, executive_summary="OOMKilled")
    if fields:
        AlertSession.objects.filter(id=session.id).update(**fields)
    return AlertSession.objects.get(id=session.id)


def apply(session, action, actor="alice", **fields) -> AlertSession:
    return review_apply(session_id=session.id, change=ReviewChange(action, **fields), actor=actor)


def activities(session) -> list[tuple[str, str, str, str, str]]:
    return [
        (a.actor, a.action, a.from_status, a.to_status, a.quality_rating)
        for a in ReviewActivity.objects.filter(session=session)
    ]


def review_events(session) -> list[dict]:
    return [e.payload for e in SessionEvent.objects.filter(session=session, type="review.status")]


def patch(client, token, body):
    return client.patch(
        "/api/v1/sessions/review",
        data=body if isinstance(body, str) else json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


# --- entering review ------------------------------------------------------------------


def test_an_ended_session_needs_review_and_the_system_says_so():
    session = ended()
    assert session.review_status == "needs_review"
    [event] = review_events(session)
    assert event["review_status"] == "needs_review"
    assert event["actor"] == "system"
    assert "assignee" not in event  # absent when empty, as TARSy


def test_a_cancelled_session_is_reviewed_already_without_a_rating():
    session = services.session_create(
        alert_type="kubernetes", alert_data="x", chain_id="kubernetes-investigation", author="a"
    )
    services.session_cancel(session_id=session.id, by="bob")
    session.refresh_from_db()
    assert (session.review_status, session.quality_rating) == ("reviewed", "")
    assert session.reviewed_at is not None
    assert review_events(session)[0]["review_status"] == "reviewed"


def test_a_review_claimed_while_the_session_runs_is_kept_when_it_ends():
    session, lease = running_session()
    apply(session, "claim")
    services.session_end(lease=lease, status="completed")
    session.refresh_from_db()
    assert (session.review_status, session.assignee) == ("in_progress", "alice")


# --- each action ----------------------------------------------------------------------


def test_claim_takes_a_review_and_records_who():
    session = apply(ended(), "claim")
    assert (session.review_status, session.assignee) == ("in_progress", "alice")
    assert session.assigned_at is not None
    assert activities(session) == [("alice", "claim", "needs_review", "in_progress", "")]
    assert review_events(session)[-1] == {
        **review_events(session)[-1],
        "review_status": "in_progress",
        "assignee": "alice",
        "actor": "alice",
    }


def test_claiming_an_in_progress_review_takes_it_over():
    session = apply(apply(ended(), "claim"), "claim", actor="bob")
    assert (session.review_status, session.assignee) == ("in_progress", "bob")
    assert activities(session)[-1] == ("bob", "claim", "in_progress", "in_progress", "")


def test_unclaim_puts_it_back_in_the_queue():
    session = apply(apply(ended(), "claim"), "unclaim")
    assert (session.review_status, session.assignee, session.assigned_at) == (
        "needs_review",
        "",
        None,
    )
    assert activities(session)[-1] == ("alice", "unclaim", "in_progress", "needs_review", "")


def test_complete_from_the_queue_claims_it_first_then_rates_it():
    session = apply(
        ended(),
        "complete",
        quality_rating="partially_accurate",
        action_taken="raised the memory limit",
        investigation_feedback="missed the node pressure",
    )
    assert session.review_status == "reviewed"
    assert session.assignee == "alice"
    assert (session.quality_rating, session.action_taken, session.investigation_feedback) == (
        "partially_accurate",
        "raised the memory limit",
        "missed the node pressure",
    )
    assert session.reviewed_at is not None
    assert activities(session) == [
        ("alice", "claim", "needs_review", "in_progress", ""),
        ("alice", "complete", "in_progress", "reviewed", "partially_accurate"),
    ]
    last = ReviewActivity.objects.filter(session=session).last()
    assert (last.note, last.investigation_feedback) == (
        "raised the memory limit",
        "missed the node pressure",
    )
    assert review_events(session)[-1]["quality_rating"] == "partially_accurate"
    assert review_events(session)[-1]["action_taken"] == "raised the memory limit"


def test_complete_of_a_claimed_review_keeps_its_assignee():
    session = apply(apply(ended(), "claim", actor="bob"), "complete", quality_rating="accurate")
    assert (session.review_status, session.assignee) == ("reviewed", "bob")
    assert activities(session)[-1] == ("alice", "complete", "in_progress", "reviewed", "accurate")


def test_reopen_clears_the_review():
    session = apply(ended(), "complete", quality_rating="inaccurate", action_taken="paged")
    session = apply(session, "reopen", actor="bob")
    assert session.review_status == "needs_review"
    assert (session.assignee, session.quality_rating, session.action_taken) == ("", "", "")
    assert (session.assigned_at, session.reviewed_at) == (None, None)
    assert activities(session)[-1] == ("bob", "reopen", "reviewed", "needs_review", "")


def test_update_feedback_changes_only_what_is_sent_and_empty_text_clears():
    session = apply(
        ended(),
        "complete",
        quality_rating="accurate",
        action_taken="restarted",
        investigation_feedback="good",
    )
    session = apply(session, "update_feedback", actor="bob", action_taken="")
    assert (session.quality_rating, session.action_taken, session.investigation_feedback) == (
        "accurate",
        "",
        "good",
    )
    assert session.feedback_edited_by == "bob"
    assert session.feedback_edited_at is not None
    session = apply(session, "update_feedback", quality_rating="inaccurate")
    assert session.quality_rating == "inaccurate"
    update = ReviewActivity.objects.filter(session=session).last()
    # The log keeps the whole review as it stood after the edit.
    assert (update.action, update.quality_rating, update.note, update.investigation_feedback) == (
        "update_feedback",
        "inaccurate",
        "",
        "good",
    )


def test_acknowledge_reviews_without_a_rating():
    session = apply(ended(), "acknowledge", actor="bob")
    assert (session.review_status, session.quality_rating, session.assignee) == (
        "reviewed",
        "",
        "bob",
    )
    assert activities(session) == [
        ("bob", "claim", "needs_review", "in_progress", ""),
        ("bob", "acknowledge", "in_progress", "reviewed", ""),
    ]


def test_acknowledging_a_rated_review_takes_the_rating_back():
    session = apply(ended(), "complete", quality_rating="accurate", investigation_feedback="ok")
    session = apply(session, "acknowledge")
    assert (session.review_status, session.quality_rating, session.investigation_feedback) == (
        "reviewed",
        "",
        "",
    )


@pytest.mark.parametrize(
    ("before", "action", "fields"),
    [
        ("needs_review", "unclaim", {}),
        ("needs_review", "reopen", {}),
        ("needs_review", "update_feedback", {"action_taken": "x"}),
        ("in_progress", "reopen", {}),
        ("reviewed", "unclaim", {}),
        ("", "unclaim", {}),
    ],
)
def test_an_action_from_a_state_it_does_not_apply_to_is_a_state_conflict(before, action, fields):
    session = ended(review_status=before)
    with pytest.raises(ReviewConflict, match="state conflict"):
        apply(session, action, **fields)
    session.refresh_from_db()
    assert session.review_status == before
    assert activities(session) == []


def test_two_reviewers_racing_get_one_success_and_one_conflict():
    """Both saw the session in the queue; the compare-and-set lets only the first in."""
    session = ended()
    review_apply(
        session_id=session.id, change=ReviewChange("claim"), actor="alice", expected="needs_review"
    )
    with pytest.raises(ReviewConflict):
        review_apply(
            session_id=session.id,
            change=ReviewChange("claim"),
            actor="bob",
            expected="needs_review",
        )
    session.refresh_from_db()
    assert session.assignee == "alice"
    assert len(activities(session)) == 1


def test_a_failed_write_leaves_no_change_no_activity_and_no_event(monkeypatch):
    session = ended()
    events_before = SessionEvent.objects.count()

    def broken(**kwargs):
        raise RuntimeError("event log is down")

    monkeypatch.setattr(review, "event_publish", broken)
    with pytest.raises(RuntimeError):
        apply(session, "claim")
    session.refresh_from_db()
    assert (session.review_status, session.assignee) == ("needs_review", "")
    assert activities(session) == []
    assert SessionEvent.objects.count() == events_before


def test_secrets_in_review_text_are_masked_before_they_are_stored():
    text, secret = LINES["github_token"]
    session = apply(ended(), "complete", quality_rating="accurate", investigation_feedback=text)
    assert secret not in session.investigation_feedback
    assert secret not in ReviewActivity.objects.get(action="complete").investigation_feedback


# --- PATCH /api/v1/sessions/review ----------------------------------------------------


def test_the_api_applies_an_action_to_several_sessions_each_on_its_own(client, api_token):
    first, second, reviewed = ended(), ended(), ended()
    apply(reviewed, "complete", quality_rating="accurate")
    response = patch(
        client,
        api_token,
        {"session_ids": [str(first.id), str(second.id), str(reviewed.id)], "action": "unclaim"},
    )
    assert response.status_code == 200
    assert [r["success"] for r in response.json()["results"]] == [False, False, False]
    response = patch(
        client,
        api_token,
        {"session_ids": [str(first.id), str(reviewed.id), str(second.id)], "action": "claim"},
    )
    assert response.json() == {
        "results": [
            {"session_id": str(first.id), "success": True},
            {"session_id": str(reviewed.id), "success": False, "error": "state conflict"},
            {"session_id": str(second.id), "success": True},
        ]
    }
    # The actor is the token's user.
    assert AlertSession.objects.get(id=first.id).assignee == "alice"
    assert AlertSession.objects.get(id=reviewed.id).review_status == "reviewed"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"action": "claim"}, "session_ids is required and must not be empty"),
        ({"session_ids": [], "action": "claim"}, "session_ids is required and must not be empty"),
        (
            {"session_ids": [str(uuid.uuid4())] * 51, "action": "claim"},
            "session_ids must not exceed 50 entries",
        ),
        ({"session_ids": ["x"], "action": "resolve"}, 'unknown action "resolve"'),
        ({"session_ids": ["x"]}, 'unknown action "null"'),
        (
            {"session_ids": ["x"], "action": "complete"},
            "quality_rating is required for complete action",
        ),
        (
            {"session_ids": ["x"], "action": "acknowledge", "quality_rating": "accurate"},
            "quality_rating must not be set for acknowledge action",
        ),
        ({"session_ids": "abc", "action": "claim"}, "session_ids must be a list"),
        ({"session_ids": [1], "action": "claim"}, "session_ids must be a list"),
        (
            {"session_ids": ["x"], "action": "complete", "quality_rating": 5},
            "validation error on field 'quality_rating': must be a string",
        ),
        ("not json", "request body is not valid JSON"),
        ("[1]", "request body must be a JSON object such as"),
    ],
)
def test_a_request_no_session_could_take_is_a_400(client, api_token, body, message):
    response = patch(client, api_token, body)
    assert response.status_code == 400
    assert message in response.json()["message"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"action": "complete", "quality_rating": "great"},
            "validation error on field 'quality_rating': invalid value \"great\"",
        ),
        (
            {"action": "update_feedback"},
            "validation error on field 'update_feedback': at least one field must be provided",
        ),
        (
            {"action": "acknowledge", "action_taken": "x"},
            "validation error on field 'action_taken': must not be set for acknowledge action",
        ),
        (
            {"action": "complete", "quality_rating": "accurate", "action_taken": "x" * 20_001},
            "validation error on field 'action_taken': 20001 characters; the limit is 20000",
        ),
    ],
)
def test_other_mistakes_fail_every_session_with_a_200(client, api_token, body, error):
    sessions = [ended(), ended()]
    response = patch(client, api_token, {"session_ids": [str(s.id) for s in sessions], **body})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["success"] for r in results] == [False, False]
    assert all(r["error"].startswith(error) for r in results)
    assert all(s.review_activities.count() == 0 for s in sessions)


def test_unknown_and_malformed_session_ids_are_not_found(client, api_token):
    response = patch(
        client, api_token, {"session_ids": [str(uuid.uuid4()), "nope"], "action": "claim"}
    )
    assert [r["error"] for r in response.json()["results"]] == [
        "resource not found",
        "resource not found",
    ]


def test_the_api_needs_a_login_and_csrf_from_a_browser(user):
    session = ended()
    body = json.dumps({"session_ids": [str(session.id)], "action": "claim"})
    anonymous = Client().patch("/api/v1/sessions/review", body, content_type="application/json")
    assert anonymous.status_code == 401
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert (
        browser.patch("/api/v1/sessions/review", body, content_type="application/json").status_code
        == 403
    )
    assert Client().get("/api/v1/sessions/triage/needs_review").status_code == 401


# --- GET review-activity and triage -----------------------------------------------------


def test_review_activity_lists_every_step_oldest_first(client, api_token):
    session = apply(ended(), "complete", quality_rating="accurate", action_taken="scaled up")
    apply(session, "reopen", actor="bob")
    response = client.get(
        f"/api/v1/sessions/{session.id}/review-activity", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    )
    assert response.status_code == 200
    steps = response.json()["activities"]
    assert [(s["actor"], s["action"], s["from_status"], s["to_status"]) for s in steps] == [
        ("alice", "claim", "needs_review", "in_progress"),
        ("alice", "complete", "in_progress", "reviewed"),
        ("bob", "reopen", "reviewed", "needs_review"),
    ]
    assert steps[1]["quality_rating"] == "accurate"
    assert steps[1]["note"] == "scaled up"
    assert "quality_rating" not in steps[0]  # opt keys are absent, not null
    assert steps[0]["created_at"].endswith("Z")
    missing = client.get(
        f"/api/v1/sessions/{uuid.uuid4()}/review-activity",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert missing.status_code == 404


def triage(client, token, query):
    return client.get(f"/api/v1/sessions/triage/{query}", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_triage_groups_hold_their_sessions_newest_first(client, api_token):
    running, _ = running_session()
    queued = [ended(), ended()]
    claimed = apply(ended(), "claim", actor="bob")
    done = apply(ended(), "acknowledge")
    ids = {
        group: [s["id"] for s in triage(client, api_token, group).json()["sessions"]]
        for group in ("investigating", "needs_review", "in_progress", "reviewed")
    }
    assert ids == {
        "investigating": [str(running.id)],
        "needs_review": [str(queued[1].id), str(queued[0].id)],
        "in_progress": [str(claimed.id)],
        "reviewed": [str(done.id)],
    }
    item = triage(client, api_token, "in_progress").json()["sessions"][0]
    assert (item["review_status"], item["assignee"], item["quality_rating"]) == (
        "in_progress",
        "bob",
        None,
    )
    assert item["total_tokens"] == 0


def test_triage_pages_and_filters_by_assignee(client, api_token):
    for _ in range(3):
        ended()
    apply(ended(), "claim", actor="bob")
    AlertSession.objects.filter(review_status="in_progress").update(review_status="needs_review")
    page = triage(client, api_token, "needs_review?page=2&page_size=3").json()
    assert {k: page[k] for k in ("count", "page", "page_size", "total_pages")} == {
        "count": 4,
        "page": 2,
        "page_size": 3,
        "total_pages": 2,
    }
    assert len(page["sessions"]) == 1
    assert triage(client, api_token, "needs_review?page=9").json()["page"] == 1  # clamped
    assert triage(client, api_token, "needs_review").json()["page_size"] == 20
    assert triage(client, api_token, "needs_review?assignee=").json()["count"] == 3
    assert triage(client, api_token, "needs_review?assignee=bob").json()["count"] == 1
    empty = triage(client, api_token, "reviewed").json()
    assert (empty["count"], empty["total_pages"], empty["sessions"]) == (0, 1, [])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("resolved", "validation error on field 'group': Input should be 'investigating'"),
        ("needs_review?page=0", "validation error on field 'page': must be a positive integer"),
        ("needs_review?page=x", "validation error on field 'page': must be a positive integer"),
        (
            "needs_review?page_size=-1",
            "validation error on field 'page_size': must be a positive integer",
        ),
        (
            "needs_review?page_size=201",
            "validation error on field 'page_size': must not exceed 200",
        ),
    ],
)
def test_triage_rejects_what_it_cannot_answer(client, api_token, query, message):
    response = triage(client, api_token, query)
    assert response.status_code == 400
    assert response.json()["message"].startswith(message)


# --- the session page ---------------------------------------------------------------------


def csrf_token(browser: Client, path: str) -> str:
    return browser.get(path).cookies["csrftoken"].value


def test_the_review_panel_offers_the_actions_of_the_current_state(client):
    session = ended()
    panel = live.review_fragment(session.id)
    assert 'id="review-claim"' in panel
    assert 'id="review-acknowledge"' in panel
    assert 'id="review-reopen"' not in panel
    assert "Complete review" in panel
    apply(session, "complete", quality_rating="accurate", investigation_feedback="spot on")
    panel = live.review_fragment(session.id)
    assert 'id="review-reopen"' in panel
    assert 'id="review-claim"' not in panel
    assert "Save feedback" in panel
    assert "spot on" in panel
    running, _ = running_session()
    assert "starts when the investigation ends" in live.review_fragment(running.id)


def test_the_session_page_shows_the_review_panel(browser_client):
    session = apply(ended(), "claim", actor="bob")
    page = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'id="review-panel"' in page
    assert 'data-review-status="in_progress"' in page
    assert '<dd id="review-assignee">bob</dd>' in page


def test_the_page_claims_and_completes_with_csrf_and_shows_the_log(browser_client):
    session = ended()
    path = f"/sessions/{session.id}/review/"
    assert browser_client.post(path, {"action": "claim"}).status_code == 403  # no CSRF token
    token = csrf_token(browser_client, "/triage/")
    claimed = browser_client.post(
        path,
        {"action": "claim", "expected": "needs_review"},
        HTTP_X_CSRFTOKEN=token,
        HTTP_HX_REQUEST="true",
    )
    assert claimed.status_code == 200
    panel = claimed.content.decode()
    assert 'data-review-status="in_progress"' in panel
    assert "Review claimed." in panel
    completed = browser_client.post(
        path,
        {
            "action": "complete",
            "expected": "in_progress",
            "quality_rating": "accurate",
            "action_taken": "rolled back",
            "investigation_feedback": "",
        },
        HTTP_X_CSRFTOKEN=token,
    )
    assert completed.status_code == 302  # without htmx: back to the session page
    session.refresh_from_db()
    assert (session.review_status, session.quality_rating, session.action_taken) == (
        "reviewed",
        "accurate",
        "rolled back",
    )
    log = live.review_fragment(session.id)
    assert log.count("<li data-action=") == 2


@pytest.mark.parametrize(
    ("post", "problem"),
    [
        ({"action": "complete", "quality_rating": ""}, "Choose a quality rating"),
        ({"action": "complete", "quality_rating": "superb"}, 'invalid value "superb"'),
        ({"action": "dance"}, 'unknown action "dance"'),
        ({"action": "unclaim", "expected": "in_progress"}, "someone changed this review first"),
    ],
)
def test_the_page_names_each_mistake_in_the_panel(browser_client, post, problem):
    session = ended()
    token = csrf_token(browser_client, "/triage/")
    response = browser_client.post(
        f"/sessions/{session.id}/review/", post, HTTP_X_CSRFTOKEN=token, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200  # htmx swaps the panel with the message in it
    assert 'id="review-problem"' in response.content.decode()
    assert problem in html.unescape(response.content.decode())
    session.refresh_from_db()
    assert session.review_status == "needs_review"


def test_a_review_event_renders_the_panel_the_page_would_render(client):
    """The live fragment is the page's own panel, marked for an out-of-band swap."""
    session = apply(ended(), "claim")
    event = SessionEvent.objects.filter(session=session, type="review.status").last()
    fragment = live.session_fragments(
        {"type": event.type, "payload": event.payload, "session_id": str(session.id)}, None
    )
    assert 'hx-swap-oob="true"' in fragment
    fresh = live.review_fragment(session.id)
    assert _without_tokens(fragment) == _without_tokens(fresh)


def _without_tokens(html: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)


# --- the triage page ------------------------------------------------------------------


def triage_rows(html: str) -> list[str]:
    return re.findall(r'id="triage-row-([0-9a-f-]+)"', html)


def test_the_triage_page_groups_sessions_in_tabs(browser_client):
    waiting = ended()
    mine = apply(ended(), "claim")
    theirs = apply(ended(), "claim", actor="bob")
    done = apply(ended(), "acknowledge")

    def tab(name):
        response = browser_client.get(f"/triage/?tab={name}")
        assert response.status_code == 200
        return triage_rows(response.content.decode())

    assert tab("needs_review") == [str(waiting.id)]
    assert tab("in_progress") == [str(theirs.id), str(mine.id)]
    assert tab("mine") == [str(mine.id)]
    assert tab("reviewed") == [str(done.id)]
    page = browser_client.get("/triage/?tab=nonsense").content.decode()
    assert "Unknown tab 'nonsense'" in html.unescape(page)
    assert triage_rows(page) == [str(waiting.id)]
    assert 'id="nav-triage"' in page


def test_the_triage_page_acts_on_the_selected_sessions(browser_client):
    first, second, third = ended(), ended(), ended()
    apply(third, "claim", actor="bob")  # someone else got there since the page loaded
    token = csrf_token(browser_client, "/triage/")
    response = browser_client.post(
        "/triage/review/",
        {
            "tab": "needs_review",
            "action": "complete",
            "quality_rating": "inaccurate",
            "session_ids": [str(first.id), str(second.id), str(third.id)],
        },
        HTTP_X_CSRFTOKEN=token,
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "2 sessions completed." in page
    assert "someone changed this review first" in page
    assert [AlertSession.objects.get(id=s.id).quality_rating for s in (first, second, third)] == [
        "inaccurate",
        "inaccurate",
        "",
    ]
    assert AlertSession.objects.get(id=third.id).assignee == "bob"


@pytest.mark.parametrize(
    ("post", "problem"),
    [
        ({"action": "claim"}, "Select at least one session."),
        (
            {"action": "claim", "session_ids": [str(uuid.uuid4()) for _ in range(51)]},
            "Select at most 50 sessions at a time.",
        ),
        ({"action": "complete", "session_ids": ["x"]}, "Choose a quality rating"),
    ],
)
def test_the_triage_page_names_each_mistake(browser_client, post, problem):
    token = csrf_token(browser_client, "/triage/")
    response = browser_client.post("/triage/review/", post, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 400
    assert problem in response.content.decode()


# --- the session list -----------------------------------------------------------------


def listed(client: Client, query: str) -> list[str]:
    response = client.get(f"/?{query}")
    assert response.status_code == 200
    return re.findall(r'id="session-row-([0-9a-f-]+)"', response.content.decode())


def test_the_list_filters_by_review_status_assignee_and_rating(browser_client):
    client = browser_client
    waiting = ended()
    claimed = apply(ended(), "claim", actor="bob")
    good = apply(ended(), "complete", quality_rating="accurate")
    bad = apply(ended(), "complete", quality_rating="inaccurate", actor="bob")
    assert listed(client, "review_status=needs_review") == [str(waiting.id)]
    assert set(listed(client, "review_status=needs_review&review_status=in_progress")) == {
        str(waiting.id),
        str(claimed.id),
    }
    assert set(listed(client, "assignee=bob")) == {str(claimed.id), str(bad.id)}
    assert listed(client, "assignee=~unassigned") == [str(waiting.id)]
    assert listed(client, "quality_rating=accurate") == [str(good.id)]
    # A search goes through its own SQL: the review filters apply there too.
    assert listed(client, "q=pod&quality_rating=inaccurate") == [str(bad.id)]


def test_the_list_sorts_by_rating_and_review_status_with_empty_ones_last(browser_client):
    client = browser_client
    unrated = ended()
    bad = apply(ended(), "complete", quality_rating="inaccurate")
    good = apply(ended(), "complete", quality_rating="accurate")
    assert listed(client, "sort=rating") == [str(good.id), str(bad.id), str(unrated.id)]
    assert listed(client, "sort=-rating") == [str(bad.id), str(good.id), str(unrated.id)]
    assert listed(client, "sort=review")[0] == str(unrated.id)  # needs review comes first


def test_a_wrong_review_filter_is_named_and_ignored(browser_client):
    client = browser_client
    ended()
    page = html.unescape(
        client.get("/?review_status=resolved&quality_rating=great").content.decode()
    )
    assert "Unknown review status resolved" in page
    assert "Unknown quality rating 'great'" in page
    assert len(re.findall(r'id="session-row-', page)) == 1


def test_me_in_the_assignee_filter_is_the_logged_in_user(browser_client):
    client = browser_client
    mine = apply(ended(), "claim")
    page = client.get(f"/?assignee={mine.assignee}").content.decode()
    assert '<option value="alice" selected>Me (alice)</option>' in page
    other = get_user_model().objects.create_user("carol")
    carol = Client()
    carol.force_login(other)
    assert 'value="carol"' in carol.get("/").content.decode()
