"""What happens after a session starts and ends, outside its investigation: review,
scoring, Slack. Called inside the transaction that starts or ends the session, so the
follow-up tasks are queued (the ORM broker writes into our database) exactly when the
change commits, and never without it."""

from __future__ import annotations

from typing import Any

from sessions.services import review, scoring, slack


def session_started(session_id: Any) -> None:
    slack.notify_on_start(session_id)


def session_ended(session_id: Any, status: str) -> None:
    review.review_on_end(session_id, status)
    scoring.score_on_end(session_id, status)
    slack.notify_on_end(session_id, status)
