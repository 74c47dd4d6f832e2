"""django-q2 entry points. They only call into services and the agents executor."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from datetime import datetime

from django.db import close_old_connections

from sessions import services
from worker import supervision

logger = logging.getLogger(__name__)


def run_session(session_id: str) -> str:
    """Run one session. Idempotent: a re-delivered or duplicate task finds the session
    claimed (or finished) and does nothing."""
    with supervision.running(session_id):
        if skipped := _not_now(
            lambda before: services.session_requeue_unstarted(
                session_id=session_id, queued_before=before
            )
        ):
            return skipped
        claim = services.session_claim(
            session_id=session_id, worker_id=f"{socket.gethostname()}:{os.getpid()}"
        )
        if claim.lease is None:
            logger.info("session %s: %s", session_id, claim.outcome)
            return claim.outcome
        from agents.executor import execute_session

        try:
            return asyncio.run(
                execute_session(claim.lease, should_stop=lambda: supervision.stop_reason("session"))
            )
        finally:
            close_old_connections()


def run_chat_message(message_id: str) -> str:
    """Answer one follow-up question. Idempotent like ``run_session``: a re-delivered or
    duplicate task finds the question taken (or answered) and does nothing."""
    with supervision.running(message_id):
        if skipped := _not_now(
            lambda before: services.chat_message_requeue_unstarted(
                message_id=message_id, queued_before=before
            )
        ):
            return skipped
        lease = services.chat_message_claim(
            message_id=message_id, worker_id=f"{socket.gethostname()}:{os.getpid()}"
        )
        if lease is None:
            logger.info("chat message %s: skipped (not pending)", message_id)
            return "skipped"
        from agents.chat import execute_chat

        try:
            return asyncio.run(
                execute_chat(lease, should_stop=lambda: supervision.stop_reason("answer"))
            )
        finally:
            close_old_connections()


def slack_notify(session_id: str, kind: str) -> str:
    """Post a session's Slack message (``start`` or ``end``) once; failures are recorded on
    the session, never raised (fail open)."""
    from worker import slack

    close_old_connections()
    message = slack.deliver(session_id, kind)
    return "skipped" if message is None else message.status


def score_session(score_id: str) -> str:
    """Score one ended session. Idempotent like ``run_session``: a duplicate or
    re-delivered task finds the score claimed (or ended) and does nothing."""
    with supervision.running(score_id):
        if skipped := _not_now(
            lambda before: services.score_requeue_unstarted(score_id=score_id, queued_before=before)
        ):
            return skipped
        lease = services.score_claim(
            score_id=score_id, worker_id=f"{socket.gethostname()}:{os.getpid()}"
        )
        if lease is None:
            logger.info("score %s: skipped (not pending)", score_id)
            return "skipped"
        from agents.scoring import execute_scoring

        try:
            return asyncio.run(
                execute_scoring(lease, should_stop=lambda: supervision.stop_reason("scoring"))
            )
        finally:
            close_old_connections()


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
