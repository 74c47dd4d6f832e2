"""django-q2 entry points. They only call into services and the agents' executors.

Sessions, chat answers and scorings run the same way (``_run``): nothing starts in a
cluster that is stopping (the work goes back to the queue); room is taken in the worker
process's engine (worker/engine.py), then the work is claimed under a lease (a
re-delivered or duplicate task finds it claimed or ended and does nothing), and the
executor runs in the engine's event loop beside the process's other work, told when the
cluster wants it to stop.

In a qcluster worker the task returns as soon as its work has started, so the worker
takes its next task while the work runs: django-q2 acknowledges the task then, and what
keeps the work safe from there is its lease (a worker that dies stops heart-beating, and
recovery ends the work; worker/supervision.py). A process full of investigations leaves
the next one waiting, pending, for a worker with room (``session_defer``); a chat answer
or scoring waits for room of its own kind. Called anywhere else (a test, a shell), the
task waits for its work to end and returns how it ended: nothing would keep the work
alive after the caller returns.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from django.db import close_old_connections

from agents.chat import execute_chat
from agents.executor import execute_session
from agents.scoring import execute_feedback_reflection, execute_scoring
from sessions import services
from sessions.services.leases import Interruption
from worker import engine, slack, supervision

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
        defer=lambda: services.session_defer(session_id=session_id),
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


def reflect_on_feedback(reflection_id: str) -> str:
    """Draw lessons from one review's feedback (the feedback Reflector)."""
    return _run(
        reflection_id,
        what="feedback reflection",
        requeue_unstarted=lambda before: services.feedback_reflection_requeue_unstarted(
            reflection_id=reflection_id, queued_before=before
        ),
        claim=lambda worker_id: _skipped_unless(
            services.feedback_reflection_claim(reflection_id=reflection_id, worker_id=worker_id)
        ),
        execute=execute_feedback_reflection,
    )


def slack_notify(session_id: str, kind: str) -> str:
    """Post a session's Slack message (``start``, ``end``, a repeat's ``rep-N``) once;
    failures are recorded on the session, never raised (fail open)."""
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
    defer: Callable[[], bool] | None = None,
) -> str:
    """Claim one piece of work and start it in this process's engine; what the task
    returns is what django-q2 records. ``what`` names the work in a stop's reason
    ("session", "answer", "scoring"); ``claim`` returns the lease, or None and why not;
    ``defer`` leaves it waiting for a worker with room (sessions; without it, the task
    waits for room here)."""
    with supervision.running(work_id):
        if skipped := _not_now(requeue_unstarted):
            return skipped
        kind = engine.SESSION if what == "session" else engine.FOLLOWUP
        slot = engine.engine().reserve(kind, wait=defer is None, give_up=_giving_up)
        if slot is None:
            if skipped := _not_now(requeue_unstarted):
                return skipped
            assert defer is not None  # only a task that does not wait gets no slot
            if not defer():
                return "skipped"
            logger.info("%s %s: deferred, this worker is full", what, work_id)
            return f"deferred: this worker runs {engine.capacity(kind)} already"
        try:
            started = _start(slot, work_id, what, claim, execute)
        finally:
            close_old_connections()
    if isinstance(started, str):
        return started  # not claimed, and why
    if supervision.in_cluster():
        started.add_done_callback(lambda future: _log_end(what, work_id, future))
        return "started"
    return started.result()


def _start(
    slot: engine.Slot,
    work_id: str,
    what: str,
    claim: Callable[[str], tuple[Any, str]],
    execute: Callable[..., Coroutine[Any, Any, str]],
) -> concurrent.futures.Future[str] | str:
    """Claim the work and run it in ``slot``: its future, or why it was not claimed."""
    try:
        lease, outcome = claim(f"{socket.gethostname()}:{os.getpid()}")
        if lease is None:
            slot.release()
            logger.info("%s %s: %s", what, work_id, outcome)
            return outcome
        # Marked from now until it ends, in the engine's thread: the parent watch waits
        # for it (worker/supervision.py).
        supervision.work_began(work_id)
        try:
            work = execute(lease, should_stop=_stop_check(what))
            return slot.engine.run(slot, work_id, _marked_until_it_ends(work_id, work))
        except BaseException:
            supervision.work_ended(work_id)
            raise
    except BaseException:
        slot.release()
        raise


async def _marked_until_it_ends(work_id: str, work: Coroutine[Any, Any, str]) -> str:
    try:
        return await work
    finally:
        supervision.work_ended(work_id)


def _stop_check(what: str) -> Callable[[], Interruption | None]:
    return lambda: supervision.stop_reason(what)


def _giving_up() -> bool:
    return supervision.stopping() or supervision.cluster_lost()


def _log_end(what: str, work_id: str, future: concurrent.futures.Future[str]) -> None:
    """What django-q2 would have recorded, had the task waited for it."""
    if future.cancelled():
        logger.error("%s %s: cancelled in the engine", what, work_id)
    elif (error := future.exception()) is not None:
        logger.error("%s %s crashed", what, work_id, exc_info=error)
    else:
        logger.info("%s %s: %s", what, work_id, future.result())


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
