"""The review workflow's REST routes, in TARSy's shapes (TARSY-API.md §1.10):
``PATCH /sessions/review``, ``GET /sessions/{id}/review-activity`` and
``GET /sessions/triage/{group}``. Errors are ``{"message": ...}`` as in TARSy."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_http_methods

from sessions import review_selectors, services
from sessions.auth import api_error, api_view
from sessions.models import AlertSession, ReviewAction, ReviewActivity
from sessions.services import ReviewChange, ReviewResult

MAX_SESSION_IDS = 50
TRIAGE_PAGE_SIZE = 20
TRIAGE_MAX_PAGE_SIZE = 200
_CHANGE_FIELDS = ("quality_rating", "action_taken", "investigation_feedback")


class _BadRequest(Exception):
    pass


@api_view
@require_http_methods(["PATCH"])
def review_update(request: HttpRequest) -> JsonResponse:
    """One action on up to ``MAX_SESSION_IDS`` sessions; each succeeds or fails on its
    own (200 with per-session results). 400 only for a request no session could take."""
    try:
        session_ids, change = _review_request(request)
    except _BadRequest as exc:
        return api_error(str(exc), 400)
    except RequestDataTooBig:
        return api_error("Request Entity Too Large", 413)
    results = services.reviews_apply(
        session_ids=session_ids, change=change, actor=request.user.get_username()
    )
    return JsonResponse({"results": [_result_json(r) for r in results]})


def _review_request(request: HttpRequest) -> tuple[list[str], ReviewChange]:
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"invalid request body: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise _BadRequest("invalid request body: expected a JSON object")
    session_ids = body.get("session_ids")
    if session_ids is not None and (
        not isinstance(session_ids, list) or not all(isinstance(s, str) for s in session_ids)
    ):
        raise _BadRequest("session_ids must be a list of session id strings")
    if not session_ids:
        raise _BadRequest("session_ids is required and must not be empty")
    if len(session_ids) > MAX_SESSION_IDS:
        raise _BadRequest(f"session_ids must not exceed {MAX_SESSION_IDS} entries")
    action = body.get("action")
    if action not in ReviewAction.values:
        shown = action if isinstance(action, str) else json.dumps(action)
        raise _BadRequest(f'unknown action "{shown}"; one of {", ".join(ReviewAction.values)}')
    fields = {}
    for name in _CHANGE_FIELDS:
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise _BadRequest(f"{name} must be a string")
        fields[name] = value
    if action == ReviewAction.COMPLETE and fields["quality_rating"] is None:
        raise _BadRequest("quality_rating is required for complete action")
    if action == ReviewAction.ACKNOWLEDGE and fields["quality_rating"] is not None:
        raise _BadRequest("quality_rating must not be set for acknowledge action")
    return session_ids, ReviewChange(action=action, **fields)


def _result_json(result: ReviewResult) -> dict[str, Any]:
    data: dict[str, Any] = {"session_id": result.session_id, "success": result.success}
    if result.error:
        data["error"] = result.error
    return data


@api_view
@require_GET
def review_activity(request: HttpRequest, session_id) -> JsonResponse:
    get_object_or_404(AlertSession, id=session_id)
    activities = review_selectors.review_activities(session_id)
    return JsonResponse({"activities": [_activity_json(a) for a in activities]})


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
    data["created_at"] = _time(activity.created_at)
    return data


@api_view
@require_GET
def triage_group(request: HttpRequest, group: str) -> JsonResponse:
    """One triage group, a page at a time; ``?assignee=`` (empty) is the unassigned."""
    if group not in review_selectors.TRIAGE_GROUPS:
        return api_error(
            f'unknown triage group "{group}"; one of {", ".join(review_selectors.TRIAGE_GROUPS)}',
            400,
        )
    try:
        page = _positive(request.GET.get("page"), 1, "page")
        page_size = _positive(request.GET.get("page_size"), TRIAGE_PAGE_SIZE, "page_size")
    except _BadRequest as exc:
        return api_error(str(exc), 400)
    if page_size > TRIAGE_MAX_PAGE_SIZE:
        return api_error(f"page_size must not exceed {TRIAGE_MAX_PAGE_SIZE}", 400)
    sessions = review_selectors.triage_sessions(group, assignee=request.GET.get("assignee"))
    count = sessions.count()
    total_pages = max(math.ceil(count / page_size), 1)
    page = min(page, total_pages)
    start = (page - 1) * page_size
    return JsonResponse(
        {
            "count": count,
            "page": page,
            "page_size": page_size,
            "total_pages": total_pages,
            "sessions": [_session_item(s) for s in sessions[start : start + page_size]],
        }
    )


def _positive(value: str | None, default: int, name: str) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise _BadRequest(f"{name} must be a positive integer")
    return number


def _session_item(session: AlertSession) -> dict[str, Any]:
    """A triage row in TARSy's list-item shape: empty values are null, and the counters
    a triage view does not read are zero."""
    duration = session.duration_seconds
    return {
        "id": str(session.id),
        "alert_type": session.alert_type,
        "chain_id": session.chain_id,
        "status": session.status,
        "author": session.author or None,
        "created_at": _time(session.created_at),
        "started_at": _time(session.started_at),
        "completed_at": _time(session.completed_at),
        "duration_ms": round(duration * 1000) if duration is not None else None,
        "error_message": session.error_message or None,
        "executive_summary": session.executive_summary or None,
        "llm_interaction_count": 0,
        "mcp_interaction_count": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "total_stages": 0,
        "completed_stages": 0,
        "current_stage_index": None,
        "current_stage_id": None,
        "review_status": session.review_status or None,
        "assignee": session.assignee or None,
        "quality_rating": session.quality_rating or None,
        "action_taken": session.action_taken or None,
        "investigation_feedback": session.investigation_feedback or None,
        "feedback_edited": bool(session.feedback_edited_by),
        "feedback_edited_by": session.feedback_edited_by or None,
        "feedback_edited_at": _time(session.feedback_edited_at),
    }


def _time(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with ``Z``, as TARSy writes times."""
    return value.isoformat().replace("+00:00", "Z") if value else None
