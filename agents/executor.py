"""Runs one claimed session: its chain's stages in order, then the executive summary.

The session's task runs beside a keeper that holds its lease: it renews it, stops the
run when the lease is lost (reaped, timed out elsewhere — nothing more is written),
ends it ``cancelled`` when someone cancels the session, stops a single agent someone
cancelled, and when ``should_stop`` says so (the worker's cluster died, or was stopped
and its grace is over) ends it ``failed``, or puts it back in the queue (``requeue``).
A chat answer and a scoring run under the same keeper (``run_leased``; agents/chat.py,
agents/scoring.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError

from agents.budget import SessionBudget
from agents.memory import session_memories
from agents.recorder import db, forget_streams, save_streams
from agents.runs import RunControl, SessionRun
from agents.stages import (
    SessionFailure,
    StageFailed,
    executive_summary,
    previous_context,
    run_stage,
)
from config.loader import get_config
from config.types import TarsyConfig
from masking import mask_text
from sessions import runbooks, services
from sessions.models import AlertSession, SessionStatus, TimelineEventType
from sessions.services.leases import Interruption

logger = logging.getLogger(__name__)

__all__ = ["LEASE_LOST", "SessionFailure", "StageFailed", "Stop", "execute_session", "run_leased"]

LEASE_LOST = "lease_lost"
LeaseT = TypeVar("LeaseT", bound=services.Lease)


class Stop:
    """Why the session's task was cancelled from outside: its lease was lost (write
    nothing more), or the keeper has ended it, or put it back in the queue, already
    (``status``)."""

    def __init__(self) -> None:
        self.lease_lost = False
        self.status: SessionStatus | None = None


async def execute_session(
    lease: services.Lease, *, should_stop: Callable[[], Interruption | None] | None = None
) -> str:
    """Run one claimed session to its end; returns the status it ended with (``pending``
    when it was put back in the queue)."""
    return await run_leased(
        lease,
        _run_session,
        name=f"session-{lease.session_id}",
        should_stop=should_stop,
        end=services.session_end,
        requeue=services.session_requeue,
    )


async def run_leased(
    lease: LeaseT,
    work: Callable[[LeaseT, Stop, RunControl], Coroutine[Any, Any, str]],
    *,
    name: str,
    should_stop: Callable[[], Interruption | None] | None,
    end: Callable[..., None],
    requeue: Callable[..., bool],
) -> str:
    """Run ``work`` beside a keeper of ``lease`` (a session's, a chat answer's or a
    scoring's, which ``end`` ends and ``requeue`` puts back in the queue); returns the
    status it ended with."""
    stop, control = Stop(), RunControl()
    run = asyncio.create_task(work(lease, stop, control), name=name)
    keeper = asyncio.create_task(
        _keep_lease(lease, run, stop, control, should_stop, end, requeue), name="lease-keeper"
    )
    try:
        return await run
    except asyncio.CancelledError:
        if not (stop.lease_lost or stop.status):
            raise
        # Stopped while it was writing its end: that write finishes in its thread anyway.
        if stop.lease_lost:
            return LEASE_LOST
        assert stop.status is not None  # checked above
        return stop.status
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        forget_streams(lease)


class _LeaseChecks:
    """One read per round for every lease the keepers of an event loop hold.

    A worker runs many sessions on one loop (worker/engine.py), each beside a keeper that
    looks at its lease every ``TARSY_LEASE_CHECK_INTERVAL``. Read one by one, those looks
    were a third of a busy worker's database time. Keepers wake at the same instants (the
    interval's multiples on the monotonic clock), ask here, and one query answers them all.
    """

    def __init__(self) -> None:
        self.asked: dict[services.Lease, list[asyncio.Future[services.LeaseState | None]]] = {}
        self.reader: asyncio.Task[None] | None = None

    async def status(self, lease: services.Lease) -> services.LeaseState | None:
        answer: asyncio.Future[services.LeaseState | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.asked.setdefault(lease, []).append(answer)
        if self.reader is None or self.reader.done():
            self.reader = asyncio.create_task(self._read(), name="lease-checks")
        return await answer

    async def _read(self) -> None:
        while self.asked:
            await asyncio.sleep(_GATHER)  # the keepers waking at this instant ask too
            asked, self.asked = self.asked, {}
            try:
                states = await db(services.leases_status)(leases=list(asked))
            except Exception as exc:
                for answers in asked.values():
                    for answer in answers:
                        if not answer.done():
                            answer.set_exception(exc)
                continue
            for lease, answers in asked.items():
                for answer in answers:
                    if not answer.done():
                        answer.set_result(states.get(lease))


_GATHER = 0.005  # seconds a round of lease checks waits for the keepers that woke with it
_lease_checks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LeaseChecks] = (
    weakref.WeakKeyDictionary()
)


def _checks() -> _LeaseChecks:
    loop = asyncio.get_running_loop()
    checks = _lease_checks.get(loop)
    if checks is None:
        checks = _lease_checks[loop] = _LeaseChecks()
    return checks


async def _until_next_check() -> None:
    interval = settings.TARSY_LEASE_CHECK_INTERVAL
    await asyncio.sleep(interval - time.monotonic() % interval)


async def _keep_lease(
    lease: services.Lease,
    run: asyncio.Task[str],
    stop: Stop,
    control: RunControl,
    should_stop: Callable[[], Interruption | None] | None,
    end: Callable[..., None],
    requeue: Callable[..., bool],
) -> None:
    last_beat = time.monotonic()
    while True:
        await _until_next_check()
        if should_stop is not None and (interruption := should_stop()):
            if not interruption.requeue:
                await _stop_now(
                    lease, run, stop, end, SessionStatus.FAILED, error_message=interruption.reason
                )
                return
            if await _requeue_now(lease, run, stop, requeue, interruption.reason):
                return
            # Being cancelled: the checks below end it as asked.
        try:
            if time.monotonic() - last_beat >= settings.TARSY_HEARTBEAT_INTERVAL:
                await db(services.session_heartbeat)(lease=lease)
                last_beat = time.monotonic()
            state = await _checks().status(lease)
            if state is None:
                raise services.LeaseLost(lease)
        except services.LeaseLost:
            stop.lease_lost = True
            run.cancel()
            return
        except DatabaseError as exc:
            # A database hiccup is not a lost lease; the next check tries again.
            logger.warning("session %s: lease check failed: %s", lease.session_id, exc)
            continue
        if state.status == SessionStatus.CANCELLING:
            # Cancelled is not failed: no error item; who and why are on the session.
            await _stop_now(
                lease,
                run,
                stop,
                end,
                SessionStatus.CANCELLED,
                close_reason=state.cancel_attribution,
            )
            return
        for execution_id, attribution in state.cancelled_executions:
            control.cancel(execution_id, attribution or "Cancelled")


async def _stop_now(
    lease: services.Lease,
    run: asyncio.Task[str],
    stop: Stop,
    end: Callable[..., None],
    status: SessionStatus,
    *,
    error_message: str = "",
    close_reason: str = "",
) -> None:
    """End the session first, then stop its task: what was streaming keeps its text, the
    status changes at once (not after MCP servers and streams have shut down), and any
    write the stopping task still attempts fails on the lease it no longer holds. The
    streamed text not saved yet is saved first: the pages have shown it."""
    await save_streams(lease)
    try:
        await db(end)(
            lease=lease,
            status=status,
            error_message=error_message,
            explain=bool(error_message),
            close_reason=close_reason or error_message,
        )
    except services.LeaseLost:
        stop.lease_lost = True
    else:
        stop.status = status
    run.cancel()


async def _requeue_now(
    lease: services.Lease,
    run: asyncio.Task[str],
    stop: Stop,
    requeue: Callable[..., bool],
    reason: str,
) -> bool:
    """Put the work back in the queue first, then stop its task, as ``_stop_now`` ends it;
    False when it is being cancelled instead (nothing done)."""
    await save_streams(lease)
    try:
        if not await db(requeue)(lease=lease, reason=reason):
            return False
    except services.LeaseLost:
        stop.lease_lost = True
    else:
        stop.status = SessionStatus.PENDING
    run.cancel()
    return True


async def _run_session(lease: services.Lease, stop: Stop, control: RunControl) -> str:
    session = await db(AlertSession.objects.get)(id=lease.session_id)
    try:
        try:
            async with asyncio.timeout(settings.TARSY_SESSION_TIMEOUT):
                final_analysis, summary, summary_error = await _run_chain(session, lease, control)
        except TimeoutError:
            # "timed out", the words TARSy's clients look for.
            limit = int(settings.TARSY_SESSION_TIMEOUT)
            message = f"The session timed out: it exceeded its timeout of {limit} s."
            return await _end(lease, SessionStatus.TIMED_OUT, message)
        except asyncio.CancelledError:
            if stop.lease_lost:
                raise services.LeaseLost(lease) from None
            if stop.status is None:
                raise  # cancelled by whoever runs us: not ours to record
            return stop.status  # the keeper has ended the session already
        except StageFailed as failure:
            return await _end(lease, SessionStatus.FAILED, str(failure), explain=False)
        except SessionFailure as failure:
            return await _end(lease, SessionStatus.FAILED, str(failure))
        except services.LeaseLost:
            raise
        except Exception as exc:
            logger.exception("session %s crashed", lease.session_id)
            message = f"Internal error: {type(exc).__name__}: {exc}"
            return await _end(lease, SessionStatus.FAILED, message)
        await db(services.session_end)(
            lease=lease,
            status=SessionStatus.COMPLETED,
            final_analysis=final_analysis,
            executive_summary=summary,
            executive_summary_error=summary_error,
        )
        return SessionStatus.COMPLETED
    except services.LeaseLost:
        if stop.status is not None:
            return stop.status  # ended by the keeper while a write was in flight
        # Reaped, timed out or cancelled elsewhere: whoever took the lease has written
        # the ending. Write nothing, stop.
        logger.warning("session %s: lease lost; this worker stops here", lease.session_id)
        return LEASE_LOST


async def _end(
    lease: services.Lease, status: SessionStatus, message: str, *, explain: bool = True
) -> str:
    await db(services.session_end)(
        lease=lease, status=status, error_message=message, explain=explain
    )
    return status


async def _run_chain(
    session: AlertSession, lease: services.Lease, control: RunControl
) -> tuple[str, str, str]:
    """(final analysis, executive summary, why there is no summary)."""
    config = get_config()
    chain = config.chains.get(session.chain_id)
    if chain is None:
        raise SessionFailure(
            f"Chain {session.chain_id!r} is no longer configured in {config.source}; "
            f"configured chains: {', '.join(config.chains)}"
        )
    run = SessionRun(
        session=session,
        lease=lease,
        config=config,
        chain=chain,
        control=control,
        # After the stages of a run interrupted by its worker's shutdown, if any.
        next_stage_index=session.first_stage_index,
        runbook=await session_runbook(session, lease, config),
        memories=await session_memories(session, lease, config),
        budget=await db(SessionBudget.of)(session, lease),
    )
    previous, analysis = "", ""
    skipped: list[str] = []
    for stage_config in chain.stages:
        # Checked between stages too: a stage ending at the limit starts no other.
        if run.budget is not None and await run.budget.exhausted():
            skipped.append(stage_config.name)
            continue
        result = await run_stage(run, stage_config, previous)
        analysis = result.analysis
        context = previous_context(
            result.findings, analysis, stage_config.name, stage_config.parallel
        )
        previous = f"{previous}\n\n{context}".strip()
    budget = run.budget
    if budget is not None and budget.stopped:
        if skipped:
            await db(services.session_budget_skipped)(lease=lease, stages=skipped)
        if not budget.summarize_after:
            return (
                analysis,
                "",
                f"the investigation was stopped by its budget ({budget.stopped}) "
                "and budget.after_limit is 'stop'",
            )
    summary, summary_error = await executive_summary(run, analysis)
    return analysis, summary, summary_error


async def session_runbook(session: AlertSession, lease: services.Lease, config: TarsyConfig) -> str:
    """The runbook the session's agents read: the alert's (URL or text), else the default.
    A URL that cannot be fetched leaves a warning on the timeline and no runbook."""
    url = session.runbook_url
    text = session.runbook
    if not url and not text:
        default = config.defaults.runbook.strip()
        url, text = (default, "") if runbooks.looks_like_url(default) else ("", default)
    if not url:
        return text
    try:
        # httpx's client is synchronous here; the thread keeps the event loop free.
        return await asyncio.to_thread(runbooks.fetch, url, config)
    except Exception as exc:  # whatever it was, the investigation goes on (fail open)
        reason = mask_text(str(exc)) or type(exc).__name__
        logger.warning("session %s: runbook %s: %s", session.id, url, reason)
        await db(services.timeline_event_add)(
            lease=lease,
            event_type=TimelineEventType.WARNING,
            content=f"The runbook could not be fetched ({reason}); the investigation goes on "
            "without it.",
            metadata={"source": "runbook", "url": url},
        )
        return ""
