"""Turns event-log entries into the HTML fragments the browser applies.

Each fragment is an element with an ``id`` that htmx swaps out of band. Fragments are
idempotent or monotonic, so replaying an event the page already reflects is harmless:
items are upserted (the page's small script appends them when they are new), stream
chunks only land in an item that is still streaming, and a completed item replaces
everything that was streamed into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape

from sessions.models import AlertSession, SessionEventType

SESSION_STATUS = SessionEventType.SESSION_STATUS
STREAM_CHUNK = SessionEventType.STREAM_CHUNK
TIMELINE_CREATED = SessionEventType.TIMELINE_CREATED
TIMELINE_COMPLETED = SessionEventType.TIMELINE_COMPLETED

TIMELINE_TYPES = (TIMELINE_CREATED, TIMELINE_COMPLETED)


@dataclass
class TimelineItem:
    """What the ``_timeline_item.html`` partial renders, from a row or an event payload."""

    id: int
    event_type: str
    status: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sequence_number: int = 0

    @classmethod
    def from_model(cls, event, streamed: str = "") -> TimelineItem:
        content = streamed if event.status == "streaming" else event.content
        return cls(
            event.id, event.event_type, event.status, content, event.metadata, event.sequence_number
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TimelineItem:
        return cls(
            payload["event_id"],
            payload["event_type"],
            payload["status"],
            payload.get("content", ""),
            payload.get("metadata") or {},
            payload.get("sequence_number", 0),
        )

    @property
    def is_streaming(self) -> bool:
        return self.status == "streaming"


def render_item(item: TimelineItem, *, live: bool = False) -> str:
    return render_to_string("sessions/partials/_timeline_item.html", {"item": item, "live": live})


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
        return (
            f'<span id="stream-{int(payload["event_id"])}" hx-swap-oob="beforeend">'
            f"{escape(payload.get('delta', ''))}</span>"
        )
    if kind == SESSION_STATUS and session is not None:
        return render_to_string(
            "sessions/partials/_session_header.html",
            {"session": session, "usage": usage, "live": True},
        )
    return ""  # stage.status and anything newer: nothing on the page shows it yet


def list_fragment(session: AlertSession) -> str:
    """The session's row for the session list page."""
    return render_to_string(
        "sessions/partials/_session_row.html", {"session": session, "live": True}
    )
