"""Keeping the workers honest: TARSy's side of ``manage.py qcluster``.

**Recovery**, in the cluster's main process, every ``TARSY_RECOVERY_INTERVAL``: record the
cluster's own heartbeat (for /health and for the other clusters), time out sessions (and
chat answers) whose worker stopped heart-beating, queue again the pending sessions a dead
cluster may have pulled (as soon as it is known dead: three missed beats) and any
that no worker started within ``TARSY_PENDING_RECOVERY_AFTER`` (chat questions too), and
queue sessions waiting for room under ``TARSY_MAX_CONCURRENT_SESSIONS``. Every cluster does this; every step is a conditional write, so two
clusters never do the same thing twice.

**No orphans.** django-q2's processes form a tree: main → sentinel → workers, pusher,
monitor. When a parent dies (kill -9, OOM), its children live on, re-parented, and keep
taking tasks beside the cluster that replaces it. Every process forked under the main
one therefore watches its parent: once the parent is gone it exits — at once when it
runs no work, and after ending each session, chat answer and scoring it runs (a worker
runs many at once, worker/engine.py) ``failed`` with the reason when it does.

**Stopping.** SIGTERM or SIGINT to the main process stops the cluster within
``TARSY_SHUTDOWN_GRACE``. django-q2 alone would wait for every running session (up to its
40-minute timeout), and would still start the tasks it had already pulled: its stop
pills queue behind them. Instead, from the signal on, the pusher pulls nothing, a worker
starts none of the work it is handed (and that work is queued again at once, for another
cluster or this one restarted), and the work running gets the grace to finish. At the
deadline each piece of work a worker still runs is ended by its own lease keeper
(agents/executor.py): ``failed`` saying why, or back to ``pending`` with
``TARSY_SHUTDOWN_REQUEUE``; the worker exits once all of it has ended. The
children ignore SIGTERM and SIGINT themselves, so a signal to the whole process group
(systemd, ``kill -TERM -<pgid>``, Ctrl-C) stops the cluster the same way instead of
killing workers mid-session.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import django_q.cluster
import django_q.worker
from django import db
from django.conf import settings
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from sessions import services
from sessions.selectors import cluster_silence_limit
from sessions.services.leases import Interruption
from worker import engine

logger = logging.getLogger(__name__)

_PARENT_POLL = 0.2  # seconds between checks that this process's parent still lives
_LOCK_RETRY = 0.005  # seconds before a worker looks at the task queue again (TaskQueue)
# Seconds a worker with no room left waits before reaching for a task, so that one with
# room gets it (a worker with half its room taken waits half as long).
_BUSY_DEFERENCE = 0.05
_SESSION_GRACE = 15.0  # seconds a worker gets to end its session after its cluster died
# Seconds past the shutdown deadline after which a process of a stopping cluster exits
# whatever it is doing (a worker stuck in a call that ignores cancellation); what it
# leaves running, the other clusters' orphan reaper ends.
_STRAGGLER_LIMIT = 5.0

_parent_lost = threading.Event()
# The sessions, chat answers and scorings this process runs (ids; a duplicate task of one
# counts twice while both hold it): the parent watch waits for them to end.
_running: collections.Counter[str] = collections.Counter()
_running_lock = threading.Lock()
_main_pid: int | None = None
# Made by the main process before it forks, so every process of the cluster shares it:
# [shutdown deadline (time.monotonic(): on Linux one clock for all processes of a host),
# when the stop began (epoch seconds), the signal's number]; all 0 while the cluster runs.
_shutdown: Any = None


# --- in the cluster's main process, before it forks ----------------------------------------


def prepare_cluster() -> None:
    """Call in the qcluster main process before the cluster forks: from now on every
    process forked from this one (and from those) exits when its parent dies, leaves
    SIGTERM and SIGINT to the main process, and sees when the cluster stops."""
    global _main_pid, _shutdown
    _main_pid = os.getpid()
    _shutdown = multiprocessing.RawArray("d", 3)
    os.register_at_fork(after_in_child=_in_child)
    # The sentinel, forked from here, starts every worker with this module-level name.
    django_q.cluster.worker = _worker


def _worker(task_queue: Any, result_queue: Any, timer: Any, timeout: Any = None) -> None:
    """django-q2's worker, reading its tasks through ``TaskQueue``; the busier its engine,
    the longer it lets the other workers reach for a task first."""
    reader = TaskQueue(task_queue, defer=lambda: engine.busy() * _BUSY_DEFERENCE)
    django_q.worker.worker(reader, result_queue, timer, timeout)


class TaskQueue:
    """The cluster's task queue as a worker reads it, without holding the queue's read
    lock while it waits.

    multiprocessing's blocking ``get`` holds that lock, a semaphore the cluster's workers
    share, for as long as the queue stays empty. A worker killed meanwhile (kill -9, the
    OOM killer) takes the lock with it, and no worker of the cluster ever reads a task
    again. A worker whose sessions run in its engine (worker/engine.py) waits there
    nearly all the time, so it waits for the queue's pipe to be readable instead, and
    takes the lock only to read what is already there.
    """

    def __init__(self, tasks: Any, *, defer: Callable[[], float] = lambda: 0.0) -> None:
        """``tasks`` is the multiprocessing queue; ``defer()`` says how many seconds to
        let the other workers reach for a task first."""
        self._queue = tasks
        self._defer = defer

    def get(self) -> Any:
        while True:
            multiprocessing.connection.wait([self._queue._reader])
            # Every waiting worker wakes for a task: a busy one lets an idler one take
            # it (the readers race; nothing else spreads the work between them).
            if (pause := self._defer()) > 0:
                time.sleep(pause)
            try:
                return self._queue.get(block=False)
            except queue.Empty:
                # Another worker read it first, or is reading it now: look again in a
                # moment (not at once: a lock whose holder died would make that a spin).
                time.sleep(_LOCK_RETRY)


def take_stop_signals() -> None:
    """SIGTERM and SIGINT start a graceful stop (``request_stop``) instead of django-q2's
    stop, which waits for every running task. Call after the ``Cluster`` is made: it
    installs its own handlers."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: request_stop(signum))


