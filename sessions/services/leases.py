"""Who may write about a running session: the holder of its lease."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions.models import AgentExecution, AlertSession, ExecutionStatus


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


@dataclass(frozen=True)
class LeaseState:
    status: str  # in_progress, or cancelling once a cancel was asked for
    cancelled_by: str = ""
    cancel_reason: str = ""
    # Executions someone asked to stop, still running: (execution id, attribution).
    cancelled_executions: tuple[tuple[int, str], ...] = ()

    @property
    def cancel_attribution(self) -> str:
        who = f"Cancelled by {self.cancelled_by or 'someone'}"
        return f"{who}: {self.cancel_reason}" if self.cancel_reason else who


def session_lease_status(*, lease: Lease) -> LeaseState | None:
    """What the holder of ``lease`` must act on; None once the lease is lost."""
    row = (
        AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token)
        .values_list("status", "cancelled_by", "cancel_reason")
        .first()
    )
    if row is None:
        return None
    cancelled = AgentExecution.objects.filter(
        session_id=lease.session_id,
        cancel_requested_at__isnull=False,
        status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE],
    ).values_list("id", "cancel_reason")
    return LeaseState(*row, cancelled_executions=tuple(cancelled))
