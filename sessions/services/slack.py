"""Slack messages about sessions (being built: issue 10)."""

from __future__ import annotations

from typing import Any


def notify_on_start(session_id: Any) -> None:
    """Queue the "investigating" message of a session that has a Slack fingerprint."""


def notify_on_end(session_id: Any, status: str) -> None:
    """Queue the message that says how a session ended."""
