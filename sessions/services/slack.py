"""Slack messages about sessions: queued with the change they describe, recorded once.

``notify_on_start`` and ``notify_on_end`` run inside the transaction that starts or ends
the session (``followups``), so the task exists exactly when the change commits. The
task (``worker.tasks.slack_notify``) posts through ``worker/slack.py`` and records
the outcome here.

``notify_on_repeat`` runs inside the transaction that records a duplicate alert on a
session (the duplicate-alert cooldown, ``sessions/services/dedup.py``): the session's
thread gets "Alert repeated xN" at milestones only (1, 2, 5, 10, 20, 50, 100, ...), so
a storm of 50 posts 6 replies, each its own message kind (``rep-5``) posted once.
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


# A reply kind is "rep-<count>"; SlackMessage.kind holds 10 characters, so the last
# milestone that has a reply is 500,000 (beyond it the thread is told nothing more).
REPEAT_KIND_PREFIX = "rep-"
_KIND_LENGTH = 10


def notify_on_repeat(session: AlertSession, count: int) -> None:
    """Queue the thread reply "Alert repeated xN" when the session, which came from a
    Slack alert, has just taken in its ``count``-th repeat and that is a milestone.

    Only the session's own Slack thread is replied in: a repeat that came with a
    ``slack_message_fingerprint`` of its own (another Slack message) is told in the
    original investigation's thread, where the SRE following the alert already is, and
    its own message gets no reply."""
    if not session.slack_message_fingerprint or not get_config().system.slack.enabled:
        return
    kind = repeat_kind(count)
    if kind:
        _queue(session.id, kind)


def is_repeat_milestone(count: int) -> bool:
    """1, 2, 5, 10, 20, 50, 100, ...: a leading 1, 2 or 5 and only zeros after it."""
    digits = str(count)
    return count > 0 and digits[0] in "125" and set(digits[1:]) <= {"0"}


def repeat_kind(count: int) -> str:
    """The message kind of the reply to the ``count``-th repeat; "" when none is due."""
    kind = f"{REPEAT_KIND_PREFIX}{count}"
    return kind if is_repeat_milestone(count) and len(kind) <= _KIND_LENGTH else ""


def repeat_number(kind: str) -> int | None:
    """The repeat count a message kind replies to (``rep-5`` -> 5); None for the others."""
    number = kind.removeprefix(REPEAT_KIND_PREFIX)
    if number == kind or not (number.isascii() and number.isdigit()):
        return None
    return int(number)


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
