"""Scoring of completed sessions (being built: issue 10)."""

from __future__ import annotations

from typing import Any


def score_on_end(session_id: Any, status: str) -> None:
    """Queue the scoring of a session that completed, when its chain enables scoring."""
