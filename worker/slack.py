"""Slack messages about sessions: "investigating" when a session from a Slack alert
starts, how it ended, with a link to its page, and "Alert repeated xN" when duplicates
of its alert came in (at milestones: ``sessions/services/slack.py``).

A session that came from a Slack message carries that message's fingerprint (some text
of it); TARSy finds the message in the channel's last 24 hours and replies in its
thread. Slack never decides anything about a session: whatever goes wrong here is
logged and recorded on a ``SlackMessage`` row, shown on the session page, and that is
all (fail open).
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator

from config.loader import get_config
from config.types import SlackConfig
from masking import mask_alert, mask_text
from sessions import services
from sessions.models import AlertSession, SessionStatus, SlackMessage
from sessions.services.slack import repeat_number

logger = logging.getLogger(__name__)

# Slack refuses a section's text over 3000 characters; the cut leaves room to spare.
MAX_BLOCK_TEXT = 2900
TRUNCATED = "\n\n_… (truncated: the whole text is on the session page)_"
HISTORY_WINDOW = 24 * 3600  # seconds of channel history searched for the fingerprint
HISTORY_PAGES = 5  # of 200 messages each
TIMEOUT = 10  # seconds per Slack API call
# slack_sdk retries a failed connection once, after 0.5 s plus up to 1 s of jitter (its default).
RETRY_INTERVAL = BackoffRetryIntervalCalculator(backoff_factor=0.5)

ENDINGS: dict[str, tuple[str, str]] = {
    SessionStatus.COMPLETED: (":white_check_mark:", "Investigation complete"),
    SessionStatus.FAILED: (":x:", "Investigation failed"),
    SessionStatus.TIMED_OUT: (":hourglass:", "Investigation timed out"),
    SessionStatus.CANCELLED: (":no_entry_sign:", "Investigation cancelled"),
}


class SlackFailure(Exception):
    """Why a message could not be posted, in words for the session page."""


def deliver(session_id: Any, kind: str, *, clock=time.time) -> SlackMessage | None:
    """Post the ``kind`` message of a session once, and record what happened. None, and
    nothing posted, for a message already recorded (a re-delivered task) or when Slack
    has been switched off since."""
    config = get_config()
    slack = config.system.slack
    if not slack.enabled:
        return None  # switched off since the task was queued
    if SlackMessage.objects.filter(session_id=session_id, kind=kind).exists():
        return None
    session = AlertSession.objects.get(id=session_id)
    thread_ts = ""
    try:
        client = _client(slack)
        thread_ts = _thread(client, slack.channel, session, clock)
        link = session_link(config.system.dashboard_url, session.id)
        repeats = repeat_number(kind)
        if kind == SlackMessage.Kind.START:
            blocks = start_blocks(link)
        elif repeats is not None:
            blocks = repeat_blocks(repeats, session, link)
        else:
            blocks = end_blocks(session, link)
        response = client.chat_postMessage(
            channel=slack.channel,
            blocks=blocks,
            text=_fallback_text(kind, session),
            thread_ts=thread_ts or None,
            unfurl_links=False,
        )
        ts = str(response.get("ts") or "")
    except Exception as exc:
        error = mask_text(_reason(exc))
        logger.warning("Slack %s message of session %s failed: %s", kind, session_id, error)
        return services.slack_message_record(
            session_id=session_id,
            kind=kind,
            channel=slack.channel,
            thread_ts=thread_ts,
            error=error,
        )
    return services.slack_message_record(
        session_id=session_id, kind=kind, channel=slack.channel, thread_ts=thread_ts, ts=ts
    )


def find_thread(client: WebClient, channel: str, fingerprint: str, *, now: float) -> str:
    """The ``ts`` of the newest message of the last 24 hours containing the fingerprint
    (case and spacing ignored), or "" when there is none."""
    wanted = _normalize(fingerprint)
    # A fingerprint holding a secret was masked when the alert came in (sessions/intake.py):
    # it is looked for in the messages as masked the same way.
    masked = "[masked_" in wanted
    cursor = None
    for _ in range(HISTORY_PAGES):
        page = client.conversations_history(
            channel=channel, oldest=str(int(now - HISTORY_WINDOW)), limit=200, cursor=cursor
        )
        messages: list[dict[str, Any]] = page.get("messages", [])
        for message in messages:
            text = _message_text(message)
            if wanted in _normalize(mask_alert(text) if masked else text):
                return str(message.get("ts", ""))
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not page.get("has_more") or not cursor:
            break
    return ""


def start_blocks(link: str) -> list[dict[str, Any]]:
    text = ":arrows_counterclockwise: *Investigating* — TARSy is looking into this alert."
    if link:
        text += f"\n<{link}|Follow the investigation>"
    return [_section(text)]


def repeat_blocks(count: int, session: AlertSession, link: str) -> list[dict[str, Any]]:
    """The reply to the session's ``count``-th duplicate alert (the count it reached when
    the reply was due: later repeats have replies of their own)."""
    see = f"<{link}|the session in TARSy>" if link else f"session {session.id} in TARSy"
    return [
        _section(f":repeat: *Alert repeated \u00d7{count}* \u2014 no new investigation; see {see}")
    ]


def end_blocks(session: AlertSession, link: str) -> list[dict[str, Any]]:
    emoji, label = ENDINGS.get(session.status, (":grey_question:", f"Ended: {session.status}"))
    blocks = [_section(f"{emoji} *{label}*")]
    if session.budget_stop:
        # A budget's stop is never silent: the thread says which limit ended it.
        blocks.append(_section(f":money_with_wings: Stopped by budget: {session.budget_stop}"))
    if session.status == SessionStatus.COMPLETED:
        body = session.executive_summary or session.final_analysis
    else:
        body = session.error_message or session.cancel_reason
    if body:
        # Errors and reasons were masked as they came in. The model's text is kept as it
        # wrote it, from masked input, but it may have decoded what the masking did not
        # recognise (a base64 value of a ConfigMap): masked again before it leaves.
        blocks.append(_section(truncate(escape(mask_text(body)))))
    if link:
        blocks.append(_section(f"<{link}|Open the session in TARSy>"))
    return blocks


def session_link(dashboard_url: str, session_id: Any) -> str:
    return f"{dashboard_url}/sessions/{session_id}/" if dashboard_url else ""


def truncate(text: str) -> str:
    """At most ``MAX_BLOCK_TEXT`` characters, saying so when cut."""
    if len(text) <= MAX_BLOCK_TEXT:
        return text
    cut = text[: MAX_BLOCK_TEXT - len(TRUNCATED)]
    # Not half an escape (``&am``): Slack would show it as typed.
    return re.sub(r"&[a-z]{0,3}$", "", cut) + TRUNCATED


def escape(text: str) -> str:
    """Model-written text as Slack text: ``<!channel>`` or ``<https://x|y>`` stay words."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _client(slack: SlackConfig) -> WebClient:
    token = os.environ.get(slack.token_env, "").strip()
    if not token:
        raise SlackFailure(
            f"the environment variable {slack.token_env} (system.slack.token_env) holding the "
            "Slack bot token is not set"
        )
    retry = ConnectionErrorRetryHandler(max_retry_count=1, interval_calculator=RETRY_INTERVAL)
    base_url = slack.api_url.rstrip("/") + "/" if slack.api_url else WebClient.BASE_URL
    return WebClient(token=token, base_url=base_url, timeout=TIMEOUT, retry_handlers=[retry])


