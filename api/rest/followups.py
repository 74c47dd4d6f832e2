"""What follows an investigation: chat questions, scores and the review workflow
(docs/api.md §1.8 to §1.10)."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Literal
from uuid import UUID

from django.http import HttpRequest, JsonResponse
from ninja import Router

from api.rest import schemas, shapes
from api.rest.common import NOT_FOUND, iso, json_body, only_fields, respond
from api.rest.docs import ERRORS, request_body
from api.rest.docs import NOT_FOUND as NOT_FOUND_ERRORS
from sessions import services
from sessions.auth import ApiRejected, request_author
from sessions.models import AlertSession, ReviewAction, ReviewActivity
from sessions.selectors import review as review_selectors
from sessions.selectors import scoring as scoring_selectors
from sessions.services import ReviewChange, ReviewResult

router = Router(tags=["follow-ups"])

MAX_SESSION_IDS = 50
TRIAGE_PAGE_SIZE = 20
TRIAGE_MAX_PAGE_SIZE = 200
REVIEW_FIELDS = (
    "session_ids",
    "action",
    "quality_rating",
    "action_taken",
    "investigation_feedback",
)
_CHANGE_FIELDS = REVIEW_FIELDS[2:]
TriageGroup = Literal["investigating", "needs_review", "in_progress", "reviewed"]


def _session(session_id: UUID) -> AlertSession:
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        raise ApiRejected(NOT_FOUND, 404)
    return session


@router.post(
    "/sessions/{uuid:session_id}/chat/messages",
    response={202: schemas.ChatAccepted, **ERRORS, 404: schemas.Error, 409: schemas.Error},
    openapi_extra=request_body(schemas.ChatMessageIn),
    summary="Ask a follow-up question",
)
def chat_message_create(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """Ask about an ended session: 202 ``{chat_id, message_id, stage_id}``; the answer
    streams into the timeline as a ``chat`` stage. Checked in TARSy's order: the
    session, its chain, its status, chat enabled, the content, then an answer already
    running (409)."""
    session = _session(session_id)
    if reason := services.chat_unavailable_reason(session):
        raise ApiRejected(reason)
    body = json_body(request, example='such as {"content": "your question"}') or {}
    only_fields(body, ("content",))
    try:
        message = services.chat_message_send(
            session=session, content=body.get("content"), author=request_author(request)
        )
    except services.ChatRejected as rejected:
        raise ApiRejected(str(rejected), rejected.status) from None
    return respond(
        {
            "chat_id": str(message.chat_id),
            "message_id": str(message.id),
            "stage_id": None if message.stage_id is None else str(message.stage_id),
        },
        202,
    )


@router.get(
    "/sessions/{uuid:session_id}/score",
    response={200: schemas.Score, **NOT_FOUND_ERRORS},
    summary="The newest score",
)
def score_get(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """The newest score row, whatever its status; 404 when never scored."""
    score = _session(session_id).scores.first()
    if score is None:
        raise ApiRejected(NOT_FOUND, 404)
    return respond(scoring_selectors.score_json(score))


@router.post(
    "/sessions/{uuid:session_id}/score",
    response={202: schemas.ScoreAccepted, **NOT_FOUND_ERRORS, 409: schemas.Error},
    summary="Score again",
)
def score_create(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """Score again (no body), whatever the chain's ``scoring.enabled`` says; 409 while
    the session runs or a scoring is already queued or running."""
    session = _session(session_id)
    try:
        score = services.score_request(session_id=session.id, triggered_by=request_author(request))
    except services.NotScorable as refused:
        raise ApiRejected(str(refused), 409) from None
    return respond({"score_id": str(score.id)}, 202)


@router.patch(
    "/sessions/review",
    response={200: schemas.ReviewResults, **ERRORS, 413: schemas.Error},
    openapi_extra=request_body(schemas.ReviewIn),
    summary="Apply a review action to sessions",
)
def review_update(request: HttpRequest) -> JsonResponse:
    """One action on up to 50 sessions; each succeeds or fails on its own (200 with
    per-session results). 400 only for a request no session could take."""
    session_ids, change = _review_request(request)
    valid = [s for s in session_ids if _is_uuid(s)]
    applied = iter(
        services.reviews_apply(session_ids=valid, change=change, actor=request_author(request))
    )
    results = [
        next(applied) if _is_uuid(s) else ReviewResult(s, False, NOT_FOUND) for s in session_ids
    ]
    return respond({"results": [_result_json(r) for r in results]})


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _review_request(request: HttpRequest) -> tuple[list[str], ReviewChange]:
    body = json_body(request, example='such as {"session_ids": [...], "action": "claim"}') or {}
    only_fields(body, REVIEW_FIELDS)
    session_ids = body.get("session_ids")
    if session_ids is not None and (
        not isinstance(session_ids, list) or not all(isinstance(s, str) for s in session_ids)
    ):
        raise ApiRejected("session_ids must be a list of session id strings")
    if not session_ids:
        raise ApiRejected("session_ids is required and must not be empty")
    if len(session_ids) > MAX_SESSION_IDS:
        raise ApiRejected(f"session_ids must not exceed {MAX_SESSION_IDS} entries")
    action = body.get("action")
    if action not in ReviewAction.values:
        shown = action if isinstance(action, str) else json.dumps(action)
        raise ApiRejected(f'unknown action "{shown}"; one of {", ".join(ReviewAction.values)}')
    fields = {}
    for name in _CHANGE_FIELDS:
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise ApiRejected(f"validation error on field '{name}': must be a string")
        fields[name] = value
    if action == ReviewAction.COMPLETE and fields["quality_rating"] is None:
        raise ApiRejected("quality_rating is required for complete action")
    if action == ReviewAction.ACKNOWLEDGE and fields["quality_rating"] is not None:
        raise ApiRejected("quality_rating must not be set for acknowledge action")
    return session_ids, ReviewChange(action=action, **fields)


def _result_json(result: ReviewResult) -> dict[str, Any]:
    data: dict[str, Any] = {"session_id": result.session_id, "success": result.success}
    if result.error:
        data["error"] = result.error
    return data


@router.get(
    "/sessions/{uuid:session_id}/review-activity",
    response={200: schemas.ReviewActivities, **NOT_FOUND_ERRORS},
)
def review_activity(request: HttpRequest, session_id: UUID) -> JsonResponse:
    _session(session_id)
    activities = review_selectors.review_activities(session_id)
    return respond({"activities": [_activity_json(a) for a in activities]})


def _activity_json(activity: ReviewActivity) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": str(activity.id),
        "actor": activity.actor,
        "action": activity.action,
        "from_status": activity.from_status or None,
        "to_status": activity.to_status,
    }
    for name in ("quality_rating", "note", "investigation_feedback"):
        if value := getattr(activity, name):
            data[name] = value
    data["created_at"] = iso(activity.created_at)
    return data


@router.get(
    "/sessions/triage/{group}",
    response={200: schemas.TriagePage, **ERRORS},
    summary="One triage group, a page at a time",
)
def triage_group(
    request: HttpRequest,
    group: TriageGroup,
    page: str | None = None,
    page_size: str | None = None,
    assignee: str | None = None,
) -> JsonResponse:
    """``group``: investigating, needs_review, in_progress or reviewed. ``assignee=``
    (empty) means unassigned. Unlike the list, an invalid page or page_size is a 400."""
    number = _positive("page", page, 1)
    size = _positive("page_size", page_size, TRIAGE_PAGE_SIZE)
    if size > TRIAGE_MAX_PAGE_SIZE:
        raise ApiRejected(
            f"validation error on field 'page_size': must not exceed {TRIAGE_MAX_PAGE_SIZE}"
        )
    sessions = review_selectors.triage_sessions(group, assignee=request.GET.get("assignee"))
    count = sessions.count()
    total_pages = max(math.ceil(count / size), 1)
    number = min(number, total_pages)
    start = (number - 1) * size
    return respond(
        {
            "count": count,
            "page": number,
            "page_size": size,
            "total_pages": total_pages,
            "sessions": shapes.triage_items(list(sessions[start : start + size])),
        }
    )


def _positive(name: str, value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ApiRejected(f"validation error on field '{name}': must be a positive integer")
    return number
