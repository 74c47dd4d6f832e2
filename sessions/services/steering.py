"""Mid-run steering: an SRE's note to a running investigation.

A note is taken while the session is pending or running (not once it is being cancelled
or has ended), masked like the alert, rate-limited per session and author, and shown at
once as a session-level ``steering`` item. Each running agent of the session reads the
notes it has not had yet before each model call (``steering_notes_take``, by id cursor)
and gets them as user messages; an agent that starts later gets all of them in its first
call. Each delivery is recorded (``SteeringDelivery``), so the note's row says who wrote
it, when, and which agents it reached.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from masking import mask_alert
from masking.bounded import unstorable
from sessions.models import (
    AgentExecution,
    AlertSession,
    SessionStatus,
    SteeringDelivery,
    SteeringNote,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services.events import serialize_transaction
from sessions.services.leases import Lease, hold
from sessions.services.records import item_complete, item_create

STEERING_TEXT_LIMIT = 4_000  # characters
# At most STEERING_RATE notes per author and session within STEERING_RATE_WINDOW seconds.
STEERING_RATE = 10
STEERING_RATE_WINDOW = 60
# A note is taken before the first model call too: the first agent gets it then.
STEERABLE_STATUSES = (SessionStatus.PENDING, SessionStatus.IN_PROGRESS)


class SteeringRejected(Exception):
    """The note was not taken; ``status`` is the HTTP status that says why, and
    ``retry_after`` (seconds) is set when the rate limit refused it."""

    def __init__(self, message: str, status: int = 400, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def steering_text_check(text: Any) -> str:
    """The note's text, trimmed, or ``SteeringRejected`` naming what is wrong with it."""
    if text is not None and not isinstance(text, str):
        raise SteeringRejected("validation error on field 'text': must be a string")
    text = (text or "").strip()
    if not text:
        raise SteeringRejected("validation error on field 'text': the note is empty")
    if len(text) > STEERING_TEXT_LIMIT:
        raise SteeringRejected(
            f"validation error on field 'text': {len(text):,} characters; the limit is "
            f"{STEERING_TEXT_LIMIT:,}"
        )
    if problem := unstorable(text):
        raise SteeringRejected(
            f"validation error on field 'text': it contains {problem}; send valid Unicode "
            "text without NUL"
        )
    return text


def steering_note_add(*, session_id: Any, text: Any, author: str) -> SteeringNote:
    """Store a note and show it on the timeline, or raise ``SteeringRejected`` (400 bad
    text, 404 no such session, 409 not running, 429 rate limit)."""
    text = steering_text_check(text)
    masked = mask_alert(text)  # people paste logs and configuration into notes
    with transaction.atomic():
        serialize_transaction(f"tarsy-steering:{session_id}")
        # Locked as the session's worker locks it (leases.hold): the note cannot land
        # after the session ended, nor take an item's place in the timeline.
        session = AlertSession.objects.select_for_update().filter(id=session_id).first()
        if session is None:
            raise SteeringRejected("session not found", 404)
        if session.status not in STEERABLE_STATUSES:
            raise SteeringRejected(
                f"session is {session.status}: a steering note is taken only while the "
                "session is pending or in progress",
                409,
            )
        now = timezone.now()
        _check_rate(session, author, now)
        note = SteeringNote.objects.create(session=session, author=author, text=masked)
        note.item = item_create(
            session_id=session.id,
            execution=None,
            sequence_number=None,
            event_type=TimelineEventType.STEERING,
            content=masked,
            metadata={
                "author": author,
                "note_id": note.id,
                "created_at": note.created_at.isoformat(),
            },
            status=TimelineEventStatus.COMPLETED,
        )
        note.save(update_fields=["item"])
    return note


def _check_rate(session: AlertSession, author: str, now: Any) -> None:
    since = now - timedelta(seconds=STEERING_RATE_WINDOW)
    recent = list(
        SteeringNote.objects.filter(session=session, author=author, created_at__gt=since)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:STEERING_RATE]
    )
    if len(recent) < STEERING_RATE:
        return
    oldest = recent[-1]
    wait = max(1, math.ceil((oldest - since).total_seconds()))
    raise SteeringRejected(
        f"too many steering notes: at most {STEERING_RATE} per {STEERING_RATE_WINDOW} s per "
        f"session and author; retry in {wait} s",
        429,
        retry_after=wait,
    )


def steering_notes_take(
    *, lease: Lease, execution: AgentExecution, after: int
) -> list[SteeringNote]:
    """The session's notes after id ``after`` (oldest first), recorded as delivered to
    ``execution``: its next model call carries them. One query when there are none."""
    notes = list(
        SteeringNote.objects.filter(session_id=lease.session_id, id__gt=after).order_by("id")
    )
    if not notes:
        return notes
    with transaction.atomic():
        hold(lease)
        SteeringDelivery.objects.bulk_create(
            [SteeringDelivery(note=note, execution=execution) for note in notes],
            ignore_conflicts=True,
        )
        _show_reached([note for note in notes if note.item_id is not None])
    return notes


def _show_reached(notes: list[SteeringNote]) -> None:
    """Each note's timeline item says which agents it has reached so far, updated live."""
    reached: dict[int, set[str]] = {}
    for note_id, name in SteeringDelivery.objects.filter(note__in=notes).values_list(
        "note_id", "execution__agent_name"
    ):
        reached.setdefault(note_id, set()).add(name)
    items = TimelineEvent.objects.in_bulk([note.item_id for note in notes])
    for note in notes:
        item = items.get(note.item_id)
        if item is None:
            continue
        item_complete(
            item,
            content=item.content,
            status=TimelineEventStatus.COMPLETED,
            event_type=None,
            metadata={"delivered_to": sorted(reached.get(note.id, ()))},
        )


def steering_undelivered_tell(session_id: Any) -> None:
    """Inside the transaction that ends the session (which refuses notes from then on):
    a note no agent got, added after the last model call, is said so on the timeline, so
    that no one believes it was acted on."""
    undelivered = SteeringNote.objects.filter(
        session_id=session_id, deliveries__isnull=True
    ).order_by("id")
    for note in undelivered:
        item_create(
            session_id=session_id,
            execution=None,
            sequence_number=None,
            event_type=TimelineEventType.WARNING,
            content=f"Guidance from {note.author or 'an SRE'} reached no agent: the "
            "investigation made no model call after it was added.",
            metadata={"source": "steering", "note_id": note.id},
            status=TimelineEventStatus.COMPLETED,
        )
