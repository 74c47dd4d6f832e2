"""Every write to the domain goes through here.

Each state change and the ``SessionEvent`` describing it are written in one
transaction, so the event log never claims something that did not commit and never
misses something that did. ``event_publish`` is the only writer of the log.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_q.tasks import async_task

from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    LLMInteraction,
    MCPInteraction,
    Message,
    SessionEvent,
    SessionStatus,
    Stage,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)

logger = logging.getLogger(__name__)

SESSION_STATUS = "session.status"
STAGE_STATUS = "stage.status"
TIMELINE_CREATED = "timeline_event.created"
TIMELINE_COMPLETED = "timeline_event.completed"
STREAM_CHUNK = "stream.chunk"


def event_publish(
    *,
    session_id: Any,
    type: str,
    payload: dict[str, Any],
    transient: bool = False,
    timeline_event_id: int | None = None,
) -> SessionEvent:
    payload = {
        "type": type,
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


def _publish_session_status(session: AlertSession) -> None:
    event_publish(
        session_id=session.id,
        type=SESSION_STATUS,
        payload={"status": session.status, "error_message": session.error_message},
    )


# --- sessions -------------------------------------------------------------------------


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
        )
        _publish_session_status(session)
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


def session_claim(*, session_id: Any, worker_id: str) -> bool:
    """Take a pending session for this worker. False: someone else has (or had) it."""
    now = timezone.now()
    with transaction.atomic():
        claimed = AlertSession.objects.filter(id=session_id, status=SessionStatus.PENDING).update(
            status=SessionStatus.IN_PROGRESS, worker_id=worker_id, started_at=now, heartbeat_at=now
        )
        if claimed != 1:
            # Another worker got there first, or django-q2 re-delivered a finished task.
            return False
        _publish_session_status(AlertSession.objects.get(id=session_id))
    return True


def session_heartbeat(*, session_id: Any) -> None:
    AlertSession.objects.filter(id=session_id, status=SessionStatus.IN_PROGRESS).update(
        heartbeat_at=timezone.now()
    )


def session_finish(
    *, session_id: Any, status: SessionStatus, final_analysis: str = "", error_message: str = ""
) -> bool:
    """Move a running session to a terminal status; False if it was no longer running."""
    with transaction.atomic():
        updated = AlertSession.objects.filter(
            id=session_id, status__in=[SessionStatus.IN_PROGRESS, SessionStatus.CANCELLING]
        ).update(
            status=status,
            final_analysis=final_analysis,
            error_message=error_message,
            completed_at=timezone.now(),
        )
        if updated != 1:
            return False
        _publish_session_status(AlertSession.objects.get(id=session_id))
    return True


def session_close_open_work(*, session_id: Any, status: ExecutionStatus, reason: str) -> None:
    """Finish whatever an interrupted run left open: streaming items keep the text they
    had streamed (rebuilt from their chunks) and end failed; active executions and
    stages end with ``status``."""
    now = timezone.now()
    with transaction.atomic():
        open_items = list(
            TimelineEvent.objects.filter(
                session_id=session_id, status=TimelineEventStatus.STREAMING
            )
        )
        if open_items:
            from sessions.selectors import latest_event_id, streamed_text

            streamed = streamed_text([i.id for i in open_items], up_to_event_id=latest_event_id())
            for item in open_items:
                timeline_event_complete(
                    event=item,
                    content=streamed.get(item.id) or f"Interrupted: {reason}",
                    status=TimelineEventStatus.FAILED,
                    metadata={"interrupted": reason},
                )
        AgentExecution.objects.filter(
            session_id=session_id, status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
        ).update(status=status, error_message=reason, completed_at=now)
        for stage in Stage.objects.filter(
            session_id=session_id, status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
        ):
            stage_finish(stage=stage, status=status, error_message=reason)


def sessions_time_out_orphans(*, threshold_seconds: float) -> list[AlertSession]:
    """Mark running sessions whose worker stopped heart-beating as timed out."""
    cutoff = timezone.now() - timedelta(seconds=threshold_seconds)
    stale = AlertSession.objects.filter(status=SessionStatus.IN_PROGRESS).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    )
    reaped = []
    for session in stale:
        message = (
            f"The worker {session.worker_id or '?'} stopped reporting progress "
            f"for more than {int(threshold_seconds)} s; the session was marked timed out."
        )
        with transaction.atomic():
            session_close_open_work(
                session_id=session.id, status=ExecutionStatus.TIMED_OUT, reason=message
            )
            timeline_event_add(
                session=session,
                event_type=TimelineEventType.ERROR,
                content=message,
                status=TimelineEventStatus.FAILED,
            )
            if session_finish(
                session_id=session.id, status=SessionStatus.TIMED_OUT, error_message=message
            ):
                reaped.append(session)
    return reaped


# --- stages and executions --------------------------------------------------------------


def stage_start(*, session: AlertSession, name: str, index: int) -> Stage:
    with transaction.atomic():
        stage = Stage.objects.create(
            session=session,
            name=name,
            index=index,
            status=ExecutionStatus.ACTIVE,
            started_at=timezone.now(),
        )
        _publish_stage_status(stage)
    return stage


def stage_finish(*, stage: Stage, status: ExecutionStatus, error_message: str = "") -> Stage:
    with transaction.atomic():
        stage.status = status
        stage.error_message = error_message
        stage.completed_at = timezone.now()
        stage.save(update_fields=["status", "error_message", "completed_at"])
        _publish_stage_status(stage)
    return stage


def _publish_stage_status(stage: Stage) -> None:
    event_publish(
        session_id=stage.session_id,
        type=STAGE_STATUS,
        payload={
            "stage_id": stage.id,
            "name": stage.name,
            "index": stage.index,
            "status": stage.status,
        },
    )


def execution_start(
    *,
    stage: Stage,
    agent_name: str,
    agent_index: int,
    llm_backend: str,
    llm_provider: str,
    model_name: str,
) -> AgentExecution:
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
    *, execution: AgentExecution, llm_provider: str, llm_backend: str, model_name: str
) -> AgentExecution:
    """Record a fallback; the first provider the execution ran on is kept."""
    if not execution.original_llm_provider:
        execution.original_llm_provider = execution.llm_provider
        execution.original_llm_backend = execution.llm_backend
        execution.original_model_name = execution.model_name
    execution.llm_provider = llm_provider
    execution.llm_backend = llm_backend
    execution.model_name = model_name
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
    execution.save(
        update_fields=["status", "final_analysis", "error_message", "iterations", "completed_at"]
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
    session: AlertSession,
    event_type: TimelineEventType,
    content: str = "",
    metadata: dict[str, Any] | None = None,
    status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
    execution: AgentExecution | None = None,
    sequence_number: int | None = None,
) -> TimelineEvent:
    """Create a timeline item. ``status=streaming`` starts one that chunks will fill."""
    with transaction.atomic():
        if sequence_number is None:
            last = (
                TimelineEvent.objects.filter(session=session, execution=execution)
                .order_by("-sequence_number")
                .values_list("sequence_number", flat=True)
                .first()
            )
            sequence_number = (last or 0) + 1
        event = TimelineEvent.objects.create(
            session=session,
            stage_id=execution.stage_id if execution else None,
            execution=execution,
            sequence_number=sequence_number,
            event_type=event_type,
            status=status,
            content=content,
            metadata=metadata or {},
        )
        event_publish(
            session_id=session.id,
            type=TIMELINE_CREATED,
            payload=timeline_payload(event),
            timeline_event_id=event.id,
        )
    return event


def timeline_event_chunk(*, event: TimelineEvent, delta: str) -> SessionEvent:
    """A piece of streamed text. Transient: the completed event carries the whole text."""
    return event_publish(
        session_id=event.session_id,
        type=STREAM_CHUNK,
        payload={"event_id": event.id, "delta": delta},
        transient=True,
        timeline_event_id=event.id,
    )


def timeline_event_complete(
    *,
    event: TimelineEvent,
    content: str,
    status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
    event_type: TimelineEventType | None = None,
    metadata: dict[str, Any] | None = None,
) -> TimelineEvent:
    """Finish an item; its full content replaces whatever was streamed."""
    with transaction.atomic():
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
            type=TIMELINE_COMPLETED,
            payload=timeline_payload(event),
            timeline_event_id=event.id,
        )
    return event


# --- conversation and interaction records ----------------------------------------------------


def message_create(
    *,
    execution: AgentExecution,
    sequence_number: int,
    role: str,
    content: str,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str = "",
    tool_name: str = "",
) -> Message:
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


def llm_interaction_create(*, execution: AgentExecution, **fields: Any) -> LLMInteraction:
    return LLMInteraction.objects.create(
        session_id=execution.session_id, execution=execution, **fields
    )


def mcp_interaction_create(*, execution: AgentExecution, **fields: Any) -> MCPInteraction:
    return MCPInteraction.objects.create(
        session_id=execution.session_id, execution=execution, **fields
    )


def transient_events_purge(*, older_than_seconds: float) -> int:
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    deleted, _ = SessionEvent.objects.filter(transient=True, created_at__lt=cutoff).delete()
    return deleted
