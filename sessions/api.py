"""REST API under /api/v1 (compatible with TARSy's)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from agents import runbooks
from agents.config import get_config
from sessions import search, selectors, services
from sessions.auth import api_error, api_view
from sessions.intake import ALLOWED_FIELDS, AlertRejected, read_json_body, validate_alert
from sessions.models import (
    AgentExecution,
    AlertSession,
    QualityRating,
    ReviewStatus,
    SessionStatus,
    TimelineEvent,
)
from sessions.relay import relay_health
from sessions.scoring_selectors import NOT_SCORED, score_summaries, score_summary
from sessions.supervision import cluster_silence_limit

_VERSION = metadata.version("tarsy")


@api_view
@require_POST
def alert_create(request: HttpRequest) -> JsonResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    length = int(request.headers.get("Content-Length") or 0)
    if length > limit:
        return api_error(f"request body is {length} bytes; the limit is {limit} bytes", 413)
    try:
        raw = request.body  # a chunked body has no Content-Length: Django measures it here
    except RequestDataTooBig:
        return api_error(f"request body is over the limit of {limit} bytes", 413)
    try:
        body = read_json_body(raw)
        alert = validate_alert(
            data=body.get("data"),
            alert_type=body.get("alert_type"),
            runbook=body.get("runbook"),
            mcp=body.get("mcp"),
            slack_message_fingerprint=body.get("slack_message_fingerprint"),
            unknown_fields=set(body) - set(ALLOWED_FIELDS),
        )
    except AlertRejected as rejected:
        return api_error(str(rejected), rejected.status, **rejected.extra)
    try:
        session = services.session_create(
            alert_type=alert.alert_type,
            alert_data=alert.data,
            chain_id=alert.chain_id,
            runbook=alert.runbook,
            runbook_url=alert.runbook_url,
            slack_message_fingerprint=alert.slack_message_fingerprint,
            mcp_selection=alert.mcp_selection,
            author=request.user.get_username(),
        )
    except services.SessionNotQueued as exc:
        return api_error(f"{exc}; nothing was stored, send the alert again", 503)
    return JsonResponse({"session_id": str(session.id), "status": "queued"}, status=202)


@api_view
@require_GET
def runbook_list(request: HttpRequest) -> JsonResponse:
    """TARSy's shape: a bare array of the runbook URLs under ``system.runbooks.repo_url``,
    ``[]`` when none is configured or GitHub cannot be listed."""
    return JsonResponse(runbooks.list_runbooks(get_config()), safe=False)


@api_view
@require_GET
def system_mcp_servers(request: HttpRequest) -> JsonResponse:
    """TARSy's shape: each configured server's last health check (workers list every
    server's tools every ``TARSY_MCP_HEALTH_INTERVAL`` seconds)."""
    servers = selectors.mcp_servers_health(list(get_config().mcp_servers))
    return JsonResponse({"servers": servers})


@api_view
@require_POST
def session_cancel(request: HttpRequest, session_id) -> JsonResponse:
    """TARSy's route. A pending session is cancelled at once; a running one becomes
    ``cancelling`` and its worker stops it within about a second. 409 once it has ended."""
    session = get_object_or_404(AlertSession, id=session_id)
    try:
        reason = _cancel_reason(request)
        status = services.session_cancel(
            session_id=session.id, by=request.user.get_username(), reason=reason
        )
    except AlertRejected as rejected:
        return api_error(str(rejected), rejected.status)
    except services.NotCancellable as exc:
        return api_error(str(exc), 409)
    return JsonResponse(
        {
            "session_id": str(session.id),
            "status": status,
            "message": "Session cancelled"
            if status == SessionStatus.CANCELLED
            else "Session cancellation requested",
        }
    )


@api_view
@require_POST
def execution_cancel(request: HttpRequest, session_id, execution_id: int) -> JsonResponse:
    """Stop one agent — one of a parallel stage's, or a sub-agent; the session goes on and
    the stage's success policy decides."""
    get_object_or_404(AgentExecution, id=execution_id, session_id=session_id)
    try:
        reason = _cancel_reason(request)
        services.execution_cancel(
            session_id=session_id,
            execution_id=execution_id,
            by=request.user.get_username(),
            reason=reason,
        )
    except AlertRejected as rejected:
        return api_error(str(rejected), rejected.status)
    except services.NotCancellable as exc:
        return api_error(str(exc), 409)
    return JsonResponse(
        {
            "session_id": str(session_id),
            "execution_id": execution_id,
            "status": "cancelling",
            "message": "Agent cancellation requested",
        }
    )


def _cancel_reason(request: HttpRequest) -> str:
    """The optional ``{"reason"}`` body: trimmed, at most 500 characters."""
    if not request.body.strip():
        return ""
    body = read_json_body(request.body)
    unknown = set(body) - {"reason"}
    if unknown:
        raise AlertRejected(f"unknown field(s): {', '.join(sorted(unknown))}; allowed: reason")
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise AlertRejected("'reason' must be a string")
    reason = reason.strip()
    if len(reason) > services.CANCEL_REASON_LIMIT:
        raise AlertRejected(
            f"'reason' is {len(reason)} characters; the limit is {services.CANCEL_REASON_LIMIT}"
        )
    return reason


def _list_score(summary: dict[str, Any]) -> dict[str, Any]:
    """A list item carries the latest score and the scoring status, not the score id."""
    return {"latest_score": summary["latest_score"], "scoring_status": summary["scoring_status"]}


def session_json(session: AlertSession) -> dict[str, Any]:
    return {
        "session_id": str(session.id),
        "alert_type": session.alert_type,
        "chain_id": session.chain_id,
        "status": session.status,
        "author": session.author,
        "created_at": session.created_at.isoformat(),
        "started_at": session.started_at.isoformat() if session.started_at else None,
        "completed_at": session.completed_at.isoformat() if session.completed_at else None,
        "duration_seconds": session.duration_seconds,
        "error_message": session.error_message,
        "executive_summary": session.executive_summary,
        "executive_summary_error": session.executive_summary_error,
        "cancelled_by": session.cancelled_by or None,
        "cancel_reason": session.cancel_reason or None,
        # The review (TARSy's fields; null while the investigation runs or when unset).
        "review_status": session.review_status or None,
        "assignee": session.assignee or None,
        "quality_rating": session.quality_rating or None,
        "action_taken": session.action_taken or None,
        "investigation_feedback": session.investigation_feedback or None,
        "feedback_edited": bool(session.feedback_edited_at),
        "feedback_edited_by": session.feedback_edited_by or None,
        "feedback_edited_at": _iso(session.feedback_edited_at),
    }


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def timeline_json(event: TimelineEvent) -> dict[str, Any]:
    return services.timeline_payload(event)


def _review_filters(params) -> dict[str, Any]:
    """``review_status`` and ``quality_rating`` (comma-separated) and ``assignee``
    (``assignee=`` with no value: unassigned), as ORM filters."""
    filters: dict[str, Any] = {}
    for name, allowed in (
        ("review_status", ReviewStatus.values),
        ("quality_rating", QualityRating.values),
    ):
        values = [v for v in params.get(name, "").split(",") if v]
        if unknown := sorted(set(values) - set(allowed)):
            raise ValueError(f"unknown {name} {', '.join(unknown)}; allowed: {', '.join(allowed)}")
        if values:
            filters[f"{name}__in"] = values
    if "assignee" in params:
        filters["assignee"] = params["assignee"]
    return filters


def _positive_int(value: str | None, default: int, name: str, maximum: int | None = None) -> int:
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if number < 1 or (maximum and number > maximum):
        raise ValueError(f"{name} must be between 1 and {maximum or 'any'}, got {number}")
    return number


@api_view
@require_GET
def session_list(request: HttpRequest) -> JsonResponse:
    try:
        page = _positive_int(request.GET.get("page"), 1, "page")
        page_size = _positive_int(
            request.GET.get("page_size"),
            selectors.DEFAULT_PAGE_SIZE,
            "page_size",
            selectors.MAX_PAGE_SIZE,
        )
    except ValueError as exc:
        return api_error(str(exc), 400)
    statuses = [s for s in request.GET.get("status", "").split(",") if s]
    unknown = set(statuses) - set(SessionStatus.values)
    if unknown:
        return api_error(
            f"unknown status {', '.join(sorted(unknown))}; allowed: {', '.join(SessionStatus.values)}",
            400,
        )
    try:
        review = _review_filters(request.GET)
    except ValueError as exc:
        return api_error(str(exc), 400)
    query = None
    if text := request.GET.get("search", "").strip():
        try:
            query = search.Query.parse(text)
        except search.SearchError as exc:
            return api_error(f"search: {exc}", 400)
    sessions = selectors.session_list(
        statuses=statuses, alert_type=request.GET.get("alert_type", ""), query=query
    ).filter(**review)
    result = selectors.session_page(sessions, page=page, page_size=page_size)
    rows = list(result.object_list)
    scores = score_summaries(s.id for s in rows)
    return JsonResponse(
        {
            "sessions": [
                {**session_json(s), **_list_score(scores.get(s.id, NOT_SCORED))} for s in rows
            ],
            "pagination": {
                "page": result.number,
                "page_size": page_size,
                "total": result.paginator.count,
                "total_pages": result.paginator.num_pages,
            },
        }
    )


@api_view
@require_GET
def session_detail(request: HttpRequest, session_id) -> JsonResponse:
    session = get_object_or_404(AlertSession, id=session_id)
    data = session_json(session)
    data.update(score_summary(session.id))
    data.update(
        alert_data=session.alert_data,
        runbook=session.runbook,
        runbook_url=session.runbook_url or None,
        slack_message_fingerprint=session.slack_message_fingerprint or None,
        mcp_selection=session.mcp_selection,
        final_analysis=session.final_analysis,
        usage=selectors.session_usage(session),
        stages=[
            {
                "stage_id": stage.id,
                "name": stage.name,
                "index": stage.index,
                "stage_type": stage.stage_type,
                "parallel_type": stage.parallel_type or None,
                "success_policy": stage.success_policy or None,
                "expected_agent_count": stage.expected_agent_count,
                "status": stage.status,
                "executions": [
                    {
                        "execution_id": execution.id,
                        "agent_name": execution.agent_name,
                        "agent_index": execution.agent_index,
                        "parent_execution_id": execution.parent_execution_id,
                        "task": execution.task,
                        "status": execution.status,
                        "error_message": execution.error_message,
                        "llm_provider": execution.llm_provider,
                        "llm_backend": execution.llm_backend,
                        "model_name": execution.model_name,
                        "iterations": execution.iterations,
                    }
                    for execution in stage.executions.all()
                ],
            }
            for stage in session.stages.prefetch_related("executions")
        ],
    )
    return JsonResponse(data)


@api_view
@require_GET
def session_timeline(request: HttpRequest, session_id) -> JsonResponse:
    session = get_object_or_404(AlertSession, id=session_id)
    return JsonResponse(
        {
            "session_id": str(session.id),
            "status": session.status,
            "events": [timeline_json(e) for e in selectors.session_timeline(session)],
        }
    )


@login_not_required
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """TARSy's shape: ``{status: healthy|degraded|unhealthy, version, checks: {name:
    {status, message}}}``. 503 only when the database (or the configuration) is broken;
    work not being picked up is ``degraded`` with 200, so a load balancer keeps the web
    process while an operator gets told."""
    checks: dict[str, dict[str, Any]] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = {"status": "healthy"}
        get_config()
        checks["config"] = {"status": "healthy"}
    except DatabaseError as exc:
        checks["database"] = {"status": "unhealthy", "message": str(exc)}
        return _health(checks, "unhealthy", 503)
    except ValueError as exc:
        checks["config"] = {"status": "unhealthy", "message": str(exc)}
        return _health(checks, "unhealthy", 503)
    checks["worker_pool"] = _worker_pool_check()
    checks["queue"] = _queue_check()
    relay_ok, relay_message = relay_health()
    checks["relay"] = {"status": "healthy" if relay_ok else "degraded", "message": relay_message}
    degraded = any(check["status"] != "healthy" for check in checks.values())
    return _health(checks, "degraded" if degraded else "healthy", 200)


def _health(checks: dict[str, dict[str, Any]], status: str, code: int) -> JsonResponse:
    return JsonResponse({"status": status, "version": _VERSION, "checks": checks}, status=code)


def _worker_pool_check() -> dict[str, Any]:
    within = cluster_silence_limit()
    clusters = selectors.live_worker_clusters(within_seconds=within)
    if not clusters:
        return {
            "status": "degraded",
            "message": f"no worker cluster has reported in the last {within:g} s: "
            "start one with 'manage.py qcluster'",
        }
    workers = sum(cluster.workers for cluster in clusters)
    return {"status": "healthy", "message": f"{len(clusters)} cluster(s), {workers} worker(s)"}


def _queue_check() -> dict[str, Any]:
    state = selectors.queue_state()
    check: dict[str, Any] = {
        "status": "healthy",
        "pending": state.pending,
        "running": state.running,
        "oldest_pending_seconds": state.oldest_pending_seconds,
    }
    limit = settings.TARSY_MAX_CONCURRENT_SESSIONS
    at_limit = bool(limit) and state.running >= limit
    waited = state.oldest_pending_seconds or 0
    if waited > settings.TARSY_PENDING_RECOVERY_AFTER and not at_limit:
        check["status"] = "degraded"
        check["message"] = (
            f"the oldest pending session has waited {waited:.0f} s with room to run: "
            "work is not being picked up"
        )
    elif at_limit:
        check["message"] = f"at TARSY_MAX_CONCURRENT_SESSIONS ({limit}); new sessions wait"
    return check
