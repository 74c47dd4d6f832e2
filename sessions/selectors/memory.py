"""Recalling investigation memories: TARSy's hybrid query (ADR-0014, TARSY-GO-NEWER §1.3),
computed in Python so that SQLite and PostgreSQL give the same scores.

1. The query is embedded; every non-deprecated memory of the project made by the same
   embedder is a candidate. Those at least ``gate`` similar (cosine) are ranked by
   similarity: ``pos_v`` 1, 2, … (at most ``max(limit * 3, 20)`` of them).
2. Keyword ranks: memories sharing any word with the query (OR), ranked by BM25 over the
   project's memories, the same cap: ``pos_k``.
3. ``rrf = 1/(60 + pos_v) + 1/(60 + pos_k)`` (the second term only for a keyword hit).
   A keyword hit below the similarity gate is dropped: keywords only re-rank what passed
   it (precision over recall).
4. ``score = rrf * (0.7 + 0.3 * confidence) * exp(-0.0077 * age in days)``, age from
   ``updated_at`` (a 90-day half-life, applied at query time).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.db.models import Count, Max, Sum
from django.utils import timezone

from llm.embeddings import Embedder, from_blobs, words
from sessions.models import DEFAULT_PROJECT, InvestigationMemory

RRF_K = 60
DECAY_PER_DAY = 0.0077  # ≈ ln 2 / 90
BM25_K1, BM25_B = 1.2, 0.75
# What of a query is compared: an alert may be 1 MB; its head says what it is about.
QUERY_CHARS = 20_000


@dataclass(frozen=True)
class Recalled:
    memory: InvestigationMemory
    similarity: float
    score: float


def recall(
    embedder: Embedder,
    text: str,
    *,
    limit: int,
    project: str = DEFAULT_PROJECT,
    exclude: set[str] | frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> list[Recalled]:
    """The ``limit`` memories best matching ``text``, best first; none for an empty text."""
    if not text.strip() or limit <= 0:
        return []
    text = text[:QUERY_CHARS]
    store = _store(embedder, project)
    if not store.ids:
        return []
    similarity = store.matrix @ embedder.embed([text], "query")[0]
    excluded = (
        {i for i, memory_id in enumerate(store.ids) if str(memory_id) in exclude}
        if exclude
        else set()
    )
    cap = max(limit * 3, 20)
    passed = np.nonzero(similarity >= embedder.gate)[0]
    passed = passed[np.argsort(-similarity[passed], kind="stable")]
    gated = [int(i) for i in passed if int(i) not in excluded][:cap]
    vector_rank = {index: rank for rank, index in enumerate(gated, start=1)}
    keyword_rank = store.keyword_ranks(text, cap, excluded)
    now_ts = (now or timezone.now()).timestamp()
    scored = []
    for index, pos_v in vector_rank.items():
        rrf = 1 / (RRF_K + pos_v)
        if index in keyword_rank:
            rrf += 1 / (RRF_K + keyword_rank[index])
        age_days = max(0.0, (now_ts - store.updated[index]) / 86400)
        weight = (0.7 + 0.3 * store.confidence[index]) * math.exp(-DECAY_PER_DAY * age_days)
        scored.append((rrf * weight, index))
    scored.sort(key=lambda pair: -pair[0])
    return _rows(store, [(index, score) for score, index in scored[:limit]], similarity)


def similar(
    embedder: Embedder, text: str, *, limit: int, project: str = DEFAULT_PROJECT
) -> list[Recalled]:
    """What a Reflector compares new lessons with: no gate, by similarity * decay."""
    store = _store(embedder, project)
    if not store.ids or not text.strip():
        return []
    similarity = store.matrix @ embedder.embed([text[:QUERY_CHARS]], "query")[0]
    now_ts = timezone.now().timestamp()
    decay = np.exp(-DECAY_PER_DAY * np.maximum(0.0, (now_ts - store.updated) / 86400))
    value = similarity * decay
    best = [int(i) for i in np.argsort(-value, kind="stable")[:limit]]
    return _rows(store, [(i, float(value[i])) for i in best], similarity)


def _rows(store: _Store, picked: list[tuple[int, float]], similarity: np.ndarray) -> list[Recalled]:
    """The picked memories as rows, in the order given (one query for them all)."""
    rows = InvestigationMemory.objects.in_bulk([store.ids[i] for i, _ in picked])
    return [
        Recalled(rows[store.ids[i]], float(similarity[i]), score)
        for i, score in picked
        if store.ids[i] in rows  # deleted since the store was read
    ]


# --- the store, read once per change ------------------------------------------------------
#
# A recall compares the query with every memory of the project: reading 10,000 rows as
# model instances each time costs far more than the arithmetic. Each process keeps the
# vectors, words, confidence and age of the store, and reads it again when a cheap query
# says it changed (a memory added, changed, reinforced, deprecated or deleted).


@dataclass
class _Store:
    fingerprint: tuple = ()
    ids: list[uuid.UUID] = field(default_factory=list)
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    confidence: np.ndarray = field(default_factory=lambda: np.zeros(0))
    updated: np.ndarray = field(default_factory=lambda: np.zeros(0))  # epoch seconds
    postings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # word → (doc, tf)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def keyword_ranks(self, query: str, cap: int, excluded: set[int]) -> dict[int, int]:
        """BM25 ranks (1, 2, …) of the memories sharing a word with the query (TARSy's OR
        of the query's words, no stemming), at most ``cap``."""
        terms = set(words(query))
        if not terms or not self.ids:
            return {}
        count = len(self.ids)
        average = float(self.lengths.mean()) or 1.0
        scores: dict[int, float] = {}
        for term in terms:
            postings = self.postings.get(term)
            if not postings:
                continue
            idf = math.log(1 + (count - len(postings) + 0.5) / (len(postings) + 0.5))
            for doc, tf in postings:
                if doc in excluded:
                    continue
                norm = tf + BM25_K1 * (1 - BM25_B + BM25_B * self.lengths[doc] / average)
                scores[doc] = scores.get(doc, 0.0) + idf * tf * (BM25_K1 + 1) / norm
        ranked = sorted(scores, key=lambda doc: (-scores[doc], doc))[:cap]
        return {doc: rank for rank, doc in enumerate(ranked, start=1)}


_STORES: dict[tuple[str, str, int], _Store] = {}


def _store(embedder: Embedder, project: str) -> _Store:
    rows = InvestigationMemory.objects.filter(
        project=project,
        deprecated=False,
        embedding_model=embedder.name,
        dimensions=embedder.dimensions,
        embedding__isnull=False,
    )
    seen = rows.aggregate(
        n=Count("id"),
        changed=Max("updated_at"),
        made=Max("created_at"),
        trust=Sum("confidence"),
        seen=Sum("seen_count"),
    )
    fingerprint = tuple(seen.values())
    key = (project, embedder.name, embedder.dimensions)
    store = _STORES.get(key)
    if store is not None and store.fingerprint == fingerprint:
        return store
    values = list(
        rows.order_by("created_at", "id").values_list(
            "id", "content", "embedding", "confidence", "updated_at"
        )
    )
    postings: dict[str, list[tuple[int, int]]] = {}
    lengths = []
    for doc, (_, content, *_rest) in enumerate(values):
        tokens = Counter(words(content))
        lengths.append(sum(tokens.values()))
        for term, tf in tokens.items():
            postings.setdefault(term, []).append((doc, tf))
    store = _Store(
        fingerprint=fingerprint,
        ids=[v[0] for v in values],
        matrix=from_blobs([bytes(v[2] or b"") for v in values], embedder.dimensions),
        confidence=np.array([v[3] for v in values], dtype=np.float64),
        updated=np.array([v[4].timestamp() for v in values], dtype=np.float64),
        postings=postings,
        lengths=np.array(lengths, dtype=np.float64),
    )
    _STORES[key] = store
    return store