def request_stop(signum: int = signal.SIGTERM) -> None:
    """Stop the cluster: no more work from now, and ``TARSY_SHUTDOWN_GRACE`` for the work
    running. A second signal changes nothing. Safe in a signal handler: it only writes
    the shared numbers."""
    if _shutdown is None or _shutdown[0]:
        return
    _shutdown[1] = time.time()
    _shutdown[2] = signum
    # Last: a process that sees the deadline sees the rest too.
    _shutdown[0] = time.monotonic() + settings.TARSY_SHUTDOWN_GRACE


def stopping() -> bool:
    """Whether this process's cluster has been told to stop."""
    return _shutdown is not None and _shutdown[0] > 0


def stop_began() -> datetime:
    """When the cluster was told to stop (``stopping()`` must be true)."""
    return datetime.fromtimestamp(_shutdown[1], tz=UTC)


def _past_deadline(extra: float = 0.0) -> bool:
    return stopping() and time.monotonic() >= _shutdown[0] + extra


# --- in the processes forked from it --------------------------------------------------------


def in_cluster() -> bool:
    """Whether this process is one a qcluster forked (a worker), rather than the main
    process, a web process, a shell or a test."""
    return _main_pid is not None and os.getpid() != _main_pid


def _in_child() -> None:
    if os.getppid() == _main_pid:
        # The sentinel. django-q2 sets its SIGTERM back to the default (die at once, its
        # workers orphaned) after this runs; blocked, the signal never arrives. Before
        # the watch thread starts: a thread inherits its creator's mask.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    else:
        # Workers, pusher, monitor. A handler rather than SIG_IGN or a blocked mask:
        # both would pass on to the MCP servers a worker starts, which must still stop
        # when their client sends them SIGTERM; a handler is reset by exec.
        signal.signal(signal.SIGTERM, _leave_it_to_the_main_process)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _start_watching_parent()


