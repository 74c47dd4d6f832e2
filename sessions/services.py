"""Every write to the domain goes through here.

Each state change and the ``SessionEvent`` describing it are written in one
transaction, so the event log never claims something that did not commit and never
misses something that did. ``event_publish`` is the only writer of the log.

**Leases.** A worker that claims a session gets a ``Lease``; every write it makes about
that session (items, chunks, messages, interactions, statuses) first renews the lease
inside the same transaction (``_hold``) and raises ``LeaseLost`` when someone else has
taken the session over: the reaper (a stalled worker), a timeout, a cancel. So a worker
that wakes up after losing its session writes nothing, however long it slept. The reaper
decides with one conditional UPDATE that takes the lease, then writes the consequences
under it, in the same transaction.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django_q.tasks import async_task

from sessions.models import (
    RUNNING_SESSION_STATUSES,
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    LLMInteraction,
    MCPInteraction,
    Message,
    SessionEvent,
    SessionEventType,
    SessionStatus,
    Stage,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
    WorkerCluster,
)

logger = logging.getLogger(__name__)


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


def _publish_session_status(session_id: Any) -> None:
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


# --- leases ----------------------------------------------------------------------------------


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


def _hold(lease: Lease) -> None:
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
        _hold(lease)


def session_lease_status(*, lease: Lease) -> str | None:
    """The session's status while ``lease`` is held; None once it is lost."""
    return (
        AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token)
        .values_list("status", flat=True)
        .first()
    )


# --- sessions and the queue ------------------------------------------------------------------


class SessionNotQueued(Exception):
    """The investigation could not be queued; the session was not stored either."""


def session_create(
    *, alert_type: str, alert_data: str, chain_id: str, author: str, runbook: str = ""
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
            enqueued_at=timezone.now(),
        )
        _publish_session_status(session.id)
        session_enqueue(session_id=session.id)
    return session


def session_enqueue(*, session_id: Any) -> None:
    """Queue the task that runs a session (by dotted path: services do not import tasks)."""
    try:
        async_task(
            "sessions.tasks.run_session",
            str(session_id),
            task_name=f"session-{session_id}",
            group="sessions",
        )
    except Exception as exc:
        raise SessionNotQueued(f"the investigation could not be queued ({exc})") from exc


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
            started_at=now,
            heartbeat_at=now,
            lease_token=token,
            enqueued_at=None,
        )
        if claimed != 1:
            # Another worker got there first, or this task was a duplicate.
            return Claim("skipped")
        _publish_session_status(session_id)
    return Claim("claimed", Lease(session_id, token))


def session_end(
    *,
    lease: Lease,
    status: SessionStatus,
    final_analysis: str = "",
    error_message: str = "",
    explain: bool = False,
) -> None:
    """End a session: close whatever it left open, explain why (an ``error`` item) when
    asked, set the terminal status and give the lease up, in one transaction."""
    with transaction.atomic():
        # Serialized with claims, so a claim deferred for want of room cannot miss the
        # slot this frees (sessions_dispatch_waiting below).
        serialize_transaction("tarsy-session-claim")
        _hold(lease)
        if status != SessionStatus.COMPLETED:
            _close_open_work(lease.session_id, _work_status(status), error_message)
        if explain:
            _item_create(
                session_id=lease.session_id,
                execution=None,
                sequence_number=None,
                event_type=TimelineEventType.ERROR,
                content=error_message,
                metadata={},
                status=TimelineEventStatus.FAILED,
            )
        AlertSession.objects.filter(id=lease.session_id, lease_token=lease.token).update(
            status=status,
            final_analysis=final_analysis,
            error_message=error_message,
            completed_at=timezone.now(),
            lease_token=None,
        )
        _publish_session_status(lease.session_id)
        # A slot is free: a session waiting for one gets its task now.
        transaction.on_commit(sessions_dispatch_waiting)


def _work_status(status: SessionStatus) -> ExecutionStatus:
    return {
        SessionStatus.TIMED_OUT: ExecutionStatus.TIMED_OUT,
        SessionStatus.CANCELLED: ExecutionStatus.CANCELLED,
    }.get(status, ExecutionStatus.FAILED)


