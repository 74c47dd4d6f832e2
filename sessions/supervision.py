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
runs no session, and after ending its session ``failed`` with the reason when it does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

from django import db
from django.conf import settings

from sessions import services

logger = logging.getLogger(__name__)

_PARENT_POLL = 0.2  # seconds between checks that this process's parent still lives
_SESSION_GRACE = 15.0  # seconds a worker gets to end its session after its cluster died

_parent_lost = threading.Event()
_running_session: str | None = None


# --- in the worker processes -------------------------------------------------------------


def watch_parent_in_children() -> None:
    """From now on, every process forked from this one (and from those) exits when its
    parent dies. Call in the qcluster main process before the cluster forks."""
    os.register_at_fork(after_in_child=_start_watching_parent)


def _start_watching_parent() -> None:
    _parent_lost.clear()
    parent = os.getppid()
    threading.Thread(
        target=_watch_parent, args=(parent,), name="tarsy-parent-watch", daemon=True
    ).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL)
    _parent_lost.set()
    if _running_session is not None:
        logger.error(
            "the qcluster process %s died; ending session %s before exiting",
            parent,
            _running_session,
        )
        deadline = time.monotonic() + _SESSION_GRACE
        while _running_session is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    # No atexit, no multiprocessing clean-up: they would wait for the dead parent.
    os._exit(1)


def stop_reason() -> str | None:
    """Why this worker must end its session now, if it must (polled by the executor)."""
    if _parent_lost.is_set():
        return (
            f"The worker's cluster process died (worker {socket.gethostname()}:{os.getpid()}); "
            "the session was interrupted."
        )
    return None


def cluster_lost() -> bool:
    return _parent_lost.is_set()


@contextlib.contextmanager
def running(session_id: str) -> Iterator[None]:
    """Marks the session this worker process is running, for the parent watch."""
    global _running_session
    _running_session = session_id
    try:
        yield
    finally:
        _running_session = None


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


def cluster_silence_limit() -> float:
    """A cluster that has not beaten for this long is dead (three missed beats)."""
    return 3 * settings.TARSY_RECOVERY_INTERVAL


def supervise(
    is_alive: Callable[[], bool], *, workers: int, wait: Callable[[float], object]
) -> None:
    """Beat and recover until the cluster stops. ``is_alive()`` says whether the cluster
    still runs; ``wait(seconds)`` sleeps, returning early when it stops."""
    cluster_id = uuid.uuid4()
    host, pid = socket.gethostname(), os.getpid()
    logger.info("TARSy supervisor for cluster %s:%s started", host, pid)
    while is_alive():
        db.close_old_connections()
        try:
            services.worker_cluster_beat(cluster_id=cluster_id, host=host, pid=pid, workers=workers)
            done = recover()
            if any(count for name, count in done.items() if name != "purged_events"):
                logger.warning("recovery: %s", done)
        except Exception:
            # The database may be down for a while; the next pass tries again.
            logger.exception("recovery pass failed")
        wait(settings.TARSY_RECOVERY_INTERVAL)
    try:
        services.worker_cluster_stopped(cluster_id=cluster_id)
    except Exception:
        logger.exception("could not record that the cluster stopped")
