"""A session's life: created with its task, claimed by one worker, ended once."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from masking import mask_alert, mask_text
from sessions import search
from sessions.models import (
    RUNNING_SESSION_STATUSES,
    AgentExecution,
    AlertSession,
    ChatMessageStatus,
    ExecutionStatus,
    SessionSearch,
    SessionStatus,
    Stage,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services import followups, reflection, scoring
from sessions.services.chat import chat_answer_cancel
from sessions.services.events import publish_session_status, serialize_transaction
from sessions.services.leases import Lease, hold
from sessions.services.queue import session_enqueue, sessions_dispatch_waiting
from sessions.services.records import (
    close_open_items,
    execution_close,
    item_create,
    publish_execution_status,
    search_text_update,
    stage_close,
)
from sessions.services.steering import steering_undelivered_tell


def session_create(
    *,
    alert_type: str,
    alert_data: str,
    chain_id: str,
    author: str,
    runbook: str = "",
    runbook_url: str = "",
    slack_message_fingerprint: str = "",
    mcp_selection: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None,
) -> AlertSession:
    """Store an accepted alert together with its queued investigation, or neither.

    With the ORM broker the task row is written in this transaction, so a failure to
    enqueue rolls the session back and the client is told; nothing is left pending for
    ever.
    """
    with transaction.atomic():
        session = AlertSession.objects.create(
            alert_type=alert_type,
            alert_data=alert_data,
            chain_id=chain_id,
            author=author,
            runbook=runbook,
            runbook_url=runbook_url,
            slack_message_fingerprint=slack_message_fingerprint,
            mcp_selection=mcp_selection,
            budget=budget,
            enqueued_at=timezone.now(),
        )
        SessionSearch.objects.create(session=session, body=search.document(session, []))
        publish_session_status(session.id)
        session_enqueue(session_id=session.id)
    return session


@dataclass(frozen=True)
class Claim:
    outcome: str  # "claimed", "deferred" (no room yet) or "skipped" (not pending)
    lease: Lease | None = None


def session_claim(*, session_id: Any, worker_id: str) -> Claim:
    """Take a pending session for this worker, if there is room under the global limit.

    Idempotent: django-q2 delivers a task again after a killed worker, and recovery may
    queue a second task for the same session; only one claim can succeed. The running
    sessions are counted in the same serialized transaction as the claim, so the limit
    holds across any number of clusters.
    """
    limit = settings.TARSY_MAX_CONCURRENT_SESSIONS
    now = timezone.now()
    with transaction.atomic():
        serialize_transaction("tarsy-session-claim")
        pending = AlertSession.objects.filter(id=session_id, status=SessionStatus.PENDING)
        if (
            limit
            and AlertSession.objects.filter(status__in=RUNNING_SESSION_STATUSES).count() >= limit
        ):
            # No task stays queued for it: whoever frees a slot queues it again.
            if pending.update(enqueued_at=None) != 1:
                return Claim("skipped")
            return Claim("deferred")
        token = uuid.uuid4()
        claimed = pending.update(
            status=SessionStatus.IN_PROGRESS,
            worker_id=worker_id,
            # A session queued again when its worker was stopped keeps its first start.
            started_at=Coalesce("started_at", Value(now)),
            heartbeat_at=now,
            lease_token=token,
            enqueued_at=None,
        )
        if claimed != 1:
            # Another worker got there first, or this task was a duplicate.
            return Claim("skipped")
        publish_session_status(session_id)
        followups.session_started(session_id)
    return Claim("claimed", Lease(session_id, token))


def session_defer(*, session_id: Any) -> bool:
    """Leave a pending session waiting, with no task, for a worker with room: the one it
    was handed to runs as many as ``TARSY_WORKER_SESSIONS`` already. It is queued again
    like one over the global limit: when a running session ends (``session_end``), or by
    the next recovery pass (``sessions_dispatch_waiting``). False when it is not pending
    any more (a duplicate task, a cancel)."""
    with transaction.atomic():
        serialize_transaction("tarsy-session-claim")
        return (
            AlertSession.objects.filter(id=session_id, status=SessionStatus.PENDING).update(
                enqueued_at=None
            )
            == 1
        )


def session_end(
    *,
    lease: Lease,
    status: SessionStatus,
    final_analysis: str = "",
    error_message: str = "",
    explain: bool = False,
    executive_summary: str = "",
    executive_summary_error: str = "",
    close_reason: str = "",
) -> None:
    """End a session: close whatever it left open (saying ``close_reason``, else the error),
    explain why (an ``error`` item) when asked, set the terminal status and give the lease
    up, in one transaction."""
    # An error may quote a server, a provider or an exception's text about either.
    error_message = mask_text(error_message)
    executive_summary_error = mask_text(executive_summary_error)
    with transaction.atomic():
        # Serialized with claims, so a claim deferred for want of room cannot miss the
        # slot this frees (sessions_dispatch_waiting below).
        serialize_transaction("tarsy-session-claim")
        hold(lease)
        if status != SessionStatus.COMPLETED:
            close_open_work(lease.session_id, _work_status(status), close_reason or error_message)
        if explain:
            item_create(
                session_id=lease.session_id,
                execution=None,
                sequence_number=None,
                event_type=TimelineEventType.ERROR,
                content=error_message,
                metadata={},
                status=TimelineEventStatus.FAILED,
            )
        steering_undelivered_tell(lease.session_id)
        AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token).update(
            status=status,
            final_analysis=final_analysis,
            error_message=error_message,
            executive_summary=executive_summary,
            executive_summary_error=executive_summary_error,
            completed_at=timezone.now(),
            lease_token=None,
        )
        search_text_update(lease.session_id)
        followups.session_ended(lease.session_id, status)
        publish_session_status(lease.session_id)
        # A slot is free: a session waiting for one gets its task now.
        transaction.on_commit(sessions_dispatch_waiting)


CANCEL_REASON_LIMIT = 500  # characters; TARSy users know this cap


class NotCancellable(Exception):
    """The session (or execution) has already ended; the message says how."""


def session_cancel(*, session_id: Any, by: str, reason: str = "") -> SessionStatus:
    """Stop a session: a pending one is cancelled at once and never runs; a running one
    becomes ``cancelling`` and its worker, wherever it runs, ends it ``cancelled`` within
    ``TARSY_LEASE_CHECK_INTERVAL``. Who and why are recorded now, not by the worker. On
    an ended session, the chat answer being written, if any, is stopped instead."""
    reason = mask_alert(reason)  # people paste what they saw; it is shown and sent to Slack
    with transaction.atomic():
        serialize_transaction("tarsy-session-claim")
        now = timezone.now()
        if AlertSession.objects.filter(id=session_id, status=SessionStatus.PENDING).update(
            status=SessionStatus.CANCELLED,
            cancelled_by=by,
            cancel_reason=reason,
            completed_at=now,
            enqueued_at=None,
        ):
            followups.session_ended(session_id, SessionStatus.CANCELLED)
            publish_session_status(session_id)
            return SessionStatus.CANCELLED
        if AlertSession.objects.filter(id=session_id, status=SessionStatus.IN_PROGRESS).update(
            status=SessionStatus.CANCELLING, cancelled_by=by, cancel_reason=reason
        ):
            publish_session_status(session_id)
            return SessionStatus.CANCELLING
        status = AlertSession.objects.filter(id=session_id).values_list("status", flat=True).first()
    if status == SessionStatus.CANCELLING:
        raise NotCancellable("the session is already being cancelled")
    if chat_answer_cancel(session_id=session_id, by=by):
        # An ended session's running chat answer is what a cancel stops (as in TARSy).
        return SessionStatus.CANCELLING
    raise NotCancellable(f"the session has already ended ({status})")


def execution_cancel(
    *, session_id: Any, execution_id: int, by: str, reason: str = ""
) -> AgentExecution:
    """Ask the worker to stop one agent (a parallel agent or a sub-agent, of the session
    or of a chat answer); the rest goes on, and the stage's success policy decides."""
    reason = mask_alert(reason)
    updated = AgentExecution.objects.filter(
        Q(session__status=SessionStatus.IN_PROGRESS)
        | Q(stage__chat_message__status=ChatMessageStatus.RUNNING),
        id=execution_id,
        session_id=session_id,
        status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE],
        cancel_requested_at__isnull=True,
    ).update(cancel_requested_at=timezone.now(), cancel_reason=_attribution(by, reason))
    execution = AgentExecution.objects.get(id=execution_id, session_id=session_id)
    if not updated:
        if execution.cancel_requested_at is not None:
            raise NotCancellable("this agent is already being cancelled")
        raise NotCancellable(f"this agent has already ended ({execution.status})")
    publish_execution_status(execution, cancel_requested=True)
    return execution


