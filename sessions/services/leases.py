"""Who may write about a running session: the holder of its lease."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions.models import AlertSession


@dataclass(frozen=True)
class Lease:
    """The right to write about one session, held by the worker that claimed it."""

    session_id: Any
    token: uuid.UUID


class LeaseLost(Exception):
    """This worker no longer holds its session: it was reaped, timed out or cancelled.
    Whatever it was about to write is dropped; it must stop."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(f"the lease on session {lease.session_id} is no longer held")
        self.lease = lease


def hold(lease: Lease) -> None:
    """Renew ``lease`` inside the current transaction, or raise ``LeaseLost``.

    The UPDATE also locks the session row until commit (on PostgreSQL; SQLite's write
    lock covers the whole database), so the reaper cannot take the session between this
    check and the write it guards. It doubles as the session's heartbeat.
    """
    held = AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token).update(
        heartbeat_at=timezone.now()
    )
    if held != 1:
        raise LeaseLost(lease)


def session_heartbeat(*, lease: Lease) -> None:
    with transaction.atomic():
        hold(lease)


def session_lease_status(*, lease: Lease) -> str | None:
    """The session's status while ``lease`` is held; None once it is lost."""
    return (
        AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token)
        .values_list("status", flat=True)
        .first()
    )
