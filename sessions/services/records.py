"""What a worker records while it runs a session, each write under its lease."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions.models import (
    AgentExecution,
    ExecutionStatus,
    LLMInteraction,
    MCPInteraction,
    Message,
    SessionEvent,
    SessionEventType,
    Stage,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services.events import event_publish
from sessions.services.leases import Lease, hold

# --- stages and executions --------------------------------------------------------------


def stage_start(*, lease: Lease, name: str, index: int) -> Stage:
    with transaction.atomic():
        hold(lease)
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
        hold(lease)
        stage_close(stage, status, error_message)
    return stage


def stage_close(stage: Stage, status: ExecutionStatus, error_message: str) -> None:
    """``stage_finish`` for a caller already holding the lease in its transaction."""
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
        hold(lease)
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
        hold(lease)
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
        hold(lease)
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
        hold(lease)
        return item_create(
            session_id=lease.session_id,
            execution=execution,
            sequence_number=sequence_number,
            event_type=event_type,
            content=content,
            metadata=metadata or {},
            status=status,
        )


def item_create(
    *,
    session_id: Any,
    execution: AgentExecution | None,
    sequence_number: int | None,
    event_type: TimelineEventType,
    content: str,
    metadata: dict[str, Any],
    status: TimelineEventStatus,
) -> TimelineEvent:
    """``timeline_event_add`` for a caller already holding the lease in its transaction."""
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
        hold(lease)
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
        hold(lease)
        return item_complete(
            event, content=content, status=status, event_type=event_type, metadata=metadata
        )


def item_complete(
    event: TimelineEvent,
    *,
    content: str,
    status: TimelineEventStatus,
    event_type: TimelineEventType | None,
    metadata: dict[str, Any] | None,
) -> TimelineEvent:
    """``timeline_event_complete`` for a caller already holding the lease in its transaction."""
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
        hold(lease)
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
        hold(lease)
        return LLMInteraction.objects.create(
            session_id=execution.session_id, execution=execution, **fields
        )


def mcp_interaction_create(
    *, lease: Lease, execution: AgentExecution, **fields: Any
) -> MCPInteraction:
    with transaction.atomic():
        hold(lease)
        return MCPInteraction.objects.create(
            session_id=execution.session_id, execution=execution, **fields
        )
