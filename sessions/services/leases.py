"""Who may write about a running session: the holder of its lease.

A session's lease lives on its row while it runs. Work on an ended session is fenced the
same way by a lease on its own row: a follow-up chat answer on its ``ChatMessage``
(``ChatLease``), a scoring on its ``SessionScore`` (``ScoreLease``), the feedback
Reflector on its ``FeedbackReflection`` (``FeedbackLease``). Every writer in
``records`` takes any of them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from sessions.models import (
    AgentExecution,
    AlertSession,
    ChatMessage,
    ExecutionStatus,
    FeedbackReflection,
    ScoreStatus,
    SessionScore,
)


@dataclass(frozen=True)
class Lease:
    """The right to write about one session, held by the worker that claimed it."""

    session_id: Any
    token: uuid.UUID

    def holder(self) -> QuerySet:
        """The row carrying this lease, while it is still held."""
        return AlertSession.objects.filter(id=self.session_id, lease_token=self.token)


@dataclass(frozen=True)
class ChatLease(Lease):
    """The right to write about an ended session while answering one of its chat
    messages: the session gave its own lease up when it ended, so the message holds one."""

    message_id: Any

    def holder(self) -> QuerySet:
        return ChatMessage.objects.filter(
            id=self.message_id, session_id=self.session_id, lease_token=self.token
        )


@dataclass(frozen=True)
class ScoreLease(Lease):
    """The right to write a scoring of an ended session (its stage, items and calls)."""

    score_id: Any

    def holder(self) -> QuerySet:
        return SessionScore.objects.filter(
            id=self.score_id,
            session_id=self.session_id,
            lease_token=self.token,
            status=ScoreStatus.IN_PROGRESS,
        )


@dataclass(frozen=True)
class FeedbackLease(Lease):
    """The right to write the feedback Reflector's run on an ended session (its
    execution, items and call), held on its ``FeedbackReflection`` row."""

    reflection_id: Any

    def holder(self) -> QuerySet:
        return FeedbackReflection.objects.filter(
            id=self.reflection_id,
            session_id=self.session_id,
            lease_token=self.token,
            status=ScoreStatus.IN_PROGRESS,
        )


class LeaseLost(Exception):
    """This worker no longer holds its session: it was reaped, timed out or cancelled.
    Whatever it was about to write is dropped; it must stop."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(f"the lease on session {lease.session_id} is no longer held")
        self.lease = lease


def hold(lease: Lease) -> None:
    """Renew ``lease`` inside the current transaction, or raise ``LeaseLost``.

    The UPDATE also locks the leased row until commit (on PostgreSQL; SQLite's write
    lock covers the whole database), so the reaper cannot take the session (or chat
    message) between this check and the write it guards. It doubles as the heartbeat.
    """
    if lease.holder().update(heartbeat_at=timezone.now()) != 1:
        raise LeaseLost(lease)


def session_heartbeat(*, lease: Lease) -> None:
    with transaction.atomic():
        hold(lease)


@dataclass(frozen=True)
class LeaseState:
    # in_progress (a chat message: running), or cancelling once a cancel was asked for
    status: str
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
    if isinstance(lease, ChatLease):
        row = lease.holder().values_list("status", "cancelled_by", "stage_id").first()
        if row is None:
            return None
        status, cancelled_by, stage_id = row
        return LeaseState(
            status, cancelled_by, cancelled_executions=_cancelled_executions(stage_id=stage_id)
        )
    if isinstance(lease, ScoreLease | FeedbackLease):
        return LeaseState(ScoreStatus.IN_PROGRESS) if lease.holder().exists() else None
    row = (
        AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token)
        .values_list("status", "cancelled_by", "cancel_reason")
        .first()
    )
    if row is None:
        return None
    return LeaseState(*row, cancelled_executions=_cancelled_executions(session_id=lease.session_id))


def leases_status(*, leases: list[Lease]) -> dict[Lease, LeaseState | None]:
    """``session_lease_status`` of many leases at once: two queries for the sessions' own
    leases, however many (a worker's lease keepers check together), and one lease at a
    time for chat answers and scorings."""
    states: dict[Lease, LeaseState | None] = {}
    plain = [lease for lease in leases if type(lease) is Lease]
    for lease in leases:
        if type(lease) is not Lease:
            states[lease] = session_lease_status(lease=lease)
    if not plain:
        return states
    ids = {lease.session_id for lease in plain}
    rows = {
        (str(session_id), token): (status, cancelled_by, reason)
        for session_id, token, status, cancelled_by, reason in AlertSession.objects.filter(
            id__in=ids
        ).values_list("id", "lease_token", "status", "cancelled_by", "cancel_reason")
    }
    cancelled: dict[str, list[tuple[int, str]]] = {}
    for session_id, execution_id, reason in AgentExecution.objects.filter(
        session_id__in=ids,
        cancel_requested_at__isnull=False,
        status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE],
    ).values_list("session_id", "id", "cancel_reason"):
        cancelled.setdefault(str(session_id), []).append((execution_id, reason))
    for lease in plain:
        row = rows.get((str(lease.session_id), lease.token))
        states[lease] = (
            None
            if row is None
            else LeaseState(
                *row, cancelled_executions=tuple(cancelled.get(str(lease.session_id), ()))
            )
        )
    return states


def _cancelled_executions(**where: Any) -> tuple[tuple[int, str], ...]:
    """Executions someone asked to stop that still run: (id, attribution)."""
    return tuple(
        AgentExecution.objects.filter(
            **where,
            cancel_requested_at__isnull=False,
            status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE],
        ).values_list("id", "cancel_reason")
    )


@dataclass(frozen=True)
class Interruption:
    """Why a worker must end the work it runs now, and how: ``failed`` with the reason,
    or back to the queue (``requeue``) to run again from the start."""

    reason: str
    requeue: bool = False
