"""django-q2 entry points. They only call into services and the agents executor."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from django.db import close_old_connections

from sessions import services, supervision

logger = logging.getLogger(__name__)


def run_session(session_id: str) -> str:
    """Run one session. Idempotent: a re-delivered or duplicate task finds the session
    claimed (or finished) and does nothing."""
    with supervision.running(session_id):
        if supervision.cluster_lost():
            return "skipped: this worker's cluster is gone"
        close_old_connections()
        claim = services.session_claim(
            session_id=session_id, worker_id=f"{socket.gethostname()}:{os.getpid()}"
        )
        if claim.lease is None:
            logger.info("session %s: %s", session_id, claim.outcome)
            return claim.outcome
        from agents.executor import execute_session

        try:
            return asyncio.run(execute_session(claim.lease, should_stop=supervision.stop_reason))
        finally:
            close_old_connections()