def _leave_it_to_the_main_process(signum: int, frame: object) -> None:
    """The main process stops the cluster in order (a signal to the whole group reaches
    it too); a child that died here would take its session with it."""


def _start_watching_parent() -> None:
    _parent_lost.clear()
    parent = os.getppid()
    threading.Thread(
        target=_watch_parent, args=(parent,), name="tarsy-parent-watch", daemon=True
    ).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        if _past_deadline(_STRAGGLER_LIMIT):
            logger.error(
                "still running %s %.0f s after the shutdown deadline; exiting",
                ", ".join(running_work()) or "(no work)",
                _STRAGGLER_LIMIT,
            )
            os._exit(1)
        time.sleep(_PARENT_POLL)
    _parent_lost.set()
    if running_work():
        logger.error(
            "the qcluster process %s died; ending %s before exiting",
            parent,
            ", ".join(running_work()),
        )
        deadline = time.monotonic() + _SESSION_GRACE
        while running_work() and time.monotonic() < deadline:
            time.sleep(0.05)
    # No atexit, no multiprocessing clean-up: they would wait for the dead parent.
    os._exit(1)


def stop_reason(work: str = "session") -> Interruption | None:
    """Why this worker must end its ``work`` now, if it must (polled by the executor's
    lease keeper): its cluster died, or was told to stop and the grace is over."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    if _parent_lost.is_set():
        return Interruption(
            f"The worker's cluster process died (worker {worker}); the session was interrupted."
        )
    if not _past_deadline():
        return None
    stopped = (
        f"The worker {worker} was stopped ({signal.Signals(int(_shutdown[2])).name}) before "
        f"the {work} finished: it had {settings.TARSY_SHUTDOWN_GRACE:g} s to finish "
        "(TARSY_SHUTDOWN_GRACE)"
    )
    if settings.TARSY_SHUTDOWN_REQUEUE:
        return Interruption(
            f"{stopped}. The {work} was queued again and runs from the start on the next "
            "free worker.",
            requeue=True,
        )
    return Interruption(f"{stopped}.")


def cluster_lost() -> bool:
    return _parent_lost.is_set()


@contextlib.contextmanager
def running(work_id: str) -> Iterator[None]:
    """Marks work (a session, a chat answer, a scoring) this worker process runs, for the
    parent watch. Any thread; overlapping marks of one id count apart."""
    work_began(work_id)
    try:
        yield
    finally:
        work_ended(work_id)


def work_began(work_id: str) -> None:
    """``running`` for work that ends in another thread than it began (``work_ended``)."""
    with _running_lock:
        _running[work_id] += 1


def work_ended(work_id: str) -> None:
    with _running_lock:
        _running[work_id] -= 1
        if _running[work_id] <= 0:
            del _running[work_id]


def running_work() -> list[str]:
    """The ids of the work this process runs now."""
    with _running_lock:
        return list(_running)


class Broker(ORM):
    """django-q2's ORM broker, except that a stopping cluster pulls nothing: its pusher
    would otherwise go on pulling until the sentinel gets round to stopping it, and its
    workers would run (or skip) what it pulled."""

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        if stopping():
            time.sleep(Conf.POLL)
            return None
        tasks = super().dequeue()
        if tasks and stopping():
            # Pulled as the stop began: hand them back at once, or their lock would keep
            # them from every cluster for Q_CLUSTER's retry (40+ minutes).
            self.get_connection().filter(id__in=[ack_id for ack_id, _ in tasks]).update(
                lock=timezone.now()
            )
            return None
        return tasks


# --- in the cluster's main process ---------------------------------------------------------


def recover() -> dict[str, int]:
    """One recovery pass; returns what it did (for the log and the tests)."""
    reaped = services.sessions_time_out_orphans(threshold_seconds=settings.TARSY_ORPHAN_THRESHOLD)
    reaped += services.chat_messages_time_out_orphans(
        threshold_seconds=settings.TARSY_ORPHAN_THRESHOLD
    )
    stranded = services.worker_clusters_bury(silent_for_seconds=cluster_silence_limit())
    requeued = services.sessions_requeue_lost(
        older_than_seconds=settings.TARSY_PENDING_RECOVERY_AFTER
    )
    requeued += services.chat_messages_requeue_lost(
        older_than_seconds=settings.TARSY_PENDING_RECOVERY_AFTER
    )
    dispatched = services.sessions_dispatch_waiting()
    purged = services.event_log_prune(retention_seconds=settings.TARSY_EVENT_RETENTION)
    purged += services.transient_events_purge(older_than_seconds=settings.TARSY_TRANSIENT_EVENT_TTL)
    return {
        "timed_out": len(reaped),
        "requeued": len(stranded) + len(requeued),
        "dispatched": len(dispatched),
        "purged_events": purged,
    }


def supervise(sentinel: multiprocessing.Process, stop_event: Any, *, workers: int) -> bool:
    """Beat and recover until the cluster stops, then see it stop; False when a process
    had to be killed. ``sentinel`` is django-q2's; ``stop_event`` tells it to stop."""
    cluster_id = uuid.uuid4()
    host, pid = socket.gethostname(), os.getpid()
    logger.info("TARSy supervisor for cluster %s:%s started", host, pid)
    while sentinel.is_alive() and not stopping():
        db.close_old_connections()
        try:
            services.worker_cluster_beat(
                cluster_id=cluster_id,
                host=host,
                pid=pid,
                workers=workers,
                sessions_per_worker=settings.TARSY_WORKER_SESSIONS,
            )
            done = recover()
            if any(count for name, count in done.items() if name != "purged_events"):
                logger.warning("recovery: %s", done)
        except Exception:
            # The database may be down for a while; the next pass tries again.
            logger.exception("recovery pass failed")
        _wait(settings.TARSY_RECOVERY_INTERVAL, until=lambda: stopping() or not sentinel.is_alive())
    try:
        # It takes no more work: /health and the metrics stop counting it now.
        services.worker_cluster_stopped(cluster_id=cluster_id)
    except Exception:
        logger.exception("could not record that the cluster stopped")
    if not stopping():
        return True  # the sentinel ended on its own
    return _shut_down(sentinel, stop_event)


