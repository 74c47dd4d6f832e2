"""Follow-up chat on an ended session: a question, and the answer a worker gives to it.

A question is stored with everything that shows it (the chat, the message, a ``chat``
stage holding a ``user_question`` item) and the task that answers it, in one
transaction. A worker claims the message and writes the answer under a ``ChatLease`` on
the message's row, like a session's worker under the session's lease: once the message
is cancelled, timed out or reaped, the worker writes nothing more. One answer at a time
per session: the database's ``chat_one_open_message`` constraint decides.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django_q.tasks import async_task

from config.loader import get_config
from masking import mask_alert, mask_text
from masking.bounded import unstorable
from sessions.models import (
    OPEN_CHAT_MESSAGE_STATUSES,
    AlertSession,
    Chat,
    ChatMessage,
    ChatMessageStatus,
    ExecutionStatus,
    SessionEventType,
    SessionStatus,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services.events import event_publish
from sessions.services.leases import ChatLease, hold
from sessions.services.records import (
    execution_close,
    next_sequence_number,
    next_stage_index,
    publish_stage_status,
    search_text_update,
    stage_close,
    timeline_payload,
)

CHAT_CONTENT_LIMIT = 100_000  # characters; TARSy's limit
CHAT_STAGE_NAME = "Chat"
ANSWER_RUNNING = "a chat response is already being generated"

# Why a session cannot take a question (TARSy's words). Unlike TARSy, a cancelled
# session can: what it found before it was stopped is worth asking about.
_NOT_AVAILABLE: dict[str, str] = {
    SessionStatus.PENDING: "chat is not available while session is still processing",
    SessionStatus.IN_PROGRESS: "chat is not available while session is still processing",
    SessionStatus.CANCELLING: "chat is not available while session is being cancelled",
}


class ChatRejected(Exception):
    """The question was not taken; ``status`` is the HTTP status that says why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def chat_unavailable_reason(session: AlertSession) -> str:
    """Why ``session`` cannot take a question now, in TARSy's order of checks; "" if it
    can (an answer already running is checked when the question is stored)."""
    chain = get_config().chains.get(session.chain_id)
    if chain is None:
        return "chain configuration not found"
    if session.status in _NOT_AVAILABLE:
        return _NOT_AVAILABLE[session.status]
    if not chain.chat.enabled:
        return "chat is not enabled for this chain"
    return ""


def chat_message_send(*, session: AlertSession, content: Any, author: str) -> ChatMessage:
    """Store a question and queue its answer, or raise ``ChatRejected``.

    The question is masked (fail open, like alert data) before it is stored or shown to
    a model: people paste logs and configuration into questions.
    """
    if reason := chat_unavailable_reason(session):
        raise ChatRejected(reason)
    if content is not None and not isinstance(content, str):
        raise ChatRejected("content must be a string")
    if not content or not content.strip():
        raise ChatRejected("content is required")
    if len(content) > CHAT_CONTENT_LIMIT:
        raise ChatRejected("content exceeds maximum length of 100,000 characters")
    if problem := unstorable(content):
        raise ChatRejected(f"content contains {problem}: send valid Unicode text without NUL")
    try:
        with transaction.atomic():
            return _store_question(session, mask_alert(content), author)
    except IntegrityError:
        # Another question of this session got in first (the open-message constraint, or
        # the stage index both took).
        raise ChatRejected(ANSWER_RUNNING, 409) from None


