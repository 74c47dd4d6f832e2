"""Scoring of ended sessions: a judge model rates an investigation after the fact.

A score row (``SessionScore``) is created with its queued task in one transaction:
automatically when a session completes and its chain enables scoring, or on request
for any ended session. Re-scoring adds a row; earlier ones stay as history, and the
database allows one open (pending or in-progress) row per session.

A worker claims the row (pending → in_progress) and gets a ``ScoreLease`` on it. The
session has ended and holds no lease of its own, so the scoring run's writes (its
stage, execution, items, messages and LLM calls) renew the score's lease instead, in
the same transaction, and a worker that lost its row writes nothing. Scoring never
touches the session's status.

Every change of a score publishes ``session.score_updated``; the scoring stage's start
publishes that instead of ``stage.status``, so the session page shows the scoring in
its Scoring section rather than as a stage of the investigation.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django_q.tasks import async_task

from masking import mask_text
from sessions.models import (
    TERMINAL_SESSION_STATUSES,
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    ScoreStatus,
    SessionEventType,
    SessionScore,
    SessionStatus,
    Stage,
    StageType,
)
from sessions.services.events import event_publish
from sessions.services.leased_rows import requeue_lost, time_out_orphans
from sessions.services.leases import Lease, ScoreLease, hold
from sessions.services.records import (
    close_open_items,
    execution_close,
    next_stage_index,
    publish_execution_status,
    publish_stage_status,
    stage_close,
)

logger = logging.getLogger(__name__)

AUTO = "auto"  # score_triggered_by of the scoring that follows a completed session
OPEN_SCORE_STATUSES = (ScoreStatus.PENDING, ScoreStatus.IN_PROGRESS)


class NotScorable(Exception):
    """The session cannot be scored now; the message is TARSy's."""


class ScoringInProgress(NotScorable):
    """A scoring of this session is already queued or running."""


# --- requesting a scoring ------------------------------------------------------------------


def score_on_end(session_id: Any, status: str) -> None:
    """Queue the scoring of a session that completed, when its chain enables scoring."""
    if status != SessionStatus.COMPLETED:
        return
    from config.loader import get_config

    chain_id = AlertSession.objects.values_list("chain_id", flat=True).get(id=session_id)
    chain = get_config().chains.get(chain_id)
    if chain is None or not chain.scoring.enabled:
        return
    # Cannot be refused here (nobody can ask before the session has ended), and must not
    # be: a refusal would roll back the end of the session.
    with contextlib.suppress(ScoringInProgress):
        score_request(session_id=session_id, triggered_by=AUTO)


def score_request(*, session_id: Any, triggered_by: str) -> SessionScore:
    """A new pending score of an ended session, with its task, or neither. Ignores the
    chain's ``scoring.enabled``: asking is always allowed."""
    with transaction.atomic():
        status = AlertSession.objects.values_list("status", flat=True).get(id=session_id)
        if status not in TERMINAL_SESSION_STATUSES:
            raise NotScorable("session is not in a terminal state")
        try:
            # A savepoint: the constraint's refusal must not spoil the caller's transaction
            # (the one that ends the session, for the automatic scoring).
            with transaction.atomic():
                now = timezone.now()
                # heartbeat_at of a pending score: when its task was (last) queued.
                score = SessionScore.objects.create(
                    session_id=session_id,
                    score_triggered_by=triggered_by,
                    started_at=now,
                    heartbeat_at=now,
                )
        except IntegrityError:
            # score_one_open_per_session: another request got there first, maybe at the
            # same moment (the constraint, not a prior read, decides the race).
            raise ScoringInProgress("scoring already in progress for this session") from None
        _publish(score)
        async_task(
            "worker.tasks.score_session",
            str(score.id),
            task_name=f"score-{score.id}",
            group="scoring",
        )
    return score


# TARSy's name for the stage a scoring runs in (its scoring_executor.go).
SCORING_STAGE_NAME = "Reflection"


# --- the worker's lease --------------------------------------------------------------------


def score_claim(*, score_id: Any, worker_id: str) -> ScoreLease | None:
    """Take a pending score for this worker; None when it is not pending (a duplicate or
    re-delivered task, or a score recovery has already ended)."""
    token, now = uuid.uuid4(), timezone.now()
    with transaction.atomic():
        claimed = SessionScore.objects.filter(id=score_id, status=ScoreStatus.PENDING).update(
            status=ScoreStatus.IN_PROGRESS, lease_token=token, worker_id=worker_id, heartbeat_at=now
        )
        if claimed != 1:
            return None
        score = SessionScore.objects.get(id=score_id)
        _publish(score)
    return ScoreLease(session_id=score.session_id, token=token, score_id=score.id)


# --- what the scoring run records, each write under the score's lease ---------------------


def score_stage_start(
    *, lease: ScoreLease, agent_name: str, llm_provider: str, llm_backend: str, model_name: str
) -> AgentExecution:
    """The scoring stage (after every stage the session has) and its one execution."""
    with transaction.atomic():
        hold(lease)
        index = next_stage_index(lease.session_id)
        now = timezone.now()
        stage = Stage.objects.create(
            session_id=lease.session_id,
            name=SCORING_STAGE_NAME,
            index=index,
            stage_type=StageType.SCORING,
            status=ExecutionStatus.ACTIVE,
            started_at=now,
        )
        execution = AgentExecution.objects.create(
            session_id=lease.session_id,
            stage=stage,
            agent_name=agent_name,
            agent_index=1,
            status=ExecutionStatus.ACTIVE,
            llm_backend=llm_backend,
            llm_provider=llm_provider,
            model_name=model_name,
            started_at=now,
        )
        # Started, as every stage says (TARSy's stage.status "started" for its Reflection).
        publish_stage_status(stage)
        publish_execution_status(execution)
        SessionScore.objects.filter(id=lease.score_id).update(stage=stage)
        _publish(SessionScore.objects.get(id=lease.score_id))
    return execution


