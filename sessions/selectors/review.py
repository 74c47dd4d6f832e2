"""Reads of the review workflow: triage groups and a session's review activity."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from sessions.models import AlertSession, ReviewActivity, ReviewStatus, SessionStatus

# TARSy's triage groups (GET /api/v1/sessions/triage/{group}).
TRIAGE_GROUPS: dict[str, Q] = {
    "investigating": Q(
        status__in=[SessionStatus.PENDING, SessionStatus.IN_PROGRESS, SessionStatus.CANCELLING],
        review_status="",
    ),
    "needs_review": Q(review_status=ReviewStatus.NEEDS_REVIEW),
    "in_progress": Q(review_status=ReviewStatus.IN_PROGRESS),
    "reviewed": Q(review_status=ReviewStatus.REVIEWED),
}
TRIAGE_DEFERRED = ("alert_data", "final_analysis", "runbook", "mcp_selection")


def triage_sessions(group: str, *, assignee: str | None = None) -> QuerySet[AlertSession]:
    """A group's sessions, newest first. ``assignee``: ``None`` for anyone, ``""`` for
    nobody, else that user."""
    sessions = AlertSession.objects.filter(TRIAGE_GROUPS[group])
    if assignee is not None:
        sessions = sessions.filter(assignee=assignee)
    return sessions.order_by("-created_at", "-id").defer(*TRIAGE_DEFERRED)


def triage_counts(*, user: str) -> dict[str, int]:
    """How many sessions each tab of the triage page holds (``mine``: in progress,
    assigned to ``user``)."""
    counts = {group: triage_sessions(group).count() for group in TRIAGE_GROUPS}
    counts["mine"] = triage_sessions("in_progress", assignee=user).count()
    return counts


def review_activities(session_id: Any) -> QuerySet[ReviewActivity]:
    """A session's review steps, oldest first."""
    return ReviewActivity.objects.filter(session_id=session_id).order_by("created_at", "id")