def _store_question(session: AlertSession, content: str, author: str) -> ChatMessage:
    chat = Chat.objects.filter(session=session).first()
    if chat is None:
        chat = Chat.objects.create(session=session, created_by=author)
        event_publish(
            session_id=session.id,
            type=SessionEventType.CHAT_CREATED,
            payload={"chat_id": str(chat.id), "created_by": author},
        )
    elif chat.messages.filter(status__in=OPEN_CHAT_MESSAGE_STATUSES).exists():
        raise ChatRejected(ANSWER_RUNNING, 409)
    index = next_stage_index(session.id)
    now = timezone.now()
    # Active from the start: the page shows the question at once, in its own stage,
    # and the answer streams into it once a worker takes it.
    stage = Stage.objects.create(
        session=session,
        name=CHAT_STAGE_NAME,
        index=index,
        stage_type=StageType.CHAT,
        status=ExecutionStatus.ACTIVE,
        started_at=now,
    )
    # heartbeat_at: while pending, when its task was last queued (chat_messages_requeue_lost).
    message = ChatMessage.objects.create(
        chat=chat, session=session, content=content, author=author, stage=stage, heartbeat_at=now
    )
    publish_stage_status(stage)
    _stage_item(
        stage,
        TimelineEventType.USER_QUESTION,
        content,
        metadata={"author": author, "message_id": str(message.id)},
    )
    _enqueue(message.id)
    return message


def _enqueue(message_id: Any) -> None:
    """Queue the answer's task (by dotted path: services do not import tasks); with the
    ORM broker it commits with the question, or neither does."""
    try:
        async_task(
            "worker.tasks.run_chat_message",
            str(message_id),
            task_name=f"chat-{message_id}",
            group="chat",
        )
    except Exception as exc:
        raise ChatRejected(
            f"the answer could not be queued ({exc}); nothing was stored, ask again", 503
        ) from exc


def chat_message_claim(*, message_id: Any, worker_id: str) -> ChatLease | None:
    """Take a pending question for this worker. Idempotent like ``session_claim``: a
    re-delivered or duplicate task finds it taken (or answered) and gets None."""
    token = uuid.uuid4()
    now = timezone.now()
    with transaction.atomic():
        claimed = ChatMessage.objects.filter(
            id=message_id, status=ChatMessageStatus.PENDING
        ).update(
            status=ChatMessageStatus.RUNNING,
            worker_id=worker_id,
            started_at=now,
            heartbeat_at=now,
            lease_token=token,
        )
        if claimed != 1:
            return None
        session_id = ChatMessage.objects.values_list("session_id", flat=True).get(id=message_id)
    return ChatLease(session_id, token, message_id)


def chat_message_end(
    *,
    lease: ChatLease,
    status: str,
    error_message: str = "",
    explain: bool = False,
    close_reason: str = "",
) -> None:
    """End an answer: close what it left open (saying ``close_reason``, else the error),
    explain why in its stage when asked, end the stage and the message, and give the
    lease up, in one transaction. The same signature as ``session_end``, so that the
    executor's lease keeper can end either."""
    error_message = mask_text(error_message)  # as session_end: it may quote a server
    ending = ExecutionStatus(status)
    reason = close_reason or error_message
    with transaction.atomic():
        hold(lease)
        stage = Stage.objects.get(chat_message__id=lease.message_id)
        if ending != ExecutionStatus.COMPLETED:
            # What streamed keeps its text (execution_close closes the items too).
            for execution in stage.executions.filter(
                status__in=[ExecutionStatus.PENDING, ExecutionStatus.ACTIVE]
            ):
                execution_close(execution, status=ending, error_message=reason)
        if explain:
            _stage_item(
                stage, TimelineEventType.ERROR, error_message, status=TimelineEventStatus.FAILED
            )
        stage_close(stage, ending, reason)
        search_text_update(lease.session_id)  # the question and its answer are found too
        lease.holder().update(
            status=status,
            error_message=error_message,
            completed_at=timezone.now(),
            lease_token=None,
        )


def _stage_item(
    stage: Stage,
    event_type: TimelineEventType,
    content: str,
    *,
    status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
    metadata: dict[str, Any] | None = None,
) -> TimelineEvent:
    """An item of the chat stage itself, not of its agent: the question, or why the
    answer ended before its agent could say so."""
    item = TimelineEvent.objects.create(
        session_id=stage.session_id,
        stage=stage,
        sequence_number=next_sequence_number(stage.session_id),
        event_type=event_type,
        status=status,
        content=content,
        metadata=metadata or {},
    )
    event_publish(
        session_id=stage.session_id,
        type=SessionEventType.TIMELINE_CREATED,
        payload=timeline_payload(item),
        timeline_event_id=item.id,
    )
    return item


