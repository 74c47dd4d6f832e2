"""Server-rendered pages; live updates arrive over the WebSocket (see consumers.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from config.loader import get_config
from sessions import selectors, services
from sessions.models import (
    AgentExecution,
    AlertSession,
    Stage,
    TimelineEvent,
    TimelineEventStatus,
)
from sessions.selectors.system import system_status
from sessions.selectors.timeline import TimelineItem, session_tree
from web import listing
from web.forms import AlertForm, resubmitted_alert
from web.listing import ListState
from web.views import HtmxHttpRequest


def session_list(request: HtmxHttpRequest) -> HttpResponse:
    """Active and queued panels, and the history with its filters, search, sort and page
    (all in the URL). An htmx request from the filters gets the live part alone."""
    state = ListState.from_query(request.GET)
    # Read the cursor before the rows: the socket replays everything after it, so the
    # page can only be ahead of the cursor, never behind.
    cursor = selectors.latest_event_id()
    context = {
        "state": state,
        "cursor": cursor,
        "panels": selectors.session_panels(),
        "history": listing.history_page(state),
        "history_columns": listing.COLUMNS,
    }
    if request.htmx and not request.htmx.history_restore_request:
        context["swapped"] = True
        response = render(request, "sessions/partials/_list_live.html", context)
        # The address bar gets the canonical URL (no empty fields) rather than the form's.
        response["HX-Push-Url"] = request.path + (f"?{state.params()}" if state.params() else "")
        return response
    config = get_config()
    context["filters"] = {
        "statuses": listing.status_choices(),
        "alert_types": sorted(config.alert_types),
        "chains": sorted(config.chains),
        "ranges": [
            ("", "Any time"),
            ("1h", "Last hour"),
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("30d", "Last 30 days"),
            ("custom", "Custom…"),
        ],
        "page_sizes": listing.PAGE_SIZES,
    }
    return render(request, "sessions/list.html", context)


@require_http_methods(["GET", "POST"])
def session_new(request: HttpRequest) -> HttpResponse:
    """The alert form; ``?from=<session id>`` pre-fills it with that session's alert
    (re-submit)."""
    initial, problem = resubmitted_alert(request.GET.get("from", ""))
    form = AlertForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            accepted = services.alert_accept(
                alert_type=form.alert.alert_type,
                alert_data=form.alert.data,
                chain_id=form.alert.chain_id,
                runbook=form.alert.runbook,
                runbook_url=form.alert.runbook_url,
                slack_message_fingerprint=form.alert.slack_message_fingerprint,
                mcp_selection=form.alert.mcp_selection,
                author=request.user.get_username(),
                fingerprint=form.alert.dedup_key,
                window=form.alert.dedup_window,
                force_new=form.alert.force_new,
                budget=form.alert.budget,
            )
        except services.SessionNotQueued as exc:
            form.add_error(None, f"{exc}; nothing was stored, submit it again.")
            return render(request, "sessions/new.html", {"form": form}, status=503)
        response = redirect("sessions:detail", session_id=accepted.session.id)
        if accepted.deduplicated:
            # The session page says the alert was recorded on it (``repeated``).
            response["Location"] += f"?repeated={accepted.repeat_count}"
        return response
    return render(
        request,
        "sessions/new.html",
        {"form": form, "resubmit_problem": problem, "resubmitting": bool(initial)},
        status=400 if form.errors else 200,
    )


def system(request: HttpRequest) -> HttpResponse:
    config = get_config()
    status = system_status(config)
    skills = [config.skills[name] for name in sorted(config.skills)]
    return render(request, "sessions/system.html", {"status": status, "skills": skills})


def session_detail(request: HttpRequest, session_id) -> HttpResponse:
    cursor = selectors.session_event_cursor(session_id)
    session = get_object_or_404(AlertSession, id=session_id)
    timeline = selectors.session_timeline_for_page(session)
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
            "injected_memories": session.injected_memories.select_related("memory").order_by(
                "-score"
            ),
            "learned_memories": session.memories.order_by("created_at"),
            "deep_link": deep_link(request, session),
            "repeated": _link_id(request.GET.get("repeated", "").strip()),
        },
    )


def _link_id(raw: str) -> int | None:
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else None


def deep_link(request: HttpRequest, session: AlertSession) -> dict[str, object]:
    """``?stage=<id>&event=<id>`` (TARSy's share links): what the page opens and focuses.
    A stage or item the session does not have is named in ``problem`` and ignored; one
    that may still come (the session is running) is kept: the page focuses it when it
    arrives. An item of another stage than the link says falls back to the stage."""
    stage_raw = request.GET.get("stage", "").strip()
    event_raw = request.GET.get("event", "").strip()
    link: dict[str, object] = {"stage": None, "event": None, "problem": ""}
    if not stage_raw and not event_raw:
        return link
    problems = []
    may_come = not session.is_terminal
    stage_id = _link_id(stage_raw) if stage_raw else None
    if stage_raw and stage_id is None:
        problems.append("the link's stage is not a stage id")
    elif stage_id is not None:
        if Stage.objects.filter(session=session, id=stage_id).exists() or may_come:
            link["stage"] = stage_id
        else:
            problems.append("this session has no such stage")
    event_id = _link_id(event_raw) if event_raw else None
    if event_raw and event_id is None:
        problems.append("the link's item is not an item id")
    elif event_id is not None:
        event = TimelineEvent.objects.filter(id=event_id).values("session_id", "stage_id").first()
        if event is None and may_come:
            link["event"] = event_id
        elif event is None or event["session_id"] != session.id:
            problems.append("this session has no such item")
        elif link["stage"] is not None and event["stage_id"] != link["stage"]:
            problems.append("the item is not in the link's stage")
        else:
            link["event"] = event_id
            if link["stage"] is None:
                link["stage"] = event["stage_id"]
    if problems:
        shown = "the stage" if link["stage"] is not None else "the session"
        link["problem"] = (
            f"This link could not be followed in full: {'; '.join(problems)}. Showing {shown}."
        )
    return link


BODY_PREVIEW_CHARS = 4000


def item_body(request: HttpRequest, item_id: int) -> HttpResponse:
    """A timeline item's body, loaded when its tool result is opened: the first
    ``BODY_PREVIEW_CHARS`` characters, or all of it with ``?all=1``."""
    item = get_object_or_404(TimelineEvent.objects.only("id", "content"), id=item_id)
    show_all = request.GET.get("all") == "1"
    text = item.content if show_all else item.content[:BODY_PREVIEW_CHARS]
    return render(
        request,
        "sessions/partials/_item_body.html",
        {"item": item, "text": text, "cut": len(item.content) - len(text)},
    )


@require_POST
def session_cancel(request: HtmxHttpRequest, session_id) -> HttpResponse:
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
def execution_cancel(request: HtmxHttpRequest, session_id, execution_id: int) -> HttpResponse:
    get_object_or_404(AgentExecution, id=execution_id, session_id=session_id)
    try:
        services.execution_cancel(
            session_id=session_id, execution_id=execution_id, by=request.user.get_username()
        )
    except services.NotCancellable as exc:
        return _after_cancel(request, session_id, str(exc), status=409)
    return _after_cancel(request, session_id)


def _after_cancel(request: HtmxHttpRequest, session_id, problem: str = "", status: int = 200):
    """htmx: nothing to swap, the live socket shows what happens; a plain form: back to
    the session page."""
    if request.htmx:
        return HttpResponse(problem, status=status)
    return redirect("sessions:detail", session_id=session_id)
