"""Session reads and cancels (docs/api.md §1.2 to §1.7)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Literal, get_args
from urllib.parse import urlencode
from uuid import UUID

from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest, JsonResponse
from ninja import Router

from api.rest import schemas, shapes
from api.rest.common import NOT_FOUND, iso, json_body, only_fields, respond
from api.rest.docs import ERRORS, request_body
from api.rest.docs import NOT_FOUND as NOT_FOUND_ERRORS
from sessions import search, selectors, services
from sessions.auth import ApiRejected, request_author
from sessions.models import (
    RUNNING_SESSION_STATUSES,
    AgentExecution,
    AlertSession,
    QualityRating,
    ReviewStatus,
    ScoreStatus,
    SessionScore,
    SessionStatus,
    Stage,
)
from sessions.search import gathered

router = Router(tags=["sessions"])

MAX_BIGINT = 2**63 - 1

SortField = Literal[
    "created_at", "status", "alert_type", "author", "duration", "score", "quality_rating"
]
SORT_FIELDS = get_args(SortField)
# Orders an index walks, then by creation time, as _sorted sorts (sessions.models.session).
INDEX_ORDERED = {"created_at", "status", "alert_type", "author"}
ScoringFilter = Literal["scored", "not_scored", "scoring_in_progress", "scoring_failed"]
SCORING_FILTERS = {
    "scored": Q(_latest_score_status=ScoreStatus.COMPLETED),
    "not_scored": Q(_latest_score_status__isnull=True),
    "scoring_in_progress": Q(
        _latest_score_status__in=[ScoreStatus.PENDING, ScoreStatus.IN_PROGRESS]
    ),
    "scoring_failed": Q(
        _latest_score_status__in=[ScoreStatus.FAILED, ScoreStatus.TIMED_OUT, ScoreStatus.CANCELLED]
    ),
}


def _session(session_id: UUID) -> AlertSession:
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        raise ApiRejected(NOT_FOUND, 404)
    return session


# Beyond any real list; keeps the SQL OFFSET within a bigint.
MAX_PAGE = 10_000_000


def _page_number(value: str | None, default: int, maximum: int = MAX_PAGE) -> int:
    """TARSy replaces an invalid page or page_size with the default, silently."""
    try:
        number = int(value or "")
    except ValueError:
        return default
    if number < 1 or number > maximum:
        return default
    return number


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _enum(name: str, values: list[str], allowed: list[str]) -> list[str]:
    if unknown := sorted(set(values) - set(allowed)):
        raise ApiRejected(
            f"validation error on field '{name}': unknown value {', '.join(unknown)}; "
            f"allowed: {', '.join(allowed)}"
        )
    return values


def _date(name: str, value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        moment = None
    try:
        # The database keeps UTC: a time that does not fit once moved there is invalid.
        moment = moment.astimezone(UTC) if moment and moment.tzinfo else None
    except OverflowError:
        moment = None
    if moment is None:
        raise ApiRejected(
            f"validation error on field '{name}': {value[:60]!r} is not an RFC 3339 time "
            "(e.g. 2026-02-25T14:30:00Z)"
        )
    return moment


@router.get(
    "/sessions",
    response={200: schemas.SessionList, **ERRORS},
    summary="List sessions",
)
def session_list(
    request: HttpRequest,
    page: str | None = None,
    page_size: str | None = None,
    sort_by: SortField | None = None,
    sort_order: Literal["asc", "desc"] | None = None,
    status: str | None = None,
    alert_type: str | None = None,
    chain_id: str | None = None,
    assignee: str | None = None,
    scoring_status: ScoringFilter | None = None,
    review_status: str | None = None,
    quality_rating: Literal["accurate", "partially_accurate", "inaccurate"] | None = None,
    search: str | None = None,
    start_date: str | None = None,
    end_date: str | None = None,
) -> JsonResponse:
    """Newest first by default. ``status`` and ``review_status`` take comma-separated
    values; an invalid page or page_size falls back to its default; an invalid value of
    any other parameter is a 400 naming it. ``assignee=`` (empty) means unassigned."""
    number = _page_number(page, 1)
    size = _page_number(page_size, selectors.DEFAULT_PAGE_SIZE, selectors.MAX_PAGE_SIZE)
    filters = {
        "status": status,
        "alert_type": alert_type,
        "chain_id": chain_id,
        "scoring_status": scoring_status,
        "review_status": review_status,
        "quality_rating": quality_rating,
        "start_date": start_date,
        "end_date": end_date,
    }
    query = _search_query(search)
    sessions = _filtered(request, **filters)
    total = None
    # The search's matches are gathered once for the count, the page and a filtered count.
    with gathered(query) if query else nullcontext() as matches:
        if query:
            sessions, total = selectors.session_search(
                sessions,
                query,
                matches=matches,
                rows_needed=number * size,
                index_ordered=(sort_by or "created_at") in INDEX_ORDERED,
                filtered=any(filters.values()) or "assignee" in request.GET,
            )
        sessions = _sorted(sessions, sort_by or "created_at", sort_order or "desc")
        if total is None:
            total = sessions.count()
        rows = list(sessions[(number - 1) * size : number * size])
    matched = _matched_in_content(rows, search) if search else set()
    return respond(
        {
            "sessions": shapes.session_items(rows, matched_in_content=matched),
            "pagination": {
                "page": number,
                "page_size": size,
                "total_pages": math.ceil(total / size),
                "total_items": total,
            },
            "cost_estimation_enabled": shapes.cost_estimation_enabled(),
        }
    )


def _search_query(text: str | None) -> search.Query | None:
    if not (text := (text or "").strip()):
        return None
    try:
        return search.Query.parse(text)
    except search.SearchError as exc:
        raise ApiRejected(f"validation error on field 'search': {exc}") from None


def _filtered(request: HttpRequest, **params: str | None) -> QuerySet[AlertSession]:
    sessions = selectors.session_list(
        statuses=_enum("status", _csv(params["status"]), SessionStatus.values),
        alert_type=params["alert_type"] or "",
    )
    if params["chain_id"]:
        sessions = sessions.filter(chain_id=params["chain_id"])
    if "assignee" in request.GET:
        sessions = sessions.filter(assignee=request.GET["assignee"])
    if reviews := _enum("review_status", _csv(params["review_status"]), ReviewStatus.values):
        sessions = sessions.filter(review_status__in=reviews)
    if rating := params["quality_rating"]:
        _enum("quality_rating", [rating], QualityRating.values)
        sessions = sessions.filter(quality_rating=rating)
    if scoring := params["scoring_status"]:
        _enum("scoring_status", [scoring], list(SCORING_FILTERS))
        sessions = sessions.annotate(
            _latest_score_status=Subquery(
                SessionScore.objects.filter(session=OuterRef("pk")).values("status")[:1]
            )
        ).filter(SCORING_FILTERS[scoring])
    start = _date("start_date", params["start_date"])
    end = _date("end_date", params["end_date"])
    if start:
        sessions = sessions.filter(created_at__gte=start)
    if end:
        sessions = sessions.filter(created_at__lt=end)
    return sessions


def _sorted(sessions: QuerySet[AlertSession], sort_by: str, order: str) -> QuerySet[AlertSession]:
    _enum("sort_by", [sort_by], list(SORT_FIELDS))
    _enum("sort_order", [order], ["asc", "desc"])
    if sort_by == "duration":
        sessions = sessions.annotate(
            _sort=ExpressionWrapper(
                F("completed_at") - F("started_at"), output_field=DurationField()
            )
        )
    elif sort_by == "score":
        sessions = sessions.annotate(
            _sort=Subquery(
                SessionScore.objects.filter(
                    session=OuterRef("pk"), status=ScoreStatus.COMPLETED
                ).values("total_score")[:1]
            )
        )
    else:
        sessions = sessions.annotate(_sort=F(sort_by))
    key = F("_sort").asc(nulls_last=True) if order == "asc" else F("_sort").desc(nulls_last=True)
    tie = "created_at" if order == "asc" else "-created_at"
    return sessions.order_by(key, tie, "id")


def _matched_in_content(rows: list[AlertSession], text: str) -> set:
    """Sessions the search found only in their timeline, not in the alert or analysis."""
    words = search.Query.parse(text).words
    texts = AlertSession.objects.filter(id__in=[r.id for r in rows]).values_list(
        "id", "alert_data", "final_analysis"
    )
    return {
        session_id
        for session_id, alert, analysis in texts
        if not all(word in f"{alert}\n{analysis}".lower() for word in words)
    }


@router.get("/sessions/active", response={200: schemas.ActiveSessions, 401: schemas.Error})
def sessions_active(request: HttpRequest) -> JsonResponse:
    """Running sessions (oldest start first) and the queue (in order)."""
    active = list(
        AlertSession.objects.filter(status__in=RUNNING_SESSION_STATUSES).order_by(
            "started_at", "created_at"
        )
    )
    queued = AlertSession.objects.filter(status=SessionStatus.PENDING).order_by("created_at", "id")
    current: dict = {}
    for stage in Stage.objects.filter(session__in=[s.id for s in active]).order_by("index", "id"):
        count, _ = current.get(stage.session_id, (0, None))
        current[stage.session_id] = (count + 1, str(stage.id))
    return respond(
        {
            "active": [
                {
                    **_overview(s),
                    "started_at": iso(s.started_at),
                    "current_stage_index": current.get(s.id, (None, None))[0],
                    "current_stage_id": current.get(s.id, (None, None))[1],
                }
                for s in active
            ],
            "queued": [
                {**_overview(s), "queue_position": position}
                for position, s in enumerate(queued, start=1)
            ],
        }
    )


def _overview(session: AlertSession) -> dict:
    return {
        "id": str(session.id),
        "alert_type": session.alert_type or None,
        "chain_id": session.chain_id or None,
        "status": session.status,
        "author": session.author or None,
        "created_at": iso(session.created_at),
    }


@router.get("/sessions/filter-options", response={200: schemas.FilterOptions, 401: schemas.Error})
def session_filter_options(request: HttpRequest) -> JsonResponse:
    def distinct(field: str) -> list[str]:
        values = AlertSession.objects.order_by(field).values_list(field, flat=True).distinct()
        return [v for v in values if v]

    return respond(
        {
            "alert_types": distinct("alert_type"),
            "chain_ids": distinct("chain_id"),
            "statuses": SessionStatus.values,
        }
    )


@router.get(
    "/sessions/{uuid:session_id}",
    response={200: schemas.SessionDetail, **NOT_FOUND_ERRORS},
    summary="A session with its stages and executions",
)
def session_detail(request: HttpRequest, session_id: UUID) -> JsonResponse:
    return respond(shapes.session_detail(_session(session_id)))


@router.get(
    "/sessions/{uuid:session_id}/summary",
    response={200: schemas.SessionSummary, **NOT_FOUND_ERRORS},
)
def session_summary(request: HttpRequest, session_id: UUID) -> JsonResponse:
    return respond(shapes.session_summary(_session(session_id)))


@router.get(
    "/sessions/{uuid:session_id}/status",
    response={200: schemas.SessionStatusOut, **NOT_FOUND_ERRORS},
    summary="Poll a session's status",
)
def session_status(request: HttpRequest, session_id: UUID) -> JsonResponse:
    session = _session(session_id)
    return respond(
        {
            "id": str(session.id),
            "status": session.status,
            "final_analysis": session.final_analysis or None,
            "executive_summary": session.executive_summary or None,
            "error_message": session.error_message or None,
        }
    )


@router.get(
    "/sessions/{uuid:session_id}/timeline",
    response={200: list[schemas.TimelineItem], **ERRORS},
    summary="A session's timeline, a page at a time",
)
def session_timeline(
    request: HttpRequest,
    session_id: UUID,
    limit: str | None = None,
    after: str | None = None,
) -> JsonResponse:
    """The session's timeline in order; ``[]`` for an unknown session (as TARSy).

    A bare array, as TARSy's, of at most ``limit`` items (default 500, at most 2,000):
    without parameters, the first page. ``after`` is the ``id`` of the last item a client
    has; the page then starts with the item that follows it. The ``Link`` header's
    ``rel="next"`` is the next page's URL, absent on the last page; ``X-Total-Count``
    is the number of items in the whole timeline. An invalid ``limit`` or ``after`` is
    a 400 naming it."""
    size = (
        selectors.TIMELINE_PAGE_SIZE
        if limit is None
        else _bounded_int("limit", limit, selectors.MAX_TIMELINE_PAGE_SIZE)
    )
    cursor = None if after is None else _bounded_int("after", after, MAX_BIGINT)
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        return respond([])
    try:
        page = selectors.session_timeline_page(session, after=cursor, limit=size)
    except selectors.UnknownTimelineItem:
        raise ApiRejected(
            f"validation error on field 'after': {cursor} is not the id of an item of this "
            "session's timeline (use the id of the last item of the previous page)"
        ) from None
    response = respond([shapes.timeline_item(e) for e in page.items])
    response["X-Total-Count"] = str(page.total)
    if page.more:
        query = urlencode({"limit": size, "after": page.items[-1].id})
        response["Link"] = f'<{request.build_absolute_uri(request.path)}?{query}>; rel="next"'
    return response


def _bounded_int(name: str, value: str, maximum: int) -> int:
    """A whole number from 1 to ``maximum``. Unlike the list's page numbers (which TARSy
    replaces silently), a wrong value is a 400: a client reading a timeline page by page
    would otherwise be handed the wrong page."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= maximum:
        raise ApiRejected(
            f"validation error on field '{name}': {value[:40]!r} is not a whole number "
            f"from 1 to {maximum}"
        )
    return int(text)


