"""What comes after an investigation: review, chat, scoring and Slack messages."""

from __future__ import annotations

import uuid

from django.db import models

from sessions.models.session import AgentExecution, AlertSession, Stage


class ReviewAction(models.TextChoices):
    CLAIM = "claim"
    UNCLAIM = "unclaim"
    COMPLETE = "complete"
    REOPEN = "reopen"
    UPDATE_FEEDBACK = "update_feedback"
    ACKNOWLEDGE = "acknowledge"


class ReviewActivity(models.Model):
    """One step of a session's review, in the order they happened."""

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="review_activities"
    )
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=20, choices=ReviewAction.choices)
    from_status = models.CharField(max_length=20, blank=True)  # "": none yet
    to_status = models.CharField(max_length=20)
    quality_rating = models.CharField(max_length=30, blank=True)
    note = models.TextField(blank=True)  # the action taken, as written with this step
    investigation_feedback = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["session", "created_at"], name="review_session_created")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.from_status} -> {self.to_status}"


class Chat(models.Model):
    """A session's follow-up conversation; one per session, made by its first question."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.OneToOneField(AlertSession, on_delete=models.CASCADE, related_name="chat")
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"chat on {self.session_id}"


class ChatMessageStatus(models.TextChoices):
    PENDING = "pending"  # queued for a worker
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


OPEN_CHAT_MESSAGE_STATUSES = (
    ChatMessageStatus.PENDING,
    ChatMessageStatus.RUNNING,
    ChatMessageStatus.CANCELLING,
)


class ChatMessage(models.Model):
    """A question asked in a chat, and the state of its answer (a ``chat`` stage)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="chat_messages"
    )
    content = models.TextField()
    author = models.CharField(max_length=150, blank=True)
    stage = models.OneToOneField(
        Stage, null=True, blank=True, on_delete=models.SET_NULL, related_name="chat_message"
    )
    status = models.CharField(
        max_length=20, choices=ChatMessageStatus.choices, default=ChatMessageStatus.PENDING
    )
    error_message = models.TextField(blank=True)
    cancelled_by = models.CharField(max_length=150, blank=True)
    # The worker answering it holds this lease, as a session's worker holds the session's.
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="chat_status_heartbeat")]
        constraints = [
            # One answer at a time per session: the database refuses a second open one.
            models.UniqueConstraint(
                fields=["chat"],
                condition=models.Q(status__in=["pending", "running", "cancelling"]),
                name="chat_one_open_message",
            )
        ]

    def __str__(self) -> str:
        return f"chat message {self.id} ({self.status})"


class ScoreStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class SessionScore(models.Model):
    """One scoring of a session; re-scoring adds a row, earlier ones stay as history."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="scores")
    status = models.CharField(
        max_length=20, choices=ScoreStatus.choices, default=ScoreStatus.PENDING
    )
    total_score = models.PositiveSmallIntegerField(null=True, blank=True)
    score_analysis = models.TextField(blank=True)
    tool_improvement_report = models.TextField(blank=True)
    failure_tags = models.JSONField(default=list, blank=True)
    prompt_hash = models.CharField(max_length=64, blank=True)
    score_triggered_by = models.CharField(max_length=150, blank=True)
    stage = models.OneToOneField(
        Stage, null=True, blank=True, on_delete=models.SET_NULL, related_name="score"
    )
    error_message = models.TextField(blank=True)
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["session", "created_at"], name="score_session_created"),
            models.Index(fields=["status", "heartbeat_at"], name="score_status_heartbeat"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status__in=["pending", "in_progress"]),
                name="score_one_open_per_session",
            )
        ]

    def __str__(self) -> str:
        return f"score of {self.session_id}: {self.total_score} ({self.status})"


class FeedbackReflection(models.Model):
    """One run of the feedback Reflector: what a reviewer's ``investigation_feedback``
    teaches, drawn after the review (TARSy's ADR-0014). Held by a worker under a lease on
    this row, as a scoring is on its ``SessionScore``; its execution joins the session's
    scoring stage."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="feedback_reflections"
    )
    status = models.CharField(
        max_length=20, choices=ScoreStatus.choices, default=ScoreStatus.PENDING
    )
    triggered_by = models.CharField(max_length=150, blank=True)
    # The review it reflects on, as it was when the review was saved.
    feedback = models.TextField()
    quality_rating = models.CharField(max_length=30, blank=True)
    execution = models.OneToOneField(
        AgentExecution,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="feedback_reflection",
    )
    error_message = models.TextField(blank=True)
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "heartbeat_at"], name="feedback_status_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"feedback reflection on {self.session_id} ({self.status})"


class SlackMessage(models.Model):
    """What TARSy posted to Slack about a session (or why it could not)."""

    class Kind(models.TextChoices):
        START = "start"
        END = "end"

    class Status(models.TextChoices):
        SENT = "sent"
        FAILED = "failed"

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="slack_messages"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices)
    channel = models.CharField(max_length=100, blank=True)
    thread_ts = models.CharField(max_length=50, blank=True)
    ts = models.CharField(max_length=50, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # A re-run task finds its message posted and does not post it again.
            models.UniqueConstraint(fields=["session", "kind"], name="slack_one_per_kind")
        ]

    def __str__(self) -> str:
        return f"slack {self.kind} for {self.session_id} ({self.status})"
