"""django-q2 entry points. They only call into services and the agents executor."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from django.conf import settings
from django.db import close_old_connections

from sessions import services

logger = logging.getLogger(__name__)


def run_session(session_id: str) -> str:
    """Run one session. Idempotent: a re-delivered task finds the session claimed and stops."""
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    close_old_connections()
    if not services.session_claim(session_id=session_id, worker_id=worker_id):
        logger.info("session %s is not pending; another worker has or had it", session_id)
        return "skipped"
    from agents.executor import execute_session

    try:
        return asyncio.run(execute_session(session_id))
    finally:
        close_old_connections()


def reap_orphans() -> int:
    """Scheduled: time out sessions whose worker died, and drop expired stream chunks."""
    reaped = services.sessions_time_out_orphans(threshold_seconds=settings.TARSY_ORPHAN_THRESHOLD)
    services.transient_events_purge(older_than_seconds=settings.TARSY_TRANSIENT_EVENT_TTL)
    return len(reaped)
