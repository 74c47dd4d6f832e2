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
