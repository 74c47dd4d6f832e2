"""Server-rendered pages; live updates arrive over the WebSocket (see consumers.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from agents.config import get_config
from sessions import selectors, services
from sessions.forms import AlertForm
from sessions.live import TimelineItem, session_tree
from sessions.models import AgentExecution, AlertSession, TimelineEventStatus


def session_list(request: HttpRequest) -> HttpResponse:
    # Read the cursor before the rows: the socket replays everything after it, so the
    # page can only be ahead of the cursor, never behind.
    cursor = selectors.latest_event_id()
    sessions = selectors.session_page(selectors.session_list(), page=1, page_size=50)
    return render(request, "sessions/list.html", {"sessions": sessions, "cursor": cursor})


@require_http_methods(["GET", "POST"])
def session_new(request: HttpRequest) -> HttpResponse:
    form = AlertForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            session = services.session_create(
                alert_type=form.alert.alert_type,
                alert_data=form.alert.data,
                chain_id=form.alert.chain_id,
                runbook=form.alert.runbook,
                mcp_selection=form.alert.mcp_selection,
                author=request.user.get_username(),
            )
        except services.SessionNotQueued as exc:
            form.add_error(None, f"{exc}; nothing was stored, submit it again.")
            return render(request, "sessions/new.html", {"form": form}, status=503)
        return redirect("sessions:detail", session_id=session.id)
    return render(request, "sessions/new.html", {"form": form}, status=400 if form.errors else 200)


def system(request: HttpRequest) -> HttpResponse:
    servers = selectors.mcp_servers_health(list(get_config().mcp_servers))
    return render(request, "sessions/system.html", {"servers": servers})


def session_detail(request: HttpRequest, session_id) -> HttpResponse:
    cursor = selectors.latest_event_id()
    session = get_object_or_404(AlertSession, id=session_id)
    timeline = selectors.session_timeline(session)
    streaming = [e.id for e in timeline if e.status == TimelineEventStatus.STREAMING]
    streamed = selectors.streamed_text(streaming, up_to_event_id=cursor)
    items = [TimelineItem.from_model(e, streamed.get(e.id, "")) for e in timeline]
    executions = selectors.session_executions(session)
    stages, loose_items = session_tree(selectors.session_stages(session), executions, items)
    return render(
        request,
        "sessions/detail.html",
        {
            "session": session,
            "stages": stages,
            "loose_items": loose_items,
            "cursor": cursor,
            "usage": selectors.session_usage(session),
            "uses_demo_provider": any(e.llm_backend == "scripted" for e in executions),
        },
    )


@require_POST
def session_cancel(request: HttpRequest, session_id) -> HttpResponse:
    session = get_object_or_404(AlertSession, id=session_id)
    reason = request.POST.get("reason", "").strip()[: services.CANCEL_REASON_LIMIT]
    try:
        services.session_cancel(
            session_id=session.id, by=request.user.get_username(), reason=reason
        )
    except services.NotCancellable as exc:
        return _after_cancel(request, session.id, str(exc), status=409)
    return _after_cancel(request, session.id)


@require_POST
def execution_cancel(request: HttpRequest, session_id, execution_id: int) -> HttpResponse:
    get_object_or_404(AgentExecution, id=execution_id, session_id=session_id)
    try:
        services.execution_cancel(
            session_id=session_id, execution_id=execution_id, by=request.user.get_username()
        )
    except services.NotCancellable as exc:
        return _after_cancel(request, session_id, str(exc), status=409)
    return _after_cancel(request, session_id)


def _after_cancel(request: HttpRequest, session_id, problem: str = "", status: int = 200):
    """htmx: nothing to swap, the live socket shows what happens; a plain form: back to
    the session page."""
    if request.htmx:
        return HttpResponse(problem, status=status)
    return redirect("sessions:detail", session_id=session_id)