def _thread(client: WebClient, channel: str, session: AlertSession, clock) -> str:
    """The thread to reply in: the one the start message found, else a fresh look-up.
    A failed look-up is logged and the message goes to the channel itself."""
    if not session.slack_message_fingerprint:
        return ""
    started = (
        SlackMessage.objects.filter(session=session, kind=SlackMessage.Kind.START)
        .exclude(thread_ts="")
        .values_list("thread_ts", flat=True)
        .first()
    )
    if started:
        return started
    try:
        return find_thread(client, channel, session.slack_message_fingerprint, now=clock())
    except Exception as exc:
        logger.warning(
            "Slack thread look-up for session %s failed: %s", session.id, mask_text(_reason(exc))
        )
        return ""


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _fallback_text(kind: str, session: AlertSession) -> str:
    """What notifications and screen readers show instead of the blocks."""
    if kind == SlackMessage.Kind.START:
        return "TARSy is investigating this alert."
    repeats = repeat_number(kind)
    if repeats is not None:
        return f"Alert repeated \u00d7{repeats} \u2014 no new investigation"
    return ENDINGS.get(session.status, ("", f"Ended: {session.status}"))[1]


def _message_text(message: dict[str, Any]) -> str:
    parts = [message.get("text") or ""]
    for attachment in message.get("attachments") or []:
        parts += [attachment.get("text") or "", attachment.get("fallback") or ""]
    return " ".join(parts)


def _normalize(text: str) -> str:
    return " ".join(text.lower().split())


def _reason(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if response is not None and getattr(response, "data", None) is not None:
        data = response.data
        error = data.get("error") if isinstance(data, dict) else None
        return f"Slack answered HTTP {response.status_code}: {error or str(data)[:200]}"
    return str(exc) or type(exc).__name__
