"""Slack messages about sessions: queued with the change they describe, recorded once.

``notify_on_start`` and ``notify_on_end`` run inside the transaction that starts or ends
the session (``followups``), so the task exists exactly when the change commits. The
task (``worker.tasks.slack_notify``) posts through ``worker/slack.py`` and records
the outcome here.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django_q.tasks import async_task

from config.loader import get_config
from sessions.models import AlertSession, SessionEventType, SlackMessage
from sessions.services.events import event_publish

logger = logging.getLogger(__name__)


def notify_on_start(session_id: Any) -> None:
    """Queue the "investigating" message of a session that has a Slack fingerprint."""
    if not get_config().system.slack.enabled:
        return
    if AlertSession.objects.filter(id=session_id).exclude(slack_message_fingerprint="").exists():
        _queue(session_id, SlackMessage.Kind.START)


def notify_on_end(session_id: Any, status: str) -> None:
    """Queue the message that says how a session ended."""
    if get_config().system.slack.enabled:
        _queue(session_id, SlackMessage.Kind.END)


def slack_message_record(
    *,
    session_id: Any,
    kind: str,
    channel: str,
    thread_ts: str = "",
    ts: str = "",
    error: str = "",
) -> SlackMessage | None:
    """What happened to one message: sent (with its ``ts``) or failed (with why). None
    when it was recorded already: the unique (session, kind) keeps the first outcome."""
    try:
        with transaction.atomic():
            message = SlackMessage.objects.create(
                session_id=session_id,
                kind=kind,
                status=SlackMessage.Status.FAILED if error else SlackMessage.Status.SENT,
                channel=channel,
                thread_ts=thread_ts,
                ts=ts,
                error=error,
            )
            event_publish(
                session_id=session_id,
                type=SessionEventType.SLACK_STATUS,
                payload={"kind": kind, "status": message.status},
            )
            return message
    except IntegrityError:
        return None


def _queue(session_id: Any, kind: str) -> None:
    # A savepoint: a broker that fails here loses the message, never the session's change.
    try:
        with transaction.atomic():
            async_task(
                "worker.tasks.slack_notify",
                str(session_id),
                str(kind),
                task_name=f"slack-{kind}-{session_id}",
                group="slack",
            )
    except Exception:
        logger.exception("Could not queue the Slack %s message of session %s", kind, session_id)
