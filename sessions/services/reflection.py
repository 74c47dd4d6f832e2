"""The feedback Reflector's runs: what a reviewer's feedback teaches (TARSy's ADR-0014).

A review that leaves ``investigation_feedback`` (new, or with a new rating) queues a
``FeedbackReflection`` row with its task in the review's own transaction, when memory is
enabled. A worker claims the row (pending → in_progress) and holds a ``FeedbackLease``
on it, as a scoring holds its score: every write of the run renews that lease, and a
worker that lost it writes nothing. The run's execution ("FeedbackReflector") joins the
session's newest scoring stage, as TARSy's does; a session never scored has no such
stage and its feedback is not reflected on (TARSy skips it too).

Recovery is a scoring's: a run whose worker stopped heart-beating ends ``timed_out``; a
pending run whose task was lost is queued again.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from masking import mask_text
from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    FeedbackReflection,
    ScoreStatus,
    Stage,
    StageType,
)
from sessions.services.leased_rows import requeue_lost, time_out_orphans
from sessions.services.leases import FeedbackLease, Lease, LeaseLost, hold
from sessions.services.records import (
    close_open_items,
    execution_close,
    publish_execution_status,
)

logger = logging.getLogger(__name__)

TASK = "worker.tasks.reflect_on_feedback"
FEEDBACK_REFLECTOR = "FeedbackReflector"  # TARSy's agent name for the run's execution


def feedback_reflection_request(
    *, session: AlertSession, triggered_by: str
) -> FeedbackReflection | None:
    """Queue a reflection on the session's feedback (in the caller's transaction), when
    memory is enabled; None when it is not."""
    from config.loader import get_config

    if not get_config().defaults.memory.enabled or not session.investigation_feedback:
        return None
    reflection = FeedbackReflection.objects.create(
        session=session,
        triggered_by=triggered_by,
        feedback=session.investigation_feedback,  # masked when the review was saved
        quality_rating=session.quality_rating,
        heartbeat_at=timezone.now(),  # a pending row's: when its task was queued
    )
    _enqueue(reflection.id)
    return reflection


def _enqueue(reflection_id: Any) -> None:
    async_task(TASK, str(reflection_id), task_name=f"feedback-{reflection_id}", group="scoring")


def feedback_reflection_claim(*, reflection_id: Any, worker_id: str) -> FeedbackLease | None:
    """Take a pending run for this worker; None when it is not pending (a duplicate or
    re-delivered task, or one recovery has ended)."""
    token = uuid.uuid4()
    with transaction.atomic():
        if (
            FeedbackReflection.objects.filter(id=reflection_id, status=ScoreStatus.PENDING).update(
                status=ScoreStatus.IN_PROGRESS,
                lease_token=token,
                worker_id=worker_id,
                heartbeat_at=timezone.now(),
            )
            != 1
        ):
            return None
        session_id = FeedbackReflection.objects.values_list("session_id", flat=True).get(
            id=reflection_id
        )
    return FeedbackLease(session_id=session_id, token=token, reflection_id=reflection_id)


def feedback_reflection_start(
    *, lease: FeedbackLease, llm_provider: str, llm_backend: str, model_name: str
) -> AgentExecution | None:
    """The run's execution, on the session's newest scoring stage; None (and the run
    ended ``completed``) when the session has no scoring stage."""
    with transaction.atomic():
        hold(lease)
        stage = (
            Stage.objects.filter(session_id=lease.session_id, stage_type=StageType.SCORING)
            .order_by("-index")
            .first()
        )
        if stage is None:
            _end(lease, ScoreStatus.COMPLETED, error_message="")
            return None
        now = timezone.now()
        execution = AgentExecution.objects.create(
            session_id=lease.session_id,
            stage=stage,
            agent_name=FEEDBACK_REFLECTOR,
            agent_index=stage.executions.count() + 1,
            status=ExecutionStatus.ACTIVE,
            llm_backend=llm_backend,
            llm_provider=llm_provider,
            model_name=model_name,
            started_at=now,
        )
        publish_execution_status(execution)
        FeedbackReflection.objects.filter(id=lease.reflection_id).update(execution=execution)
    return execution


def feedback_reflection_end(
    *,
    lease: FeedbackLease,
    status: str,
    error_message: str = "",
    explain: bool = False,
    close_reason: str = "",
) -> None:
    """End the run and close its execution. The signature of ``session_end``, so that
    the lease keeper (agents/executor.py ``run_leased``) can end it too."""
    with transaction.atomic():
        hold(lease)
        _close_execution(lease, ExecutionStatus(status), close_reason or error_message)
        _end(lease, ScoreStatus(status), error_message=error_message)


def feedback_reflection_requeue(*, lease: FeedbackLease, reason: str) -> bool:
    """Put the run back in the queue, to run again from the start (a new execution);
    ``LeaseLost`` when the lease is gone."""
    with transaction.atomic():
        if not lease.holder().update(
            status=ScoreStatus.PENDING, lease_token=None, worker_id="", heartbeat_at=timezone.now()
        ):
            raise LeaseLost(lease)
        _close_execution(lease, ExecutionStatus.FAILED, reason)
        _enqueue(lease.reflection_id)
    return True


def feedback_reflection_requeue_unstarted(*, reflection_id: Any, queued_before: datetime) -> bool:
    """Queue again a pending run whose task was queued before ``queued_before``."""
    with transaction.atomic():
        if not FeedbackReflection.objects.filter(
            id=reflection_id, status=ScoreStatus.PENDING, heartbeat_at__lt=queued_before
        ).update(heartbeat_at=timezone.now()):
            return False
        _enqueue(reflection_id)
    return True


def _close_execution(lease: FeedbackLease, status: ExecutionStatus, reason: str) -> None:
    execution_id = FeedbackReflection.objects.values_list("execution_id", flat=True).get(
        id=lease.reflection_id
    )
    execution = AgentExecution.objects.filter(id=execution_id).first()
    if execution is None:
        return
    close_open_items(
        session_id=lease.session_id, execution_id=execution.id, status=status, reason=reason
    )
    if execution.status in (ExecutionStatus.PENDING, ExecutionStatus.ACTIVE):
        execution_close(execution, status=status, error_message=reason, iterations=None)


def _end(lease: FeedbackLease, status: ScoreStatus, *, error_message: str) -> None:
    FeedbackReflection.objects.filter(id=lease.reflection_id, lease_token=lease.token).update(
        status=status,
        completed_at=timezone.now(),
        lease_token=None,
        # As a session's: an error may quote the provider or an exception.
        error_message=mask_text(error_message) if error_message else "",
    )


# --- recovery --------------------------------------------------------------------------


def feedback_reflections_time_out_orphans(*, threshold_seconds: float) -> list[Any]:
    """End ``timed_out`` the runs whose worker stopped heart-beating (killed, stalled)."""

    def end(lease: Lease, message: str) -> None:
        assert isinstance(lease, FeedbackLease)
        _close_execution(lease, ExecutionStatus.TIMED_OUT, message)
        _end(lease, ScoreStatus.TIMED_OUT, error_message=message)

    return time_out_orphans(
        FeedbackReflection,
        threshold_seconds=threshold_seconds,
        lease_of=lambda row_id, session_id, token: FeedbackLease(
            session_id=session_id, token=token, reflection_id=row_id
        ),
        end=end,
        what="feedback reflection",
    )


def feedback_reflections_requeue_lost(*, older_than_seconds: float) -> list[Any]:
    """Queue again the pending runs no worker has claimed in time."""
    return requeue_lost(
        FeedbackReflection,
        older_than_seconds=older_than_seconds,
        enqueue=_enqueue,
        what="feedback reflection",
    )