def _cancel_reason(request: HttpRequest) -> str:
    """The optional ``{"reason"}`` body: trimmed, at most 500 characters."""
    body = json_body(request, example='such as {"reason": "…"}, or no body') or {}
    only_fields(body, ("reason",))
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise ApiRejected("validation error on field 'reason': must be a string")
    reason = reason.strip()
    if len(reason) > services.CANCEL_REASON_LIMIT:
        raise ApiRejected(
            f"validation error on field 'reason': {len(reason)} characters; the limit is "
            f"{services.CANCEL_REASON_LIMIT}"
        )
    return reason


@router.post(
    "/sessions/{uuid:session_id}/cancel",
    response={200: schemas.CancelOut, **ERRORS, 404: schemas.Error, 409: schemas.Error},
    openapi_extra=request_body(schemas.CancelIn, required=False),
    summary="Cancel a session",
)
def session_cancel(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """A pending session is cancelled at once (TARSy answers 409 there); a running one
    becomes ``cancelling`` and its worker stops it within about a second; on an ended
    session, a chat answer being written is stopped. 409 otherwise."""
    session = _session(session_id)
    reason = _cancel_reason(request)
    try:
        status = services.session_cancel(
            session_id=session.id, by=request_author(request), reason=reason
        )
    except services.NotCancellable as exc:
        raise ApiRejected(f"session is not in a cancellable state: {exc}", 409) from None
    message = (
        "Session cancelled"
        if status == SessionStatus.CANCELLED
        else "Session cancellation requested"
    )
    return respond({"session_id": str(session.id), "message": message})


@router.post(
    "/sessions/{uuid:session_id}/executions/{int:execution_id}/cancel",
    response={200: schemas.ExecutionCancelOut, **ERRORS, 404: schemas.Error, 409: schemas.Error},
    openapi_extra=request_body(schemas.CancelIn, required=False),
    summary="Cancel one agent (ours)",
)
def execution_cancel(request: HttpRequest, session_id: UUID, execution_id: int) -> JsonResponse:
    """Stop one agent (one of a parallel stage's, or a sub-agent); the session goes on
    and the stage's success policy decides."""
    if (
        execution_id > MAX_BIGINT
        or not AgentExecution.objects.filter(id=execution_id, session_id=session_id).exists()
    ):
        raise ApiRejected(NOT_FOUND, 404)
    reason = _cancel_reason(request)
    try:
        services.execution_cancel(
            session_id=session_id,
            execution_id=execution_id,
            by=request_author(request),
            reason=reason,
        )
    except services.NotCancellable as exc:
        raise ApiRejected(str(exc), 409) from None
    return respond(
        {
            "session_id": str(session_id),
            "execution_id": str(execution_id),
            "status": "cancelling",
            "message": "Agent cancellation requested",
        }
    )