def chat_answer_cancel(*, session_id: Any, by: str) -> bool:
    """Stop the answer running on an ended session, if there is one: a queued one at
    once, a running one through its worker (within ``TARSY_LEASE_CHECK_INTERVAL``).
    False when there was nothing to stop."""
    with transaction.atomic():
        message = (
            ChatMessage.objects.filter(
                session_id=session_id,
                status__in=[ChatMessageStatus.PENDING, ChatMessageStatus.RUNNING],
            )
            .select_related("stage")
            .first()
        )
        if message is None:
            return False
        if message.status == ChatMessageStatus.RUNNING:
            return bool(
                ChatMessage.objects.filter(id=message.id, status=ChatMessageStatus.RUNNING).update(
                    status=ChatMessageStatus.CANCELLING, cancelled_by=by
                )
            )
        if not ChatMessage.objects.filter(id=message.id, status=ChatMessageStatus.PENDING).update(
            status=ChatMessageStatus.CANCELLED, cancelled_by=by, completed_at=timezone.now()
        ):
            return False  # a worker took it meanwhile (not on SQLite: its lock is global)
        assert message.stage is not None  # a question is stored with its stage
        stage_close(message.stage, ExecutionStatus.CANCELLED, f"Cancelled by {by}")
        return True


def chat_messages_time_out_orphans(*, threshold_seconds: float) -> list[Any]:
    """End the answers whose worker stopped heart-beating (killed, stalled): timed out,
    or cancelled when a cancel was waiting for that worker. Decide first, as
    ``sessions_time_out_orphans`` does: a conditional UPDATE takes the message's lease,
    and only a message it took gets the consequences."""
    cutoff = timezone.now() - timedelta(seconds=threshold_seconds)
    stale = Q(status__in=[ChatMessageStatus.RUNNING, ChatMessageStatus.CANCELLING]) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    )
    reaper = f"reaper@{socket.gethostname()}:{os.getpid()}"
    reaped = []
    for message_id, session_id, status, worker in ChatMessage.objects.filter(stale).values_list(
        "id", "session_id", "status", "worker_id"
    ):
        lease = ChatLease(session_id, uuid.uuid4(), message_id)
        with transaction.atomic():
            taken = ChatMessage.objects.filter(stale, id=message_id, status=status).update(
                lease_token=lease.token, worker_id=reaper
            )
            if taken != 1:
                continue  # its worker came back, or another reaper got there first
            if status == ChatMessageStatus.CANCELLING:
                chat_message_end(
                    lease=lease,
                    status=ChatMessageStatus.CANCELLED,
                    close_reason="cancelled (its worker had stopped)",
                )
            else:
                message = (
                    f"The worker {worker or '?'} stopped reporting progress for more than "
                    f"{threshold_seconds:g} s; the answer was marked timed out."
                )
                chat_message_end(
                    lease=lease,
                    status=ChatMessageStatus.TIMED_OUT,
                    error_message=message,
                    explain=True,
                )
        reaped.append(message_id)
    return reaped


def chat_messages_requeue_lost(*, older_than_seconds: float) -> list[Any]:
    """Queue again the questions no worker has taken in time (a dead cluster pulled their
    task); a duplicate task is harmless, the claim decides."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    lost = Q(status=ChatMessageStatus.PENDING, heartbeat_at__lt=cutoff)
    requeued = []
    for message_id in ChatMessage.objects.filter(lost).values_list("id", flat=True):
        with transaction.atomic():
            if ChatMessage.objects.filter(lost, id=message_id).update(heartbeat_at=timezone.now()):
                _enqueue(message_id)
                requeued.append(message_id)
    return requeued
