"""Credentials in every part of a URL.

- **userinfo**: ``postgres://app:pa/ss@db`` (a password may hold ``/``, ``:`` or ``@``
  though it should not), ``https://<token>@github.com``, a Sentry DSN's key;
- **query and fragment**: ``?token=…&X-Amz-Signature=…``, ``#access_token=…`` — masked by
  name like any assignment (masking/assignments.py), a query value ending at ``&``;
- **path**: a webhook's secret is its path (Slack, Discord, Teams, Mattermost,
  Zapier, Google Chat…): everything after a ``hooks``/``webhook(s)`` segment that is not
  a plain word is masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from masking.names import is_placeholder


def _marker(name: str) -> str:
    return f"[MASKED_{name.upper()}]"


# Anchored on "://" (not on the scheme) so a long run of word characters is scanned once.
# The password runs to the last "@" before the host; it is bounded so that a text full of
# "://a:" without an "@" is not scanned again from each of them.
_URL_PASSWORD_RE = re.compile(
    r"""(?P<key>://[^\s:/@"'<>]*:)(?P<value>[^\s"'<>]{0,256})(?=@[\w\[])"""
)
# A key alone in the userinfo: a Sentry DSN (https://<key>@o1.ingest.sentry.io/1), a token
# used as a git user (https://<token>@github.com/…).
_URL_CREDENTIAL_RE = re.compile(r"(?P<key>://)(?P<value>[A-Za-z0-9_-]{16,})(?=@)")
_PORT_RE = re.compile(r"\d{1,5}(?:[/?#]|\Z)")
# What follows the "@" that ends a password: a host, maybe a port, then the path or the end.
_HOST_RE = re.compile(r"""(?:[\w.-]+|\[[\w:.%]+\])(?::\d{1,5})?(?=[/?#\s"'<>),;]|\Z)""")


def _password(m: re.Match[str]) -> str:
    value, text = m.group("value"), m.string
    if is_placeholder(value) or _PORT_RE.match(value):
        return m.group(0)  # https://host:8080/docs@v2: a port and a path, no password
    # The password ends at the first "@" a host follows: "p@ss:w@rd@rabbit:5672" is
    # p@ss:w@rd at rabbit, "pw@db/x?mail=a@b" is pw at db.
    start = m.start("value")
    for at in (i for i, c in enumerate(value) if c == "@"):
        if _HOST_RE.match(text, start + at + 1):
            return f"{m.group('key')}{_marker('password')}{value[at:]}"
    return m.group("key") + _marker("password")


def _credential(m: re.Match[str]) -> str:
    value = m.group("value")
    if is_placeholder(value) or not any(c.isdigit() for c in value):
        return m.group(0)  # spark://CoarseGrainedScheduler@10.0.0.1:4040 names an actor
    return m.group("key") + _marker("url_credential")


# /hooks/…, /webhook/…, /webhooks/…, /webhookb2/…, /IncomingWebhook/…
_WEBHOOK_RE = re.compile(
    r"""(?P<key>(?<=[\w.-])/(?:[\w-]*?hooks?|webhookb2)/(?:catch/)?|//hooks\.[\w.-]+/)"""
    r"""(?P<value>[^\s?#"'<>)\]]+)""",
    re.I,
)
_PLAIN_RE = re.compile(r"[A-Za-z]+(?:[-_][A-Za-z]+)*/?|\d{1,9}/?")


def _webhook(m: re.Match[str]) -> str:
    value = m.group("value")
    if is_placeholder(value) or _PLAIN_RE.fullmatch(value):
        return m.group(0)  # /api/v1/hooks/list, /repos/o/r/hooks/42
    return m.group("key") + _marker("webhook")


RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_URL_PASSWORD_RE, _password),
    (_URL_CREDENTIAL_RE, _credential),
    (_WEBHOOK_RE, _webhook),
)


def mask_urls(text: str) -> str:
    for pattern, replace in RULES:
        text = pattern.sub(replace, text)
    return text
