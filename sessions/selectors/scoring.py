"""Reads of sessions' scores: the newest per session (badges, lists), the history, and
TARSy's JSON shapes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sessions.models import AlertSession, ScoreStatus, SessionScore

# What a badge needs of a score; the texts stay in the database.
BADGE_FIELDS = ("id", "session_id", "status", "total_score", "created_at")


def latest_scores(session_ids: Iterable[Any]) -> dict[Any, SessionScore]:
    """Each session's newest score row (any status), in one query."""
    newest: dict[Any, SessionScore] = {}
    for score in SessionScore.objects.filter(session_id__in=list(session_ids)).only(
        *BADGE_FIELDS
    ):  # newest first (the model's ordering)
        newest.setdefault(score.session_id, score)
    return newest


def attach_latest_scores(sessions: list[AlertSession]) -> list[AlertSession]:
    """Set ``latest_score_row`` on each session (None when never scored) for its badge."""
    scores = latest_scores(s.id for s in sessions)
    for session in sessions:
        session.latest_score_row = scores.get(session.id)
    return sessions


def latest_score(session: AlertSession) -> SessionScore | None:
    """The newest score row, from ``attach_latest_scores`` when the caller ran it."""
    if hasattr(session, "latest_score_row"):
        return session.latest_score_row
    return session.scores.only(*BADGE_FIELDS).first()


def score_history(session: AlertSession) -> list[SessionScore]:
    """Every score of the session, newest first."""
    return list(session.scores.all())


def scoring_context(session: AlertSession, problem: str = "") -> dict[str, Any]:
    """What the session page's Scoring section shows: the newest score, the earlier ones,
    and why a request to score was refused."""
    history = score_history(session)
    return {
        "session": session,
        "score": history[0] if history else None,
        "earlier_scores": history[1:],
        "score_problem": problem,
    }


NOT_SCORED = {"latest_score": None, "scoring_status": None, "score_id": None}


def score_summaries(session_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """TARSy's ``latest_score``, ``scoring_status`` and ``score_id`` per session, in one
    query: the newest completed score and its id (else the newest row's id), and the
    newest row's status. A session never scored is missing (``NOT_SCORED``)."""
    rows: dict[Any, list[tuple]] = {}
    for row in SessionScore.objects.filter(session_id__in=list(session_ids)).values_list(
        "session_id", "id", "status", "total_score"
    ):  # newest first
        rows.setdefault(row[0], []).append(row)
    summaries = {}
    for session_id, scores in rows.items():
        completed = next((r for r in scores if r[2] == ScoreStatus.COMPLETED), None)
        summaries[session_id] = {
            "latest_score": completed[3] if completed else None,
            "scoring_status": scores[0][2],
            "score_id": str((completed or scores[0])[1]),
        }
    return summaries


def score_summary(session_id: Any) -> dict[str, Any]:
    return score_summaries([session_id]).get(session_id, NOT_SCORED)


def _time(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def score_json(score: SessionScore) -> dict[str, Any]:
    """TARSy's ``GET /sessions/{id}/score`` body."""
    return {
        "score_id": str(score.id),
        "total_score": score.total_score,
        "score_analysis": score.score_analysis or None,
        "tool_improvement_report": score.tool_improvement_report or None,
        "failure_tags": score.failure_tags if score.status == ScoreStatus.COMPLETED else None,
        "prompt_hash": score.prompt_hash or None,
        "score_triggered_by": score.score_triggered_by,
        "status": score.status,
        "stage_id": str(score.stage_id) if score.stage_id else None,
        "started_at": _time(score.started_at),
        "completed_at": _time(score.completed_at),
        "error_message": score.error_message or None,
    }
