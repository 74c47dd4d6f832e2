"""The duplicate-alert cooldown: an accepted alert starts an investigation, or is recorded
on the session its fingerprint points to (sessions/dedup.py, ``defaults.dedup``).

The database decides a race: the fingerprint's row (unique) is read and written in the
transaction that creates the session, serialized per fingerprint (SQLite's IMMEDIATE
write lock; a PostgreSQL advisory lock, and the row lock of ``select_for_update``), so
of 50 identical alerts sent at once one creates the session and 49 find it. Each of them
is recorded: none is lost, none starts a second investigation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from sessions.models import (
    KEPT_REPEATS,
    TERMINAL_SESSION_STATUSES,
    AlertFingerprint,
    AlertRepeat,
    AlertSession,
    SessionRepeats,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services.events import serialize_transaction
from sessions.services.lifecycle import session_create
from sessions.services.records import item_complete, item_create
from sessions.services.slack import notify_on_repeat

# Tries when two first alerts of one fingerprint both insert its row (the unique index
# turns the second away; it then finds the first one's session).
ATTEMPTS = 3


@dataclass(frozen=True)
class AlertAccepted:
    session: AlertSession
    deduplicated: bool = False
    repeat_count: int = 0  # the session's repeats so far, this one included


def alert_accept(
    *,
    alert_type: str,
    alert_data: str,
    chain_id: str,
    author: str,
    fingerprint: str = "",
    window: float = 600.0,
    force_new: bool = False,
    **session: Any,
) -> AlertAccepted:
    """``session_create``, unless ``fingerprint`` (a hash; "" when the cooldown is off)
    points to a session pending, running, or ended less than ``window`` seconds ago: then
    the alert (``alert_data``, masked already) is recorded on that session. ``force_new``
    starts a new investigation anyway, which the fingerprint points to from then on."""
    create = {
        "alert_type": alert_type,
        "alert_data": alert_data,
        "chain_id": chain_id,
        "author": author,
        **session,
    }
    if not fingerprint:
        return AlertAccepted(session_create(**create))
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with transaction.atomic():
                return _accept(fingerprint, window, force_new, create)
        except IntegrityError:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _accept(
    fingerprint: str, window: float, force_new: bool, create: dict[str, Any]
) -> AlertAccepted:
    serialize_transaction(f"tarsy-alert-dedup:{fingerprint}")
    now = timezone.now()
    claim = AlertFingerprint.objects.select_for_update().filter(fingerprint=fingerprint).first()
    if claim is not None and not force_new:
        # Locked as the session's worker locks it (leases.hold), so a repeat's item and
        # the worker's items do not take the same place in the timeline.
        target = AlertSession.objects.select_for_update().filter(id=claim.session_id).first()
        if target is not None and _within(target, window, now):
            count = _record(target, create["alert_data"], create["author"], now)
            return AlertAccepted(target, deduplicated=True, repeat_count=count)
    created = session_create(**create)
    if claim is None:
        AlertFingerprint.objects.create(fingerprint=fingerprint, session=created)
    else:
        claim.session = created
        claim.save(update_fields=["session", "updated_at"])
    return AlertAccepted(created)


def _within(session: AlertSession, window: float, now: datetime) -> bool:
    if session.status not in TERMINAL_SESSION_STATUSES:
        return True  # pending or running
    ended = session.completed_at or session.created_at
    return now - ended <= timedelta(seconds=window)


def _record(session: AlertSession, alert_data: str, author: str, now: datetime) -> int:
    repeats = SessionRepeats.objects.select_for_update().filter(session=session).first()
    if repeats is None:
        repeats = SessionRepeats(session=session, count=0, first_at=now, last_at=now)
    repeats.count += 1
    repeats.last_at = now
    if repeats.count <= KEPT_REPEATS:
        AlertRepeat.objects.create(
            session=session,
            number=repeats.count,
            received_at=now,
            author=author,
            alert_data=alert_data,
        )
    content = f"Alert repeated \u00d7{repeats.count}"
    metadata = {
        "count": repeats.count,
        "first_at": repeats.first_at.isoformat(),
        "last_at": now.isoformat(),
        "kept": min(repeats.count, KEPT_REPEATS),
    }
    if repeats.item is None:
        repeats.item = item_create(
            session_id=session.id,
            execution=None,
            sequence_number=None,
            event_type=TimelineEventType.ALERT_REPEATED,
            content=content,
            metadata=metadata,
            status=TimelineEventStatus.COMPLETED,
        )
    else:
        item_complete(
            repeats.item,
            content=content,
            status=TimelineEventStatus.COMPLETED,
            event_type=None,
            metadata=metadata,
        )
    repeats.save()
    # Queued in this transaction: the reply exists exactly when the repeat is recorded.
    notify_on_repeat(session, repeats.count)
    return repeats.count
