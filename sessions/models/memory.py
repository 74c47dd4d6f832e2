"""Investigation memory (TARSy's ADR-0014; issue 21): short lessons distilled from past
sessions, with the vector they are recalled by.

A memory's vector is float32 bytes (``embedding``) made by the embedder it names
(``embedding_model``, ``dimensions``): recall compares only vectors of the embedder in
use (sessions/selectors/memory.py), the same way on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid

from django.db import models

from sessions.models.session import AlertSession

DEFAULT_PROJECT = "default"


class MemoryCategory(models.TextChoices):
    SEMANTIC = "semantic"  # a fact about the environment
    EPISODIC = "episodic"  # what happened in one investigation
    PROCEDURAL = "procedural"  # a strategy, or an anti-pattern


class MemoryValence(models.TextChoices):
    POSITIVE = "positive"  # repeat it
    NEGATIVE = "negative"  # avoid it
    NEUTRAL = "neutral"  # an observation


class InvestigationMemory(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # A hard filter on every query (TARSy's, for tenancy to come); always "default" now.
    project = models.CharField(max_length=100, default=DEFAULT_PROJECT)
    content = models.TextField()
    category = models.CharField(max_length=20, choices=MemoryCategory.choices)
    valence = models.CharField(max_length=20, choices=MemoryValence.choices)
    confidence = models.FloatField(default=0.7)
    seen_count = models.PositiveIntegerField(default=1)
    source_session = models.ForeignKey(
        AlertSession, null=True, blank=True, on_delete=models.SET_NULL, related_name="memories"
    )
    alert_type = models.CharField(max_length=200, blank=True)
    chain_id = models.CharField(max_length=200, blank=True)
    embedding = models.BinaryField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    dimensions = models.PositiveIntegerField(default=0)
    deprecated = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Reinforcement and review touch it: recall's decay counts from here.
    updated_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["project", "deprecated", "embedding_model"]),
            models.Index(fields=["category"]),
        ]

    def __str__(self) -> str:
        return self.content[:80]


class InjectedMemory(models.Model):
    """A memory put into a session's prompt, and how well it matched."""

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="injected_memories"
    )
    memory = models.ForeignKey(
        InvestigationMemory, on_delete=models.CASCADE, related_name="injections"
    )
    similarity = models.FloatField()
    score = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "memory"], name="memory_injected_once")
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} in {self.session_id}"


class MemoryEventKind(models.TextChoices):
    CREATED = "created"  # a Reflector's lesson, from its session
    REINFORCED = "reinforced"  # a Reflector saw it confirmed by a session
    DEPRECATED = "deprecated"  # by a Reflector (with its session) or a person
    RESTORED = "restored"  # a person took the deprecation back
    INJECTED = "injected"  # put into a session's prompts
    EDITED = "edited"  # a person changed its content, category or valence
    DELETED = "deleted"  # a person deleted it (the event stays, with memory_ref)
    REVIEW_ADJUSTED = "review_adjusted"  # a review rating of its session changed it


class MemoryEvent(models.Model):
    """One thing that happened to a memory, and who or which session did it: the audit
    of the memory page. Kept after the memory is deleted (``memory_ref`` names it)."""

    memory = models.ForeignKey(
        InvestigationMemory,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="events",
    )
    memory_ref = models.CharField(max_length=36)  # the memory's id, kept after deletion
    kind = models.CharField(max_length=20, choices=MemoryEventKind.choices)
    session = models.ForeignKey(
        AlertSession,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="memory_events",
    )
    actor = models.CharField(max_length=150, blank=True)  # a username; blank: the system
    # What changed: {"field": [old, new]} (long content cut), a rating, scores.
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["memory", "created_at"]),
            models.Index(fields=["memory_ref", "created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.memory_ref}"
