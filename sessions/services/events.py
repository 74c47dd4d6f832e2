"""The event log's one writer, and the lock that serializes a transaction across processes."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from sessions import wakeup
from sessions.models import AlertSession, SessionEvent, SessionEventType

# Locks the session's row until commit and queues a wake-up for every relay (PostgreSQL
# delivers a NOTIFY at commit, and only if the transaction commits).
_LOCK_AND_NOTIFY = (
    f"SELECT pg_notify('{wakeup.CHANNEL}', '') FROM {AlertSession._meta.db_table} "
    "WHERE id = %s FOR NO KEY UPDATE"
)


def event_publish(
    *,
    session_id: Any,
    type: SessionEventType,
    payload: dict[str, Any],
    transient: bool = False,
    timeline_event_id: int | None = None,
) -> SessionEvent:
    """Append an event to the log, in the caller's transaction.

    A session's events become visible in the order of their ids: the session's row is
    locked before the id is drawn and stays locked until commit, so a later event of the
    same session can neither draw a smaller id nor commit first. (PostgreSQL hands ids
    out at insert, not at commit; without the lock a relay could see event 12 of a
    session before its event 11. SQLite's single writer orders everything already.)
    Relays deliver each session's events in that order without waiting on other
    sessions' transactions.
    """
    payload = {
        "type": str(type),
        "session_id": str(session_id),
        "timestamp": timezone.now().isoformat(),
        **payload,
    }
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(_LOCK_AND_NOTIFY, [session_id])
        else:
            transaction.on_commit(wakeup.nudge)
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
