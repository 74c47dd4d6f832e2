"""Queueing sessions' tasks, and finding the ones a dead cluster left behind."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone
from django_q.tasks import async_task

from sessions.models import (
    RUNNING_SESSION_STATUSES,
    TERMINAL_SESSION_STATUSES,
    AlertSession,
    ChatMessageStatus,
    MCPServerHealth,
    ScoreStatus,
    SessionEvent,
    SessionStatus,
    TimelineEvent,
    TimelineEventStatus,
    WorkerCluster,
)
from sessions.services.reflection import feedback_reflections_requeue_lost
from sessions.services.scoring import scores_requeue_lost

OPEN_CHAT_STATUSES = [
    ChatMessageStatus.PENDING,
    ChatMessageStatus.RUNNING,
    ChatMessageStatus.CANCELLING,
]


class SessionNotQueued(Exception):
    """The investigation could not be queued; the session was not stored either."""


def session_enqueue(*, session_id: Any) -> None:
    """Queue the task that runs a session (by dotted path: services do not import tasks)."""
    try:
        async_task(
            "worker.tasks.run_session",
            str(session_id),
            task_name=f"session-{session_id}",
            group="sessions",
        )
    except Exception as exc:
        raise SessionNotQueued(f"the investigation could not be queued ({exc})") from exc


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
    # A pending score's task can be lost the same way; its recovery counts apart.
    scores_requeue_lost(older_than_seconds=older_than_seconds)
    feedback_reflections_requeue_lost(older_than_seconds=older_than_seconds)
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


def worker_cluster_beat(
    *,
    cluster_id: uuid.UUID,
    host: str,
    pid: int,
    workers: int,
    sessions_per_worker: int | None = None,
) -> None:
    WorkerCluster.objects.update_or_create(
        id=cluster_id,
        defaults={
            "host": host,
            "pid": pid,
            "workers": workers,
            "sessions_per_worker": sessions_per_worker,
            "heartbeat_at": timezone.now(),
        },
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


def transient_events_purge(*, older_than_seconds: float) -> int:
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    deleted, _ = SessionEvent.objects.filter(transient=True, created_at__lt=cutoff).delete()
    return deleted


def event_log_prune(*, retention_seconds: float) -> int:
    """Expire the event-log rows no client can need; returns how many were deleted.

    Pages render from the tables, and the log only bridges a page's render to its live
    socket (and lets a reconnecting socket catch up). So:
    - the stream chunks of an item that has completed go ``retention_seconds`` after
      they were written: the item's completed event carries its whole text;
    - every event of a session that has ended and has nothing running any more (no chat
      answer, no scoring) goes ``retention_seconds`` after its last one. The session
      remembers the newest id it lost, and a socket resuming from before it reloads
      the page instead (consumers.py; the /api/v1/ws catch-up answers overflow).
    """
    cutoff = timezone.now() - timedelta(seconds=retention_seconds)
    streaming = TimelineEvent.objects.filter(status=TimelineEventStatus.STREAMING)
    deleted, _ = (
        SessionEvent.objects.filter(transient=True, created_at__lt=cutoff)
        .exclude(timeline_event_id__in=streaming.values("id"))
        .delete()
    )
    idle = (
        AlertSession.objects.filter(status__in=TERMINAL_SESSION_STATUSES)
        .exclude(chat_messages__status__in=OPEN_CHAT_STATUSES)
        .exclude(scores__status__in=[ScoreStatus.PENDING, ScoreStatus.IN_PROGRESS])
        .values("id")
    )
    ended = (
        SessionEvent.objects.filter(session_id__in=idle)
        .values("session_id")
        .annotate(newest=Max("id"), last_at=Max("created_at"))
        .filter(last_at__lt=cutoff)
        .values_list("session_id", "newest")
    )
    for session_id, newest in list(ended):
        with transaction.atomic():
            count, _ = SessionEvent.objects.filter(session_id=session_id, id__lte=newest).delete()
            AlertSession.objects.filter(id=session_id, events_pruned_through__lt=newest).update(
                events_pruned_through=newest
            )
        deleted += count
    return deleted


def mcp_server_health_record(
    *, server_id: str, healthy: bool, tools: list[dict[str, str]], error: str = ""
) -> None:
    """An unhealthy check keeps the last known tools: the alert form still offers them."""
    defaults: dict[str, Any] = {"healthy": healthy, "error": error, "checked_at": timezone.now()}
    if healthy:
        defaults["tools"] = tools
    MCPServerHealth.objects.update_or_create(server_id=server_id, defaults=defaults)