def _close_open_work(session_id: Any, status: ExecutionStatus, reason: str) -> None:
    """Streaming items keep the text they had streamed (rebuilt from their chunks) and end
    failed; active executions and stages end with ``status``."""
    open_items = list(
        TimelineEvent.objects.filter(session_id=session_id, status=TimelineEventStatus.STREAMING)
    )
    if open_items:
        from sessions.selectors import latest_event_id, streamed_text

        streamed = streamed_text([i.id for i in open_items], up_to_event_id=latest_event_id())
        for item in open_items:
            _item_complete(
                item,
                content=streamed.get(item.id) or f"Interrupted: {reason}",
                status=TimelineEventStatus.FAILED,
                event_type=None,
                metadata={"interrupted": reason},
            )
    AgentExecution.objects.filter(
        session_id=session_id, status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
    ).update(status=status, error_message=reason, completed_at=timezone.now())
    for stage in Stage.objects.filter(
        session_id=session_id, status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
    ):
        _stage_finish(stage, status, reason)


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
    return reaped


def sessions_requeue_lost(*, older_than_seconds: float) -> list[Any]:
    """Queue again the pending sessions whose task no worker has started in time: its
    row was pulled by a cluster that died (django-q2 re-delivers those only after its
    ``retry``, 40+ minutes), or the broker lost it. A duplicate task is harmless."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    lost = Q(status=SessionStatus.PENDING, enqueued_at__lt=cutoff)
    requeued = []
    for session_id in AlertSession.objects.filter(lost).values_list("id", flat=True):
        with transaction.atomic():
            # Conditional, so that two clusters' recoveries queue one task, not two.
            if AlertSession.objects.filter(lost, id=session_id).update(enqueued_at=timezone.now()):
                session_enqueue(session_id=session_id)
                requeued.append(session_id)
    return requeued


def sessions_dispatch_waiting() -> list[Any]:
    """Queue the oldest sessions that wait, with no task, for room under
    ``TARSY_MAX_CONCURRENT_SESSIONS`` — as many as there is room for now."""
    limit = settings.TARSY_MAX_CONCURRENT_SESSIONS
    waiting = AlertSession.objects.filter(status=SessionStatus.PENDING, enqueued_at__isnull=True)
    candidates = waiting.order_by("created_at").values_list("id", flat=True)
    if limit:
        running = AlertSession.objects.filter(status__in=RUNNING_SESSION_STATUSES).count()
        candidates = candidates[: max(0, limit - running)]
    dispatched = []
    for session_id in list(candidates):
        with transaction.atomic():
            if waiting.filter(id=session_id).update(enqueued_at=timezone.now()):
                session_enqueue(session_id=session_id)
                dispatched.append(session_id)
    return dispatched


def worker_cluster_beat(*, cluster_id: uuid.UUID, host: str, pid: int, workers: int) -> None:
    WorkerCluster.objects.update_or_create(
        id=cluster_id,
        defaults={"host": host, "pid": pid, "workers": workers, "heartbeat_at": timezone.now()},
    )


def worker_cluster_stopped(*, cluster_id: uuid.UUID) -> None:
    WorkerCluster.objects.filter(id=cluster_id).delete()


def worker_clusters_bury(*, silent_for_seconds: float) -> list[Any]:
    """Forget clusters that stopped beating, and queue again every pending session whose
    task one of them may have pulled before it died (those queued before its last beat).

    This finds a dead cluster's stranded sessions about as soon as it is known dead,
    instead of ``TARSY_PENDING_RECOVERY_AFTER`` after they were queued. A session whose
    task was in fact still queued gets a duplicate task, which is harmless.
    """
    cutoff = timezone.now() - timedelta(seconds=silent_for_seconds)
    requeued = []
    for cluster_id, last_beat in WorkerCluster.objects.filter(heartbeat_at__lt=cutoff).values_list(
        "id", "heartbeat_at"
    ):
        with transaction.atomic():
            # Decide first: only the recovery that deletes the row requeues.
            if not WorkerCluster.objects.filter(id=cluster_id, heartbeat_at__lt=cutoff).delete()[0]:
                continue
            stranded = Q(status=SessionStatus.PENDING, enqueued_at__lte=last_beat)
            for session_id in AlertSession.objects.filter(stranded).values_list("id", flat=True):
                if AlertSession.objects.filter(stranded, id=session_id).update(
                    enqueued_at=timezone.now()
                ):
                    session_enqueue(session_id=session_id)
                    requeued.append(session_id)
    return requeued


# --- stages and executions --------------------------------------------------------------


def stage_start(*, lease: Lease, name: str, index: int) -> Stage:
    with transaction.atomic():
        _hold(lease)
        stage = Stage.objects.create(
            session_id=lease.session_id,
            name=name,
            index=index,
            status=ExecutionStatus.ACTIVE,
            started_at=timezone.now(),
        )
        _publish_stage_status(stage)
    return stage


def stage_finish(
    *, lease: Lease, stage: Stage, status: ExecutionStatus, error_message: str = ""
) -> Stage:
    with transaction.atomic():
        _hold(lease)
        _stage_finish(stage, status, error_message)
    return stage


def _stage_finish(stage: Stage, status: ExecutionStatus, error_message: str) -> None:
    stage.status = status
    stage.error_message = error_message
    stage.completed_at = timezone.now()
    stage.save(update_fields=["status", "error_message", "completed_at"])
    _publish_stage_status(stage)


def _publish_stage_status(stage: Stage) -> None:
    event_publish(
        session_id=stage.session_id,
        type=SessionEventType.STAGE_STATUS,
        payload={
            "stage_id": stage.id,
            "name": stage.name,
            "index": stage.index,
            "status": stage.status,
        },
    )


def execution_start(
    *,
    lease: Lease,
    stage: Stage,
    agent_name: str,
    agent_index: int,
    llm_backend: str,
    llm_provider: str,
    model_name: str,
) -> AgentExecution:
    with transaction.atomic():
        _hold(lease)
        return AgentExecution.objects.create(
            session_id=stage.session_id,
            stage=stage,
            agent_name=agent_name,
            agent_index=agent_index,
            status=ExecutionStatus.ACTIVE,
            llm_backend=llm_backend,
            llm_provider=llm_provider,
            model_name=model_name,
            started_at=timezone.now(),
        )


def execution_switch_provider(
    *,
    lease: Lease,
    execution: AgentExecution,
    llm_provider: str,
    llm_backend: str,
    model_name: str,
) -> AgentExecution:
    """Record a fallback; the first provider the execution ran on is kept."""
    if not execution.original_llm_provider:
        execution.original_llm_provider = execution.llm_provider
        execution.original_llm_backend = execution.llm_backend
        execution.original_model_name = execution.model_name
    execution.llm_provider = llm_provider
    execution.llm_backend = llm_backend
    execution.model_name = model_name
    with transaction.atomic():
        _hold(lease)
        execution.save(
            update_fields=[
                "llm_provider",
                "llm_backend",
                "model_name",
                "original_llm_provider",
                "original_llm_backend",
                "original_model_name",
            ]
        )
    return execution


def execution_finish(
    *,
    lease: Lease,
    execution: AgentExecution,
    status: ExecutionStatus,
    final_analysis: str = "",
    error_message: str = "",
    iterations: int = 0,
) -> AgentExecution:
    execution.status = status
    execution.final_analysis = final_analysis
    execution.error_message = error_message
    execution.iterations = iterations
    execution.completed_at = timezone.now()
    with transaction.atomic():
        _hold(lease)
        execution.save(
            update_fields=[
                "status",
                "final_analysis",
                "error_message",
                "iterations",
                "completed_at",
            ]
        )
    return execution


# --- timeline -----------------------------------------------------------------------------


def timeline_payload(event: TimelineEvent) -> dict[str, Any]:
    return {
        "event_id": event.id,
        "stage_id": event.stage_id,
        "execution_id": event.execution_id,
        "event_type": event.event_type,
        "status": event.status,
        "content": event.content,
        "metadata": event.metadata,
        "sequence_number": event.sequence_number,
        "created_at": event.created_at.isoformat(),
    }


def timeline_event_add(
    *,
    lease: Lease,
    event_type: TimelineEventType,
    content: str = "",
    metadata: dict[str, Any] | None = None,
    status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
    execution: AgentExecution | None = None,
    sequence_number: int | None = None,
) -> TimelineEvent:
    """Create a timeline item. ``status=streaming`` starts one that chunks will fill."""
    with transaction.atomic():
        _hold(lease)
        return _item_create(
            session_id=lease.session_id,
            execution=execution,
            sequence_number=sequence_number,
            event_type=event_type,
            content=content,
            metadata=metadata or {},
            status=status,
        )


def _item_create(
    *,
    session_id: Any,
    execution: AgentExecution | None,
    sequence_number: int | None,
    event_type: TimelineEventType,
    content: str,
    metadata: dict[str, Any],
    status: TimelineEventStatus,
) -> TimelineEvent:
    if sequence_number is None:
        last = (
            TimelineEvent.objects.filter(session_id=session_id, execution=execution)
            .order_by("-sequence_number")
            .values_list("sequence_number", flat=True)
            .first()
        )
        sequence_number = (last or 0) + 1
    event = TimelineEvent.objects.create(
        session_id=session_id,
        stage_id=execution.stage_id if execution else None,
        execution=execution,
        sequence_number=sequence_number,
        event_type=event_type,
        status=status,
        content=content,
        metadata=metadata,
    )
    event_publish(
        session_id=session_id,
        type=SessionEventType.TIMELINE_CREATED,
        payload=timeline_payload(event),
        timeline_event_id=event.id,
    )
    return event


def timeline_event_chunk(*, lease: Lease, event: TimelineEvent, delta: str) -> SessionEvent:
    """A piece of streamed text. Transient: the completed event carries the whole text."""
    with transaction.atomic():
        _hold(lease)
        return event_publish(
            session_id=event.session_id,
            type=SessionEventType.STREAM_CHUNK,
            payload={"event_id": event.id, "delta": delta},
            transient=True,
            timeline_event_id=event.id,
        )


def timeline_event_complete(
    *,
    lease: Lease,
    event: TimelineEvent,
    content: str,
    status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
    event_type: TimelineEventType | None = None,
    metadata: dict[str, Any] | None = None,
) -> TimelineEvent:
    """Finish an item; its full content replaces whatever was streamed."""
    with transaction.atomic():
        _hold(lease)
        return _item_complete(
            event, content=content, status=status, event_type=event_type, metadata=metadata
        )


def _item_complete(
    event: TimelineEvent,
    *,
    content: str,
    status: TimelineEventStatus,
    event_type: TimelineEventType | None,
    metadata: dict[str, Any] | None,
) -> TimelineEvent:
    event.content = content
    event.status = status
    if event_type is not None:
        # Streamed text only turns out to be the final analysis once the model
        # ends its turn without tool calls.
        event.event_type = event_type
    if metadata:
        event.metadata = {**event.metadata, **metadata}
    event.save(update_fields=["content", "status", "event_type", "metadata", "updated_at"])
    event_publish(
        session_id=event.session_id,
        type=SessionEventType.TIMELINE_COMPLETED,
        payload=timeline_payload(event),
        timeline_event_id=event.id,
    )
    return event


# --- conversation and interaction records ----------------------------------------------------


def message_create(
    *,
    lease: Lease,
    execution: AgentExecution,
    sequence_number: int,
    role: str,
    content: str,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str = "",
    tool_name: str = "",
) -> Message:
    with transaction.atomic():
        _hold(lease)
        return Message.objects.create(
            session_id=execution.session_id,
            execution=execution,
            sequence_number=sequence_number,
            role=role,
            content=content,
            tool_calls=tool_calls or [],
            tool_call_id=tool_call_id,
            tool_name=tool_name,
        )


def llm_interaction_create(
    *, lease: Lease, execution: AgentExecution, **fields: Any
) -> LLMInteraction:
    with transaction.atomic():
        _hold(lease)
        return LLMInteraction.objects.create(
            session_id=execution.session_id, execution=execution, **fields
        )


def mcp_interaction_create(
    *, lease: Lease, execution: AgentExecution, **fields: Any
) -> MCPInteraction:
    with transaction.atomic():
        _hold(lease)
        return MCPInteraction.objects.create(
            session_id=execution.session_id, execution=execution, **fields
        )


def transient_events_purge(*, older_than_seconds: float) -> int:
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    deleted, _ = SessionEvent.objects.filter(transient=True, created_at__lt=cutoff).delete()
    return deleted
