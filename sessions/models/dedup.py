"""The duplicate-alert cooldown (``defaults.dedup``, sessions/dedup.py): which session an
alert fingerprint points to, and the repeats recorded on a session instead of starting
investigations of their own."""

from __future__ import annotations

from django.db import models

from sessions.models.session import AlertSession, TimelineEvent

# Payloads kept per session; the counter goes on counting past them.
KEPT_REPEATS = 100


class AlertFingerprint(models.Model):
    """The claim of one fingerprint: the session its alerts go to. One row per
    fingerprint (unique), locked by whoever accepts an alert with it, so two clients
    sending the same alert at once cannot both start an investigation."""

    # A keyed SHA-256 (hex) of the alert's fingerprint: the values may be secrets.
    fingerprint = models.CharField(max_length=64, unique=True)
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="alert_fingerprints"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"fingerprint {self.fingerprint[:12]}… → session {self.session_id}"


class SessionRepeats(models.Model):
    """How many duplicates of its alert a session has taken in, and when."""

    session = models.OneToOneField(
        AlertSession, on_delete=models.CASCADE, primary_key=True, related_name="repeats"
    )
    count = models.PositiveIntegerField(default=0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    # The "Alert repeated xN" item, updated in place with each repeat.
    item = models.ForeignKey(TimelineEvent, null=True, blank=True, on_delete=models.SET_NULL)

    def __str__(self) -> str:
        return f"{self.count} repeats of session {self.session_id}"


class AlertRepeat(models.Model):
    """One duplicate alert recorded on a session (the first ``KEPT_REPEATS`` of them)."""

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="alert_repeats"
    )
    number = models.PositiveIntegerField()  # 1 for the first repeat
    received_at = models.DateTimeField()
    author = models.CharField(max_length=150, blank=True)
    # Masked like the session's own alert_data.
    alert_data = models.TextField()

    class Meta:
        ordering = ["session", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="alert_repeat_number")
        ]

    def __str__(self) -> str:
        return f"repeat {self.number} of session {self.session_id}"
