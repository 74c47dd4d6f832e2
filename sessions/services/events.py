"""The event log's one writer, and the lock that serializes a transaction across processes."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from sessions.models import AlertSession, SessionEvent, SessionEventType


def event_publish(
    *,
    session_id: Any,
    type: SessionEventType,
    payload: dict[str, Any],
    transient: bool = False,
    timeline_event_id: int | None = None,
) -> SessionEvent:
    payload = {
        "type": str(type),
        "session_id": str(session_id),
        "timestamp": timezone.now().isoformat(),
        **payload,
    }
    return SessionEvent.objects.create(
        session_id=session_id,
        type=type,
        payload=payload,
        transient=transient,
        timeline_event_id=timeline_event_id,
    )


def publish_session_status(session_id: Any) -> None:
    session = AlertSession.objects.only("status", "error_message").get(id=session_id)
    event_publish(
        session_id=session_id,
        type=SessionEventType.SESSION_STATUS,
        payload={"status": session.status, "error_message": session.error_message},
    )


def serialize_transaction(name: str) -> None:
    """Inside ``transaction.atomic()``: wait for any other transaction serialized on
    ``name``. SQLite needs nothing: TARSy begins every transaction IMMEDIATE, which takes
    the database's write lock up front (tarsy_site/settings.py)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])
