"""What a stopping worker cluster hands back (worker/supervision.py, "Stopping").

- Work it pulled but did not start: the pending session, chat question or scoring gets
  its task queued again at once (``work_requeue_pulled``, and each ``*_requeue_unstarted``
  for the task a worker is handed while its cluster stops), instead of after
  ``TARSY_PENDING_RECOVERY_AFTER``. Conditional on the task having been queued before
  the stop began, so that each is queued again once; a duplicate task is harmless
  anyway (the claim decides).
- Work it could not finish in ``TARSY_SHUTDOWN_GRACE``, with ``TARSY_SHUTDOWN_REQUEUE``:
  its worker puts it back to ``pending`` under its lease (``session_requeue``,
  ``chat_message_requeue``, ``score_requeue``). What it streamed is kept and closed as
  interrupted, an error item says so, and its task is queued; it runs again from the
  start, its new stages after the interrupted ones. Decided first: the conditional
  UPDATE that gives the lease up, then the consequences, in one transaction with their
  events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from sessions.models import (
    AlertSession,
    ChatMessage,
    ChatMessageStatus,
    ExecutionStatus,
    ScoreStatus,
    SessionScore,
    SessionStatus,
    Stage,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services import chat, scoring
from sessions.services.events import publish_session_status, serialize_transaction
from sessions.services.leases import ChatLease, Lease, LeaseLost, ScoreLease
from sessions.services.lifecycle import close_open_work
from sessions.services.queue import session_enqueue, sessions_dispatch_waiting
from sessions.services.records import execution_close, item_create, next_stage_index
from sessions.services.reflection import feedback_reflection_requeue_unstarted

OPEN = (ExecutionStatus.PENDING, ExecutionStatus.ACTIVE)

# --- work pulled but not started --------------------------------------------------------


def session_requeue_unstarted(*, session_id: Any, queued_before: datetime) -> bool:
    """Queue again a pending session whose task was queued before ``queued_before``."""
    with transaction.atomic():
        if not AlertSession.objects.filter(
            id=session_id, status=SessionStatus.PENDING, enqueued_at__lt=queued_before
        ).update(enqueued_at=timezone.now()):
            return False
        session_enqueue(session_id=session_id)
    return True


def chat_message_requeue_unstarted(*, message_id: Any, queued_before: datetime) -> bool:
    """Queue again a pending question whose task was queued before ``queued_before``
    (a pending message's ``heartbeat_at`` is when its task was queued)."""
    with transaction.atomic():
        if not ChatMessage.objects.filter(
            id=message_id, status=ChatMessageStatus.PENDING, heartbeat_at__lt=queued_before
        ).update(heartbeat_at=timezone.now()):
            return False
        chat._enqueue(message_id)
    return True


def score_requeue_unstarted(*, score_id: Any, queued_before: datetime) -> bool:
    """Queue again a pending scoring whose task was queued before ``queued_before``."""
    with transaction.atomic():
        if not SessionScore.objects.filter(
            id=score_id, status=ScoreStatus.PENDING, heartbeat_at__lt=queued_before
        ).update(heartbeat_at=timezone.now()):
            return False
        _enqueue_score(score_id)
    return True


_UNSTARTED = {
    "worker.tasks.run_session": lambda work_id, before: session_requeue_unstarted(
        session_id=work_id, queued_before=before
    ),
    "worker.tasks.run_chat_message": lambda work_id, before: chat_message_requeue_unstarted(
        message_id=work_id, queued_before=before
    ),
    "worker.tasks.score_session": lambda work_id, before: score_requeue_unstarted(
        score_id=work_id, queued_before=before
    ),
    "worker.tasks.reflect_on_feedback": lambda work_id, before: (
        feedback_reflection_requeue_unstarted(reflection_id=work_id, queued_before=before)
    ),
}
# Rows queued before the task bodies moved to worker/ name them ``sessions.tasks.*``.
_UNSTARTED.update({name.replace("worker.", "sessions.", 1): f for name, f in _UNSTARTED.items()})


def work_requeue_pulled(*, queued_before: datetime) -> int:
    """Queue again the pending work whose task a cluster has pulled (its row is locked)
    and no worker has started; returns how many. Called by a cluster as it begins to
    stop, for the tasks its pusher pulled: django-q2 would keep them locked for
    ``Q_CLUSTER`` retry. Another cluster's pulled tasks look the same and get a
    duplicate, which is harmless."""
    requeued = 0
    for row in OrmQ.objects.filter(lock__gt=timezone.now()):
        task = row.task
        requeue = _UNSTARTED.get(task.get("func"))
        if requeue is not None and task.get("args") and requeue(task["args"][0], queued_before):
            requeued += 1
    return requeued


def _enqueue_score(score_id: Any) -> None:
    async_task(
        "worker.tasks.score_session",
        str(score_id),
        task_name=f"score-{score_id}",
        group="scoring",
    )


# --- work interrupted at the deadline -------------------------------------------------------


def session_requeue(*, lease: Lease, reason: str) -> bool:
    """Put a running session back in the queue, to run again from the start. False when
    it is not running but still held (being cancelled: its worker ends it as asked);
    ``LeaseLost`` when the lease is gone."""
    session_id = lease.session_id
    with transaction.atomic():
        # Serialized with claims, like session_end: the slot this frees is seen.
        serialize_transaction("tarsy-session-claim")
        first_stage_index = next_stage_index(session_id)
        # Decide first. started_at stays: the session started then, whatever came after.
        if not AlertSession.objects.filter(
            id=session_id, lease_token=lease.token, status=SessionStatus.IN_PROGRESS
        ).update(
            status=SessionStatus.PENDING,
            lease_token=None,
            worker_id="",
            heartbeat_at=None,
            enqueued_at=timezone.now(),
            first_stage_index=first_stage_index,
        ):
            if lease.holder().exists():
                return False
            raise LeaseLost(lease)
        interrupted = (
            Stage.objects.filter(session_id=session_id, status__in=OPEN).order_by("-index").first()
        )
        close_open_work(session_id, ExecutionStatus.FAILED, reason)
        if interrupted is None:
            item_create(
                session_id=session_id,
                execution=None,
                sequence_number=None,
                event_type=TimelineEventType.ERROR,
                content=reason,
                metadata={"requeued": True},
                status=TimelineEventStatus.FAILED,
            )
        else:
            # In the stage it interrupted: the page tells the story in order, and the
            # new run's stages follow.
            chat._stage_item(
                interrupted,
                TimelineEventType.ERROR,
                reason,
                status=TimelineEventStatus.FAILED,
                metadata={"requeued": True},
            )
        publish_session_status(session_id)
        session_enqueue(session_id=session_id)
        transaction.on_commit(sessions_dispatch_waiting)
    return True


def chat_message_requeue(*, lease: ChatLease, reason: str) -> bool:
    """Put an answer being written back in the queue, to be written again from the
    start in the same stage. False when it is being cancelled (its worker ends it as
    asked); ``LeaseLost`` when the lease is gone."""
    with transaction.atomic():
        if not ChatMessage.objects.filter(
            id=lease.message_id, lease_token=lease.token, status=ChatMessageStatus.RUNNING
        ).update(
            status=ChatMessageStatus.PENDING,
            lease_token=None,
            worker_id="",
            started_at=None,
            heartbeat_at=timezone.now(),  # a pending message's: when its task was queued
        ):
            if lease.holder().exists():
                return False
            raise LeaseLost(lease)
        # The stage stays active, as it is while a question waits for its answer.
        stage = Stage.objects.get(chat_message__id=lease.message_id)
        for execution in stage.executions.filter(status__in=OPEN):
            execution_close(execution, status=ExecutionStatus.FAILED, error_message=reason)
        chat._stage_item(
            stage,
            TimelineEventType.ERROR,
            reason,
            status=TimelineEventStatus.FAILED,
            metadata={"requeued": True},
        )
        chat._enqueue(lease.message_id)
    return True


def score_requeue(*, lease: ScoreLease, reason: str) -> bool:
    """Put a scoring back in the queue, to score again from the start (a new scoring
    stage); ``LeaseLost`` when the lease is gone."""
    with transaction.atomic():
        if not SessionScore.objects.filter(
            id=lease.score_id, lease_token=lease.token, status=ScoreStatus.IN_PROGRESS
        ).update(
            status=ScoreStatus.PENDING,
            lease_token=None,
            worker_id="",
            heartbeat_at=timezone.now(),  # a pending score's: when its task was queued
        ):
            raise LeaseLost(lease)
        scoring._close_stage(lease, ExecutionStatus.FAILED, reason)
        scoring._publish(SessionScore.objects.get(id=lease.score_id))
        _enqueue_score(lease.score_id)
    return True
