"""What a worker records while it runs a session, each write under its lease."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Max, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from masking import mask_text
from sessions import search
from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    LLMInteraction,
    MCPInteraction,
    Message,
    ParallelType,
    SessionEvent,
    SessionEventType,
    SessionSearch,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
    answer_message,
)
from sessions.selectors import latest_event_id, streamed_text
from sessions.services.events import event_publish, serialize_transaction
from sessions.services.leases import Lease, hold

# --- stages and executions --------------------------------------------------------------


def stage_start(
    *,
    lease: Lease,
    name: str,
    index: int,
    stage_type: StageType = StageType.INVESTIGATION,
    parallel_type: ParallelType = ParallelType.NONE,
    success_policy: str = "",
    expected_agent_count: int = 1,
) -> Stage:
    with transaction.atomic():
        hold(lease)
        stage = Stage.objects.create(
            session_id=lease.session_id,
            name=name,
            index=index,
            stage_type=stage_type,
            parallel_type=parallel_type,
            success_policy=success_policy,
            expected_agent_count=expected_agent_count,
            status=ExecutionStatus.ACTIVE,
            started_at=timezone.now(),
        )
        publish_stage_status(stage)
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
    stage.error_message = mask_text(error_message)  # it may quote its agents' servers
    stage.completed_at = timezone.now()
    stage.save(update_fields=["status", "error_message", "completed_at"])
    publish_stage_status(stage)


def publish_stage_status(stage: Stage) -> None:
    event_publish(
        session_id=stage.session_id,
        type=SessionEventType.STAGE_STATUS,
        payload={
            "stage_id": stage.id,
            "name": stage.name,
            "index": stage.index,
            "stage_type": stage.stage_type,
            "parallel_type": stage.parallel_type,
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
    parent_execution: AgentExecution | None = None,
    task: str = "",
) -> AgentExecution:
    with transaction.atomic():
        hold(lease)
        execution = AgentExecution.objects.create(
            session_id=stage.session_id,
            stage=stage,
            agent_name=agent_name,
            agent_index=agent_index,
            parent_execution=parent_execution,
            task=task,
            status=ExecutionStatus.ACTIVE,
            llm_backend=llm_backend,
            llm_provider=llm_provider,
            model_name=model_name,
            started_at=timezone.now(),
        )
        publish_execution_status(execution)
    return execution


def publish_execution_status(execution: AgentExecution, *, cancel_requested: bool = False) -> None:
    event_publish(
        session_id=execution.session_id,
        type=SessionEventType.EXECUTION_STATUS,
        payload={
            "execution_id": execution.id,
            "stage_id": execution.stage_id,
            "parent_execution_id": execution.parent_execution_id,
            "agent_name": execution.agent_name,
            "agent_index": execution.agent_index,
            "status": execution.status,
            "error_message": execution.error_message,
            # A header update only: someone asked this agent to stop.
            "cancel_requested": cancel_requested,
        },
    )


def execution_progress(
    *, lease: Lease, execution: AgentExecution, phase: str, message: str
) -> SessionEvent:
    """What the agent is doing now, for TARSy's clients (``execution.progress``): live
    only, like a stream chunk, and written only while the worker holds the session."""
    with transaction.atomic():
        hold(lease)
        return event_publish(
            session_id=execution.session_id,
            type=SessionEventType.EXECUTION_PROGRESS,
            payload={
                "execution_id": execution.id,
                "stage_id": execution.stage_id,
                "parent_execution_id": execution.parent_execution_id,
                "phase": phase,
                "message": message,
            },
            transient=True,
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
    with transaction.atomic():
        hold(lease)
        execution_close(
            execution,
            status=status,
            final_analysis=final_analysis,
            error_message=error_message,
            iterations=iterations,
        )
    return execution


def execution_close(
    execution: AgentExecution,
    *,
    status: ExecutionStatus,
    final_analysis: str = "",
    error_message: str = "",
    iterations: int | None = None,
) -> None:
    """``execution_finish`` for a caller already holding the lease in its transaction.
    Items it left streaming keep their text and end with it."""
    # An agent's error may quote a server, a provider or an exception's text about either.
    error_message = mask_text(error_message)
    close_open_items(
        session_id=execution.session_id,
        execution_id=execution.id,
        status=status,
        reason=error_message or str(status),
    )
    execution.status = status
    execution.final_analysis = final_analysis
    execution.error_message = error_message
    if iterations is not None:
        execution.iterations = iterations
    execution.completed_at = timezone.now()
    execution.save(
        update_fields=["status", "final_analysis", "error_message", "iterations", "completed_at"]
    )
    publish_execution_status(execution)


def close_open_items(
    *, session_id: Any, status: ExecutionStatus, reason: str, execution_id: int | None = None
) -> None:
    """Streaming items (of one execution, or the session's own) keep the text they had
    streamed, rebuilt from their chunks, and end cancelled or failed."""
    items = TimelineEvent.objects.filter(
        session_id=session_id, execution_id=execution_id, status=TimelineEventStatus.STREAMING
    )
    open_items = list(items)
    if not open_items:
        return
    streamed = streamed_text([i.id for i in open_items], up_to_event_id=latest_event_id())
    ending = (
        TimelineEventStatus.CANCELLED
        if status == ExecutionStatus.CANCELLED
        else TimelineEventStatus.FAILED
    )
    for item in open_items:
        item_complete(
            item,
            content=streamed.get(item.id) or f"Interrupted: {reason}",
            status=ending,
            event_type=None,
            metadata={"interrupted": reason},
        )


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


def next_sequence_number(session_id: Any) -> int:
    """One past the session's last item. The caller's transaction holds the session's
    lease (a row lock on PostgreSQL, the write lock on SQLite), so two writers of one
    session do not take the same number."""
    last = (
        TimelineEvent.objects.filter(session_id=session_id)
        .order_by("-sequence_number")
        .values_list("sequence_number", flat=True)
        .first()
    )
    return (last or 0) + 1


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
    """``timeline_event_add`` for a caller already holding the lease in its transaction.
    ``sequence_number`` None: the next of the session's, as TARSy numbers a session's
    items throughout (a chat question before its answer, whatever the execution)."""
    if sequence_number is None:
        sequence_number = next_sequence_number(session_id)
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


def timeline_event_chunk(
    *, lease: Lease, event: TimelineEvent, delta: str, offset: int | None = None
) -> SessionEvent:
    """A piece of streamed text, saved at ``offset`` (by default after what is saved)."""
    if offset is None:
        offset = len(streamed_text([event.id], up_to_event_id=latest_event_id()).get(event.id, ""))
    return timeline_event_chunks(lease=lease, chunks=[(event, delta, offset)])[0]


def timeline_event_chunks(
    *, lease: Lease, chunks: list[tuple[TimelineEvent, str, int]]
) -> list[SessionEvent]:
    """Streamed text of one or more items, each piece with the character it starts at in
    its item's text, in one transaction. Transient: the completed item carries its whole
    text. The recorder saves a stream every ``TARSY_STREAM_SAVE_INTERVAL``; the pages got
    its words sooner, past the database (sessions/streams.py)."""
    with transaction.atomic():
        hold(lease)
        return [
            event_publish(
                session_id=event.session_id,
                type=SessionEventType.STREAM_CHUNK,
                payload={"event_id": event.id, "delta": delta, "offset": offset},
                transient=True,
                timeline_event_id=event.id,
            )
            for event, delta, offset in chunks
        ]


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


@dataclass(frozen=True)
class RecordedCall:
    """A recorded LLM call as a later call of the same conversation sees it: the row to
    refer to, and its whole request followed by its answer, as stored (JSON)."""

    interaction_id: int
    execution_id: int
    request_length: int
    messages: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, interaction: LLMInteraction, request: list[dict[str, Any]]) -> RecordedCall:
        answer = as_stored(answer_message(interaction.response_text, interaction.tool_calls))
        return cls(interaction.id, interaction.execution_id, len(request), (*request, answer))


def as_stored(value: Any) -> Any:
    """``value`` as the database gives it back (tuples become lists, keys strings): what
    a stored conversation is compared in."""
    return json.loads(json.dumps(value))


def llm_interaction_create(
    *,
    lease: Lease,
    execution: AgentExecution,
    earlier: Iterable[RecordedCall] = (),
    **fields: Any,
) -> LLMInteraction:
    """Record one model call. ``request_messages`` is the whole request; when it
    continues one of the ``earlier`` calls of this execution (it starts with that call's
    whole request), only what it adds is stored (``LLMInteraction.extends``)."""
    if fields.get("error_message"):
        # The provider's own words, which may quote what it was sent (a key, a header).
        fields["error_message"] = mask_text(fields["error_message"])
    request = as_stored(fields.pop("request_messages", []))
    # Only within the execution: that is where a reader looks for the calls it extends.
    extends, shared = _continued_call(
        request, [call for call in earlier if call.execution_id == execution.id]
    )
    with transaction.atomic():
        hold(lease)
        interaction = LLMInteraction.objects.create(
            session_id=execution.session_id,
            execution=execution,
            request_messages=request[shared:] if extends else request,
            extends_id=extends,
            shared_messages=shared if extends else None,
            **fields,
        )
        _session_totals_add(interaction)
        _interaction_published(interaction, "llm")
        return interaction


def _interaction_published(interaction: LLMInteraction | MCPInteraction, kind: str) -> None:
    """TARSy's ``interaction.created``: the trace has a new call (a client re-reads it)."""
    event_publish(
        session_id=interaction.session_id,
        type=SessionEventType.INTERACTION_CREATED,
        payload={
            "stage_id": interaction.execution.stage_id if interaction.execution else None,
            "execution_id": interaction.execution_id,
            "interaction_id": interaction.id,
            "interaction_type": kind,
        },
    )


def _continued_call(
    request: list[dict[str, Any]], earlier: Iterable[RecordedCall]
) -> tuple[int | None, int]:
    """The earlier call this request continues, and how many of its first messages are
    that call's request and answer; (None, 0) when it continues none. A request that does
    not start with an earlier call's whole request (a summary of a tool result, a
    request with a message rewritten) is stored whole."""
    best: tuple[int | None, int] = (None, 0)
    for call in earlier:
        if call.request_length == 0 or len(request) < call.request_length:
            continue
        shared = 0
        for mine, theirs in zip(request, call.messages, strict=False):
            if mine != theirs:
                break
            shared += 1
        if shared >= call.request_length and shared > best[1]:
            best = (call.interaction_id, shared)
    return best


def _session_totals_add(interaction: LLMInteraction) -> None:
    """Keep the session's token and cost totals with each call (the list sorts by them)."""
    cost = interaction.estimated_cost_usd
    AlertSession.objects.filter(id=interaction.session_id).update(
        total_tokens=F("total_tokens") + interaction.total_tokens,
        estimated_cost_usd=(
            F("estimated_cost_usd")
            if cost is None
            else Coalesce("estimated_cost_usd", Value(Decimal(0))) + cost
        ),
    )


def mcp_interaction_create(
    *, lease: Lease, execution: AgentExecution, **fields: Any
) -> MCPInteraction:
    with transaction.atomic():
        hold(lease)
        interaction = MCPInteraction.objects.create(
            session_id=execution.session_id, execution=execution, **fields
        )
        _interaction_published(interaction, "mcp")
        return interaction


def search_text_update(session_id: Any) -> None:
    """What the session is found by, now that it has an analysis and a timeline
    (again after each chat answer, which adds to it)."""
    session = AlertSession.objects.get(id=session_id)
    texts = session.timeline.order_by("id").values_list("content", flat=True)
    SessionSearch.objects.update_or_create(
        session=session, defaults={"body": search.document(session, list(texts))}
    )


def next_stage_index(session_id: Any) -> int:
    """The index of a stage added after a session ended (a chat answer, a scoring).
    Inside the caller's transaction, serialized per session, so that a question and a
    scoring started at the same instant do not both take the same index."""
    serialize_transaction(f"tarsy-stages-{session_id}")
    last = Stage.objects.filter(session_id=session_id).aggregate(last=Max("index"))["last"]
    return 0 if last is None else last + 1
