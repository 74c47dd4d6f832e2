"""Investigation memory's store and recall (TARSy's ADR-0014): the similarity gate, the
fused ranks, confidence and decay, reinforcement, deprecation and what a review rating
does. Vectors come from a fixed embedder here, so each similarity is chosen."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from llm.embeddings import LocalHashingEmbedder
from sessions import services
from sessions.models import InvestigationMemory, QualityRating
from sessions.selectors.memory import DECAY_PER_DAY, RRF_K, recall, similar
from sessions.services.memory import (
    MemoryRejected,
    memory_create,
    memory_deprecate,
    memory_reinforce,
    memory_review_rating,
)

pytestmark = pytest.mark.django_db


class FixedEmbedder:
    """Each text's vector is chosen: ``vectors[text]``, unit length, 2 dimensions."""

    name = "fixed-test"
    dimensions = 2
    gate = 0.7

    def __init__(self, vectors: dict[str, tuple[float, float]]) -> None:
        self.vectors = vectors

    def embed(self, texts, task):
        rows = np.array([self.vectors[t] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def at_angle(similarity: float) -> tuple[float, float]:
    """A vector with this cosine similarity to (1, 0)."""
    return (similarity, math.sqrt(1 - similarity**2))


def make(embedder, content: str, **fields) -> InvestigationMemory:
    return memory_create(
        embedder=embedder, content=content, category="semantic", valence="positive", **fields
    )


def test_only_memories_past_the_gate_are_recalled_best_first():
    embedder = FixedEmbedder(
        {"query": (1, 0), "close": at_angle(0.95), "near": at_angle(0.75), "far": at_angle(0.6)}
    )
    for text in ("close", "near", "far"):
        make(embedder, text)
    found = recall(embedder, "query", limit=5)
    assert [r.memory.content for r in found] == ["close", "near"]
    assert found[0].similarity == pytest.approx(0.95, abs=1e-6)


def test_a_keyword_hit_re_ranks_but_never_passes_the_gate_alone():
    embedder = FixedEmbedder(
        {
            "payments oom": (1, 0),
            "unrelated words": at_angle(0.9),
            "payments pods oom": at_angle(0.8),
            "payments oom again": at_angle(0.5),  # every word matches; below the gate
        }
    )
    for text in ("unrelated words", "payments pods oom", "payments oom again"):
        make(embedder, text)
    found = recall(embedder, "payments oom", limit=5)
    assert [r.memory.content for r in found] == ["payments pods oom", "unrelated words"]
    # rrf: vector rank 2 plus keyword rank 1 beats vector rank 1 alone.
    confidence_factor = 0.7 + 0.3 * 0.7
    assert found[0].score == pytest.approx(
        (1 / (RRF_K + 2) + 1 / (RRF_K + 1)) * confidence_factor, rel=1e-3
    )
    assert found[1].score == pytest.approx(1 / (RRF_K + 1) * confidence_factor, rel=1e-3)


def test_confidence_and_age_weigh_the_score():
    embedder = FixedEmbedder({"q": (1, 0), "trusted": at_angle(0.95), "old": at_angle(0.9)})
    make(embedder, "trusted", confidence=1.0)
    old = make(embedder, "old")
    InvestigationMemory.objects.filter(id=old.id).update(
        updated_at=timezone.now() - timedelta(days=90)
    )
    found = {r.memory.content: r.score for r in recall(embedder, "q", limit=5)}
    assert found["trusted"] == pytest.approx(1 / (RRF_K + 1), rel=1e-3)
    # 90 days old: half as much (the half-life), at confidence 0.7.
    decay = math.exp(-DECAY_PER_DAY * 90)
    assert decay == pytest.approx(0.5, abs=0.01)
    assert found["old"] == pytest.approx(1 / (RRF_K + 2) * 0.91 * decay, rel=1e-2)


def test_deprecated_other_projects_other_embedders_and_excluded_ids_are_never_recalled():
    embedder = FixedEmbedder({"q": (1, 0), "a": at_angle(0.9), "b": at_angle(0.9)})
    kept = make(embedder, "a")
    gone = make(embedder, "b")
    memory_deprecate(memory_id=gone.id)
    make(embedder, "a", project="elsewhere")
    other = FixedEmbedder(embedder.vectors)
    other.name = "another-model"
    make(other, "a")
    assert [r.memory.id for r in recall(embedder, "q", limit=5)] == [kept.id]
    assert recall(embedder, "q", limit=5, exclude={str(kept.id)}) == []
    assert recall(embedder, "   ", limit=5) == []


def test_similar_has_no_gate():
    embedder = FixedEmbedder({"q": (1, 0), "far": at_angle(0.1)})
    make(embedder, "far")
    assert [r.memory.content for r in similar(embedder, "q", limit=3)] == ["far"]


def test_reinforcing_raises_confidence_to_at_most_one_and_restarts_the_decay():
    embedder = FixedEmbedder({"a": (1, 0)})
    memory = make(embedder, "a", confidence=0.95)
    InvestigationMemory.objects.filter(id=memory.id).update(
        updated_at=timezone.now() - timedelta(days=30)
    )
    assert memory_reinforce(memory_id=memory.id)
    memory.refresh_from_db()
    assert (memory.confidence, memory.seen_count) == (1.0, 2)
    assert timezone.now() - memory.updated_at < timedelta(minutes=1)
    assert not memory_reinforce(memory_id="00000000-0000-0000-0000-000000000000")


def test_a_lesson_is_masked_before_it_is_stored_or_embedded():
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
    memory = make(LocalHashingEmbedder(), f"Use the token {token} for the registry")
    assert token not in memory.content
    with pytest.raises(MemoryRejected, match="over 2000 characters"):
        make(LocalHashingEmbedder(), "x" * 2001)
    with pytest.raises(MemoryRejected, match="category"):
        memory_create(
            embedder=LocalHashingEmbedder(), content="x", category="lore", valence="positive"
        )


def test_a_review_rating_sets_how_much_a_sessions_lessons_are_trusted():
    session = services.session_create(
        alert_type="kubernetes", alert_data="x", chain_id="kubernetes-investigation", author="t"
    )
    embedder = FixedEmbedder({"a": (1, 0)})
    memory = make(embedder, "a", source_session=session, confidence=0.5)

    def rate(old: str, new: str) -> tuple[float, bool]:
        memory_review_rating(session=session, old=old, new=new)
        memory.refresh_from_db()
        return round(memory.confidence, 6), memory.deprecated

    assert rate("", QualityRating.ACCURATE) == (0.6, False)
    # Re-rated: the first rating's effect is taken back, then the new one applies.
    assert rate(QualityRating.ACCURATE, QualityRating.PARTIALLY_ACCURATE) == (0.3, False)
    assert rate(QualityRating.PARTIALLY_ACCURATE, QualityRating.INACCURATE) == (0.5, True)
    assert rate(QualityRating.INACCURATE, "") == (0.5, False)  # reopened: taken back


def test_the_local_embedder_matches_a_lesson_to_a_like_alert_and_not_another():
    embedder = LocalHashingEmbedder()
    lesson = make(
        embedder,
        "payments-api pods are OOMKilled when the memory limit of 512Mi is too low; "
        "raising the limit to 1Gi resolved it",
    )
    make(embedder, "DNS lookups fail when CoreDNS pods are evicted from kube-system")
    alert = "Pod payments-api-7d9f OOMKilled in namespace payments: memory limit 512Mi exceeded"
    assert [r.memory.id for r in recall(embedder, alert, limit=5)] == [lesson.id]
    assert recall(embedder, "Certificate expired on the ingress gateway", limit=5) == []
    same = embedder.embed([alert, alert], "query")
    assert np.array_equal(same[0], same[1])  # deterministic


def test_reembedding_brings_another_embedders_lessons_back_and_keeps_their_age():
    from io import StringIO

    from django.core.management import call_command

    old = FixedEmbedder({LESSON_TEXT: (1, 0)})
    old.name = "retired-model"
    memory = make(old, LESSON_TEXT)
    aged = timezone.now() - timedelta(days=10)
    InvestigationMemory.objects.filter(id=memory.id).update(updated_at=aged)
    embedder = LocalHashingEmbedder()
    assert recall(embedder, LESSON_TEXT, limit=3) == []  # another embedder's: never compared
    out = StringIO()
    call_command("tarsy_reembed", stdout=out)
    assert "1/1" in out.getvalue()
    assert "1 lessons embedded with local-hashing-v1 (768 dimensions)" in out.getvalue()
    memory.refresh_from_db()
    assert (memory.embedding_model, memory.dimensions, memory.updated_at) == (
        "local-hashing-v1",
        768,
        aged,
    )
    assert [r.memory.id for r in recall(embedder, LESSON_TEXT, limit=3)] == [memory.id]
    again = StringIO()
    call_command("tarsy_reembed", stdout=again)  # nothing left
    assert "0 lessons embedded" in again.getvalue()


LESSON_TEXT = "payments-api pods are OOMKilled at the 512Mi memory limit"
