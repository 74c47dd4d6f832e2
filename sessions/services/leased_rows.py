"""Recovery of work held on a row of its own under a lease (a scoring, a feedback
reflection): what a killed or stalled worker left ``in_progress`` is ended ``timed_out``,
and what no worker claimed in time is queued again. The session's own recovery is in
``lifecycle`` (reaping) and ``queue`` (requeueing); these rows follow the same rules."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from sessions.models import ScoreStatus
from sessions.services.leases import Lease

logger = logging.getLogger(__name__)


def time_out_orphans(
    rows: type[models.Model],
    *,
    threshold_seconds: float,
    lease_of: Callable[[Any, Any, uuid.UUID], Lease],
    end: Callable[[Lease, str], None],
    what: str,
) -> list[Any]:
    """End ``timed_out`` the rows in progress whose worker stopped heart-beating.

    Decide first: one conditional UPDATE per row, staleness inside its WHERE, takes the
    lease (``lease_of(row id, session id, token)``); only a row it took is ended, by
    ``end(lease, message)`` in the same transaction. ``what`` names the work in words."""
    cutoff = timezone.now() - timedelta(seconds=threshold_seconds)
    stale = Q(status=ScoreStatus.IN_PROGRESS) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    )
    reaper = f"reaper@{socket.gethostname()}:{os.getpid()}"
    manager = rows._default_manager
    reaped = []
    for row_id, session_id, worker in manager.filter(stale).values_list(
        "id", "session_id", "worker_id"
    ):
        lease = lease_of(row_id, session_id, uuid.uuid4())
        with transaction.atomic():
            taken = manager.filter(stale, id=row_id).update(
                lease_token=lease.token, worker_id=reaper
            )
            if taken != 1:
                continue  # its worker came back, or another recovery got there first
            end(
                lease,
                f"The worker {worker or '?'} stopped reporting progress for more than "
                f"{threshold_seconds:g} s; the {what} was marked timed out.",
            )
        reaped.append(row_id)
    if reaped:
        logger.warning("recovery: timed out %d orphaned %s(s)", len(reaped), what)
    return reaped


def requeue_lost(
    rows: type[models.Model],
    *,
    older_than_seconds: float,
    enqueue: Callable[[Any], None],
    what: str,
) -> list[Any]:
    """Queue again the pending rows no worker has claimed in time (their task was pulled
    by a cluster that died). Conditional, so that two clusters' recoveries queue one task,
    not two; a duplicate task would be harmless anyway: only one claim succeeds."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    lost = rows._default_manager.filter(status=ScoreStatus.PENDING, heartbeat_at__lt=cutoff)
    requeued = []
    for row_id in lost.values_list("id", flat=True):
        with transaction.atomic():
            if lost.filter(id=row_id).update(heartbeat_at=timezone.now()):
                enqueue(row_id)
                requeued.append(row_id)
    if requeued:
        logger.warning("recovery: queued %d pending %s(s) again", len(requeued), what)
    return requeued
