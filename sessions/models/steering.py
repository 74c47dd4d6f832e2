"""Mid-run steering: a note an SRE adds to a running investigation, and the agents it
reached (sessions/services/steering.py delivers it at each agent's next model call)."""

from __future__ import annotations

from django.db import models

from sessions.models.session import AgentExecution, AlertSession, TimelineEvent


class SteeringNote(models.Model):
    """One note: who wrote it, when, and what (masked). The row is the audit record; its
    ``steering`` timeline item shows it on the session page."""

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="steering_notes"
    )
    author = models.CharField(max_length=150, blank=True)
    text = models.TextField()  # masked like the alert (mask_alert) before it is stored
    created_at = models.DateTimeField(auto_now_add=True)
    item = models.ForeignKey(TimelineEvent, null=True, blank=True, on_delete=models.SET_NULL)
    delivered_to: models.ManyToManyField[AgentExecution, SteeringDelivery] = models.ManyToManyField(
        AgentExecution, through="SteeringDelivery", related_name="steering_notes"
    )

    class Meta:
        ordering = ["id"]
        indexes = [
            # The rate limit's count: one author's recent notes on one session.
            models.Index(fields=["session", "author", "created_at"], name="steering_note_recent"),
        ]

    def __str__(self) -> str:
        return f"steering note {self.id} on session {self.session_id} by {self.author}"


class SteeringDelivery(models.Model):
    """A note given to one agent execution: in the request of its model call then."""

    note = models.ForeignKey(SteeringNote, on_delete=models.CASCADE, related_name="deliveries")
    execution = models.ForeignKey(
        AgentExecution, on_delete=models.CASCADE, related_name="steering_deliveries"
    )
    delivered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["note", "execution"], name="steering_delivered_once")
        ]

    def __str__(self) -> str:
        return f"note {self.note_id} → execution {self.execution_id}"
