"""The review workflow of ended sessions: who looks at each, and what they found."""

from __future__ import annotations

from typing import Any

from sessions.models import AlertSession, ReviewStatus, SessionStatus


def review_on_end(session_id: Any, status: str) -> None:
    """An ended session waits for review; a cancelled one was someone's decision already."""
    ending = (
        ReviewStatus.REVIEWED if status == SessionStatus.CANCELLED else ReviewStatus.NEEDS_REVIEW
    )
    AlertSession.objects.filter(id=session_id).update(review_status=ending)