def _shut_down(sentinel: multiprocessing.Process, stop_event: Any) -> bool:
    began = time.monotonic()
    grace = settings.TARSY_SHUTDOWN_GRACE
    logger.warning(
        "%s: taking no more work; running work has %g s to finish (TARSY_SHUTDOWN_GRACE)",
        signal.Signals(int(_shutdown[2])).name,
        grace,
    )
    # The sentinel stops its pusher, then its workers once they are done with the tasks
    # they hold (each ends its work by the deadline), then its monitor.
    stop_event.set()
    try:
        requeued = services.work_requeue_pulled(queued_before=stop_began())
        if requeued:
            logger.warning("queued again %d pulled task(s) no worker had started", requeued)
    except Exception:
        # Each worker queues again what it is handed but does not start, too.
        logger.exception("could not queue again the work this cluster had pulled")
    limit = _shutdown[0] + _STRAGGLER_LIMIT + 1
    while sentinel.is_alive() and time.monotonic() < limit:
        sentinel.join(timeout=0.1)
    if sentinel.is_alive():
        logger.error("the cluster did not stop in time; killing what is left of it")
        sentinel.kill()
        sentinel.join(timeout=5)
        return False
    logger.warning("stopped in %.1f s", time.monotonic() - began)
    # Not 0: it gave up waiting for a worker that would not end its work (_STRAGGLER_LIMIT).
    return sentinel.exitcode == 0


def _wait(seconds: float, *, until: Callable[[], bool]) -> None:
    """Sleep ``seconds``, or less once ``until()``. In short naps: the stop is asked for
    in a signal handler, which cannot safely wake a waiting lock."""
    deadline = time.monotonic() + seconds
    while not until() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
