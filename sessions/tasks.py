"""Old dotted paths of the task bodies, which live in ``worker/tasks.py`` now.

django-q2 stores a queued task by its dotted path; rows queued before the move name
``sessions.tasks.run_session`` and friends, and still run through these names. Nothing
new is queued here. (import-linter allows this one upward import: see pyproject.toml.)
"""

from worker.tasks import run_chat_message, run_session, score_session, slack_notify

__all__ = ["run_chat_message", "run_session", "score_session", "slack_notify"]