# --- how a scoring ends --------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreResult:
    total_score: int
    score_analysis: str
    failure_tags: list[str]
    tool_improvement_report: str
    prompt_hash: str
    # Set when the score stands but the tool report could not be had.
    error_message: str = ""


def score_memorizing(*, lease: ScoreLease) -> None:
    """The score is known and the session's lessons are being drawn from it: TARSy's
    ``memorizing`` (a live event only; the score's row stays in progress)."""
    with transaction.atomic():
        hold(lease)
        event_publish(
            session_id=lease.session_id,
            type=SessionEventType.SCORE_UPDATED,
            payload={"score_id": str(lease.score_id), "scoring_status": "memorizing"},
        )


def score_complete(
    *, lease: ScoreLease, execution: AgentExecution | None, result: ScoreResult
) -> None:
    with transaction.atomic():
        hold(lease)
        _close_work(execution, ExecutionStatus.COMPLETED, "")
        _end(
            lease,
            ScoreStatus.COMPLETED,
            total_score=result.total_score,
            score_analysis=result.score_analysis,
            failure_tags=result.failure_tags,
            tool_improvement_report=result.tool_improvement_report,
            prompt_hash=result.prompt_hash,
            error_message=result.error_message,
        )


def score_fail(
    *,
    lease: ScoreLease,
    execution: AgentExecution | None,
    error_message: str,
    prompt_hash: str = "",
    status: ScoreStatus = ScoreStatus.FAILED,
) -> None:
    """The score is recorded as failed with the reason; the session is left as it is."""
    with transaction.atomic():
        hold(lease)
        work = (
            ExecutionStatus.CANCELLED if status == ScoreStatus.CANCELLED else ExecutionStatus.FAILED
        )
        _close_work(execution, work, error_message)
        _end(lease, status, error_message=error_message, prompt_hash=prompt_hash)


def score_end(
    *,
    lease: ScoreLease,
    status: str,
    error_message: str = "",
    explain: bool = False,
    close_reason: str = "",
) -> None:
    """End a scoring from outside its run (its worker's cluster is going away): what it
    had streamed keeps its text, its stage closes. The signature of ``session_end``, so
    that the lease keeper (agents/executor.py ``run_leased``) can end a scoring too."""
    with transaction.atomic():
        hold(lease)
        _close_stage(lease, ExecutionStatus(status), close_reason or error_message)
        _end(lease, ScoreStatus(status), error_message=error_message)


def _close_stage(lease: ScoreLease, status: ExecutionStatus, reason: str) -> None:
    stage_id = SessionScore.objects.values_list("stage_id", flat=True).get(id=lease.score_id)
    for execution in AgentExecution.objects.filter(stage_id=stage_id):
        close_open_items(
            session_id=lease.session_id, execution_id=execution.id, status=status, reason=reason
        )
        _close_work(execution, status, reason)


def _close_work(execution: AgentExecution | None, status: ExecutionStatus, reason: str) -> None:
    if execution is None:
        return
    if execution.status in (ExecutionStatus.PENDING, ExecutionStatus.ACTIVE):
        execution_close(execution, status=status, error_message=reason, iterations=None)
    for stage in Stage.objects.filter(
        id=execution.stage_id, status__in=(ExecutionStatus.PENDING, ExecutionStatus.ACTIVE)
    ):
        stage_close(stage, status, reason)


def _end(lease: ScoreLease, status: ScoreStatus, **fields: Any) -> None:
    if fields.get("error_message"):
        # As session_end: a scoring's error may quote the provider or an exception.
        fields["error_message"] = mask_text(fields["error_message"])
    SessionScore.objects.filter(id=lease.score_id, lease_token=lease.token).update(
        status=status, completed_at=timezone.now(), lease_token=None, **fields
    )
    _publish(SessionScore.objects.get(id=lease.score_id))


def _publish(score: SessionScore) -> None:
    event_publish(
        session_id=score.session_id,
        type=SessionEventType.SCORE_UPDATED,
        payload={
            "score_id": str(score.id),
            "scoring_status": score.status,
            "total_score": score.total_score,
        },
    )


# --- recovery --------------------------------------------------------------------------------


def scores_time_out_orphans(*, threshold_seconds: float) -> list[Any]:
    """End ``timed_out`` the scores whose worker stopped heart-beating (killed, stalled),
    so that none stays in progress for ever and the session can be scored again; its
    stage is closed with it."""

    def end(lease: Lease, message: str) -> None:
        assert isinstance(lease, ScoreLease)
        _close_stage(lease, ExecutionStatus.TIMED_OUT, message)
        _end(lease, ScoreStatus.TIMED_OUT, error_message=message)

    return time_out_orphans(
        SessionScore,
        threshold_seconds=threshold_seconds,
        lease_of=lambda row_id, session_id, token: ScoreLease(
            session_id=session_id, token=token, score_id=row_id
        ),
        end=end,
        what="scoring",
    )


def scores_requeue_lost(*, older_than_seconds: float) -> list[Any]:
    """Queue again the pending scores no worker has claimed in time."""
    return requeue_lost(
        SessionScore,
        older_than_seconds=older_than_seconds,
        enqueue=lambda score_id: async_task(
            "worker.tasks.score_session",
            str(score_id),
            task_name=f"score-{score_id}",
            group="scoring",
        ),
        what="scoring",
    )
