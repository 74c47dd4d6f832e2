"""Turns event-log entries into the HTML fragments the browser applies.

Each fragment is an element with an ``id`` that htmx swaps out of band. Fragments are
idempotent or monotonic, so replaying an event the page already reflects is harmless:
items are upserted (the page's small script appends them when they are new), stream
chunks only land in an item that is still streaming, and a completed item replaces
everything that was streamed into it.
"""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape

from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    SessionEventType,
    SessionStatus,
    Stage,
    StageType,
    TimelineEventType,
)
from sessions.selectors.scoring import attach_latest_scores
from sessions.selectors.session_rows import row_facts
from sessions.selectors.timeline import ExecutionNode, TimelineItem
from web.views.chat import chat_box_html

SESSION_STATUS = SessionEventType.SESSION_STATUS
STAGE_STATUS = SessionEventType.STAGE_STATUS
EXECUTION_STATUS = SessionEventType.EXECUTION_STATUS
STREAM_CHUNK = SessionEventType.STREAM_CHUNK
TIMELINE_CREATED = SessionEventType.TIMELINE_CREATED
TIMELINE_COMPLETED = SessionEventType.TIMELINE_COMPLETED

TIMELINE_TYPES = (TIMELINE_CREATED, TIMELINE_COMPLETED)


def cancellable(execution: AgentExecution) -> bool:
    """Whether the page offers to stop this agent alone: one of a parallel stage's agents
    or a sub-agent, still running, not already asked to stop."""
    return (
        execution.status in (ExecutionStatus.PENDING, ExecutionStatus.ACTIVE)
        and execution.cancel_requested_at is None
        and (execution.parent_execution_id is not None or bool(execution.stage.parallel_type))
    )


def render_item(item: TimelineItem, *, live: bool = False) -> str:
    context: dict[str, Any] = {"item": item, "live": live}
    if item.event_type == TimelineEventType.FINAL_ANALYSIS and item.stage_id:
        # A chat stage's final analysis is the answer to its question, and says so.
        context["stage"] = Stage.objects.filter(id=item.stage_id).only("stage_type").first()
    return render_to_string("sessions/partials/_timeline_item.html", context)


def stage_fragment(stage: Stage, *, created: bool) -> str:
    """A new stage's (empty) section, or the header of one the page already has. A chat
    stage starting or ending also changes what the chat box offers."""
    template = "_stage.html" if created else "_stage_header.html"
    html: str = render_to_string(
        f"sessions/partials/{template}",
        {"stage": stage, "executions": [], "items": [], "live": True},
    )
    if stage.stage_type == StageType.CHAT:
        html += chat_box_html(stage.session, live=True)
    return html


def execution_fragment(execution: AgentExecution, *, created: bool) -> str:
    """A new agent's (empty) card, or the header of one the page already has."""
    template = "_execution.html" if created else "_execution_header.html"
    return render_to_string(
        f"sessions/partials/{template}",
        {"node": ExecutionNode(execution), "execution": execution, "live": True},
    )


def stream_fragment(item_id: int, text: str, *, whole: bool = False) -> str:
    """Streamed text for an item's open span: appended, or (``whole``) all of it."""
    swap = "innerHTML" if whole else "beforeend"
    return f'<span id="stream-{item_id}" hx-swap-oob="{swap}">{escape(text)}</span>'


def cursor_fragment(event_id: int) -> str:
    return f'<div id="live-cursor" hidden data-last-event-id="{event_id}"></div>'


def session_fragments(
    event: dict[str, Any], session: AlertSession | None, usage: dict[str, Any] | None = None
) -> str:
    """Fragments for the session page."""
    kind = event["type"]
    payload = event["payload"]
    if kind in TIMELINE_TYPES:
        return render_item(TimelineItem.from_payload(payload), live=True)
    if kind == STREAM_CHUNK:
        return stream_fragment(int(payload["event_id"]), payload.get("delta", ""))
    if kind == SESSION_STATUS and session is not None:
        # The chat box opens when the session ends.
        # The answer (executive summary, final analysis) goes to the top when it ends.
        context = {"session": session, "usage": usage, "live": True}
        return (
            render_to_string("sessions/partials/_session_header.html", context)
            + render_to_string("sessions/partials/_session_answer.html", context)
            + chat_box_html(session, live=True)
            + _steer_box(session)
        )
    if kind == SessionEventType.REVIEW_STATUS:
        return review_fragment(event["session_id"])
    return ""  # stage and execution events are rendered from their rows (consumers.py)


def _steer_box(session: AlertSession) -> str:
    """The steering form goes once the session is no longer pending or running (left
    alone otherwise: re-rendering it would drop what someone is typing)."""
    if session.status in (SessionStatus.PENDING, SessionStatus.IN_PROGRESS):
        return ""
    return render_to_string("sessions/partials/_steer.html", {"session": session, "live": True})


def review_fragment(session_id: Any) -> str:
    """The session page's review panel, as it is now (state, buttons, activity log)."""
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        return ""
    return render_to_string("sessions/partials/_review.html", {"session": session, "live": True})


def stage_progress_fragment(session: AlertSession) -> str:
    return render_to_string(
        "sessions/partials/_stage_progress.html", {"session": session, "live": True}
    )


def usage_fragment(usage: dict[str, Any]) -> str:
    return render_to_string(
        "sessions/partials/_session_usage.html", {"usage": usage, "live_usage": True}
    )


def budget_fragment(session: AlertSession) -> str:
    """The session page's budget meters (templates/sessions/partials/_budget.html)."""
    from web.templatetags.tarsy import budget_meters

    return render_to_string("sessions/partials/_budget.html", budget_meters(session, live=True))


def panels_fragment(panels) -> str:
    html = render_to_string(
        "sessions/partials/_active_panel.html", {"panels": panels, "live": True}
    )
    return html + render_to_string(
        "sessions/partials/_queued_panel.html", {"panels": panels, "live": True}
    )


def history_fragment(state, history, columns) -> str:
    """The list page's whole history section (count, rows, pages), replacing the page's."""
    return render_to_string(
        "sessions/partials/_history.html",
        {"state": state, "history": history, "history_columns": columns, "oob": True},
    )


def row_fragment(session: AlertSession, *, upsert: bool) -> str:
    """A history row for the list page. In a <template> of its own: a <tr> after the
    panels' <section>s would be dropped by the HTML parser; live.js unwraps it."""
    attach_latest_scores([session])
    row = render_to_string(
        "sessions/partials/_session_row.html",
        {
            "session": session,
            "facts": row_facts([session.id]).get(session.id),
            "live": True,
            "upsert": upsert,
        },
    )
    return f"<template>{row}</template>"


def slack_fragment(session: AlertSession) -> str:
    """The session page's Slack line, after a message was posted or failed."""
    return render_to_string("sessions/partials/_slack.html", {"session": session, "live": True})
