"""The event log: one row per change, written in the change's own transaction, so that
browsers can follow along and catch up after a disconnect."""

from __future__ import annotations

from django.db import models

from sessions.models.session import AlertSession


class SessionEventType(models.TextChoices):
    """What an event-log row says happened (the outbox's vocabulary)."""

    SESSION_STATUS = "session.status"
    STAGE_STATUS = "stage.status"
    EXECUTION_STATUS = "execution.status"
    TIMELINE_CREATED = "timeline_event.created"
    TIMELINE_COMPLETED = "timeline_event.completed"
    STREAM_CHUNK = "stream.chunk"
    REVIEW_STATUS = "review.status"
    SCORE_UPDATED = "session.score_updated"
    CHAT_CREATED = "chat.created"
    INTERACTION_CREATED = "interaction.created"  # an LLM or MCP call was recorded
    SLACK_STATUS = "slack.status"  # a Slack message of the session was posted, or failed
    # Transient: what an agent is doing now (TARSy's phases: an iteration, a tool call…).
    EXECUTION_PROGRESS = "execution.progress"


class SessionEvent(models.Model):
    """The outbox every live update flows through.

    ``id`` is the cursor clients resume from. Persistent events are written in the
    transaction of the change they describe; transient ones (stream chunks) are written
    on their own and expire after a TTL.
    """

    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=50)
    payload = models.JSONField(default=dict)
    transient = models.BooleanField(default=False)
    # Set on stream chunks so a page render can rebuild a streaming item's text.
    timeline_event_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["session", "id"], name="event_session_id"),
            models.Index(fields=["timeline_event_id", "id"], name="event_timeline_chunks"),
            models.Index(fields=["transient", "created_at"], name="event_transient_created"),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.type}"
