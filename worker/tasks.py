"""django-q2 entry points. They only call into services and the agents' executors.

Sessions, chat answers and scorings run the same way (``_run``): nothing starts in a
cluster that is stopping (the work goes back to the queue), the work is claimed under a
lease (a re-delivered or duplicate task finds it claimed or ended and does nothing), and
the executor runs in its own event loop, told when the cluster wants it to stop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from django.db import close_old_connections

from agents.chat import execute_chat
from agents.executor import execute_session
from agents.scoring import execute_scoring
from sessions import services
from worker import slack, supervision

logger = logging.getLogger(__name__)


def run_session(session_id: str) -> str:
    """Run one session's chain."""

    def claim(worker_id: str) -> tuple[Any, str]:
        claimed = services.session_claim(session_id=session_id, worker_id=worker_id)
        return claimed.lease, claimed.outcome

    return _run(
        session_id,
        what="session",
        requeue_unstarted=lambda before: services.session_requeue_unstarted(
            session_id=session_id, queued_before=before
        ),
        claim=claim,
        execute=execute_session,
    )


def run_chat_message(message_id: str) -> str:
    """Answer one follow-up question."""
    return _run(
        message_id,
        what="answer",
        requeue_unstarted=lambda before: services.chat_message_requeue_unstarted(
            message_id=message_id, queued_before=before
        ),
        claim=lambda worker_id: _skipped_unless(
            services.chat_message_claim(message_id=message_id, worker_id=worker_id)
        ),
        execute=execute_chat,
    )


def score_session(score_id: str) -> str:
    """Score one ended session."""
    return _run(
        score_id,
        what="scoring",
        requeue_unstarted=lambda before: services.score_requeue_unstarted(
            score_id=score_id, queued_before=before
        ),
        claim=lambda worker_id: _skipped_unless(
            services.score_claim(score_id=score_id, worker_id=worker_id)
        ),
        execute=execute_scoring,
    )


def slack_notify(session_id: str, kind: str) -> str:
    """Post a session's Slack message (``start`` or ``end``) once; failures are recorded on
    the session, never raised (fail open)."""
    close_old_connections()
    message = slack.deliver(session_id, kind)
    return "skipped" if message is None else message.status


def _run(
    work_id: str,
    *,
    what: str,
    requeue_unstarted: Callable[[datetime], object],
    claim: Callable[[str], tuple[Any, str]],
    execute: Callable[..., Coroutine[Any, Any, str]],
) -> str:
    """Claim one piece of work and run it to its end; what the task returns is what
    django-q2 records. ``what`` names the work in a stop's reason ("session", "answer",
    "scoring"); ``claim`` returns the lease, or None and why not."""
    with supervision.running(work_id):
        if skipped := _not_now(requeue_unstarted):
            return skipped
        lease, outcome = claim(f"{socket.gethostname()}:{os.getpid()}")
        if lease is None:
            logger.info("%s %s: %s", what, work_id, outcome)
            return outcome
        try:
            return asyncio.run(execute(lease, should_stop=lambda: supervision.stop_reason(what)))
        finally:
            close_old_connections()


def _skipped_unless(lease: Any) -> tuple[Any, str]:
    return lease, "skipped"


def _not_now(requeue_unstarted: Callable[[datetime], object]) -> str | None:
    """Why this worker must not start the work it was handed, if it must not. A stopping
    cluster's workers start nothing (django-q2 hands them the tasks it pulled before its
    stop pills); the work is queued again, unless that was done already."""
    if supervision.cluster_lost():
        return "skipped: this worker's cluster is gone"
    close_old_connections()
    if supervision.stopping():
        requeue_unstarted(supervision.stop_began())
        return "skipped: this worker's cluster is stopping"
    return None