def _attribution(by: str, reason: str) -> str:
    return f"Cancelled by {by}: {reason}" if reason else f"Cancelled by {by}"


def _work_status(status: SessionStatus) -> ExecutionStatus:
    return {
        SessionStatus.TIMED_OUT: ExecutionStatus.TIMED_OUT,
        SessionStatus.CANCELLED: ExecutionStatus.CANCELLED,
    }.get(status, ExecutionStatus.FAILED)


def close_open_work(session_id: Any, status: ExecutionStatus, reason: str) -> None:
    """Streaming items keep the text they had streamed and end failed (or cancelled);
    active executions and stages end with ``status``."""
    for execution in AgentExecution.objects.filter(
        session_id=session_id, status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
    ):
        execution_close(execution, status=status, error_message=reason)
    close_open_items(session_id=session_id, status=status, reason=reason)  # session-level ones
    for stage in Stage.objects.filter(
        session_id=session_id, status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
    ):
        stage_close(stage, status, reason)


def sessions_time_out_orphans(*, threshold_seconds: float) -> list[Any]:
    """Time out running sessions whose worker stopped heart-beating (killed, stalled).

    Decide first: one conditional UPDATE per session, with the staleness test inside its
    WHERE, takes the session's lease; only a session it took gets the consequences.
    """
    cutoff = timezone.now() - timedelta(seconds=threshold_seconds)
    stale = Q(status__in=RUNNING_SESSION_STATUSES) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    )
    reaper = f"reaper@{socket.gethostname()}:{os.getpid()}"
    reaped = []
    for session_id, status, worker in AlertSession.objects.filter(stale).values_list(
        "id", "status", "worker_id"
    ):
        lease = Lease(session_id, uuid.uuid4())
        with transaction.atomic():
            taken = AlertSession.objects.filter(stale, id=session_id, status=status).update(
                lease_token=lease.token, worker_id=reaper
            )
            if taken != 1:
                continue  # its worker came back, or another reaper got there first
            if status == SessionStatus.CANCELLING:
                end, message = SessionStatus.CANCELLED, "cancelled (its worker had stopped)"
            else:
                end = SessionStatus.TIMED_OUT
                message = (
                    f"The worker {worker or '?'} stopped reporting progress for more than "
                    f"{threshold_seconds:g} s; the session was marked timed out."
                )
            session_end(lease=lease, status=end, error_message=message, explain=True)
        reaped.append(session_id)
    # Scorings run by workers too; the same staleness ends theirs (sessions untouched).
    scoring.scores_time_out_orphans(threshold_seconds=threshold_seconds)
    reflection.feedback_reflections_time_out_orphans(threshold_seconds=threshold_seconds)
    return reaped
