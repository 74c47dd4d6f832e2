"""Writing investigation memories (TARSy's ADR-0014, TARSY-GO-NEWER §1.5): a new lesson,
reinforcing or deprecating one, and what an SRE's rating of a session does to the
lessons it taught."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Least
from django.utils import timezone

from llm.embeddings import Embedder, to_blob
from masking import mask_text
from sessions.models import (
    DEFAULT_PROJECT,
    AlertSession,
    InjectedMemory,
    InvestigationMemory,
    MemoryCategory,
    MemoryValence,
    QualityRating,
)
from sessions.services.leases import Lease, hold

logger = logging.getLogger(__name__)

NEW_CONFIDENCE = 0.7  # a Reflector's lesson
FEEDBACK_CONFIDENCE = 0.9  # a lesson from an SRE's feedback
REINFORCE = 1.1
# A lesson is a sentence to a short paragraph; a longer one would crowd the prompts it
# goes into.
MAX_LESSON_CHARS = 2000

# A rating's factor on the confidence of the session's lessons (``inaccurate``
# deprecates them instead); dividing by it takes it back (approximate where capped).
_RATED = {
    QualityRating.ACCURATE: 1.2,
    QualityRating.PARTIALLY_ACCURATE: 0.6,
}


class MemoryRejected(ValueError):
    pass


def memory_create(
    *,
    embedder: Embedder,
    content: str,
    category: str,
    valence: str,
    confidence: float = NEW_CONFIDENCE,
    source_session: AlertSession | None = None,
    project: str = DEFAULT_PROJECT,
) -> InvestigationMemory:
    """A new lesson, masked before it is stored or embedded: a memory must never carry a
    credential from one session's tool output into another session's prompt."""
    if category not in MemoryCategory.values:
        raise MemoryRejected(f"category {category!r}; one of {', '.join(MemoryCategory.values)}")
    if valence not in MemoryValence.values:
        raise MemoryRejected(f"valence {valence!r}; one of {', '.join(MemoryValence.values)}")
    content = mask_text(content.strip())
    if not content:
        raise MemoryRejected("content is empty")
    if len(content) > MAX_LESSON_CHARS:
        raise MemoryRejected(f"content is over {MAX_LESSON_CHARS} characters; a lesson is short")
    vector = embedder.embed([content], "document")[0]
    now = timezone.now()
    return InvestigationMemory.objects.create(
        project=project,
        content=content,
        category=category,
        valence=valence,
        confidence=max(0.0, min(confidence, 1.0)),
        source_session=source_session,
        alert_type=source_session.alert_type if source_session else "",
        chain_id=source_session.chain_id if source_session else "",
        embedding=to_blob(vector),
        embedding_model=embedder.name,
        dimensions=embedder.dimensions,
        updated_at=now,
        last_seen_at=now,
    )


def memory_reinforce(*, memory_id: Any, project: str = DEFAULT_PROJECT) -> bool:
    """Seen again: more confidence, and its decay starts over. False: no such memory."""
    now = timezone.now()
    return bool(
        InvestigationMemory.objects.filter(id=memory_id, project=project).update(
            confidence=Least(F("confidence") * REINFORCE, 1.0),
            seen_count=F("seen_count") + 1,
            last_seen_at=now,
            updated_at=now,
        )
    )


def memory_deprecate(*, memory_id: Any, project: str = DEFAULT_PROJECT) -> bool:
    """Left out of every recall from now on. False: no such memory."""
    return bool(
        InvestigationMemory.objects.filter(id=memory_id, project=project).update(
            deprecated=True, updated_at=timezone.now()
        )
    )


def memory_review_rating(*, session: AlertSession, old: str, new: str) -> None:
    """An SRE rated (or re-rated, or cleared the rating of) ``session``: its lessons'
    trust follows. The old rating's effect is taken back first; then ``accurate`` raises
    confidence *1.2 (at most 1), ``partially_accurate`` lowers it *0.6, ``inaccurate``
    deprecates them."""
    if old == new:
        return
    now = timezone.now()
    mine = InvestigationMemory.objects.filter(source_session=session)
    with transaction.atomic():
        if old in _RATED:
            _scale(mine.filter(deprecated=False), 1 / _RATED[QualityRating(old)], now)
        elif old == QualityRating.INACCURATE:
            mine.filter(deprecated=True).update(deprecated=False, updated_at=now)
        if new in _RATED:
            _scale(mine.filter(deprecated=False), _RATED[QualityRating(new)], now)
        elif new == QualityRating.INACCURATE:
            mine.filter(deprecated=False).update(deprecated=True, updated_at=now)


def _scale(memories: Any, factor: float, now: Any) -> None:
    memories.update(confidence=Least(F("confidence") * factor, 1.0), updated_at=now)


def memories_injected(
    *, lease: Lease, session: AlertSession, injected: list[tuple[InvestigationMemory, float, float]]
) -> None:
    """The lessons put into the session's prompts (memory, similarity, score); a session
    run again (its worker lost) records each once."""
    with transaction.atomic():
        hold(lease)
        InjectedMemory.objects.bulk_create(
            [
                InjectedMemory(session=session, memory=memory, similarity=sim, score=score)
                for memory, sim, score in injected
            ],
            ignore_conflicts=True,
        )


def memory_reflection_apply(
    *,
    lease: Lease,
    session: AlertSession,
    embedder: Embedder,
    create: list[dict[str, str]],
    reinforce: list[str],
    deprecate: list[str],
    confidence: float = NEW_CONFIDENCE,
) -> list[InvestigationMemory]:
    """What a Reflector concluded of ``session``, kept while its worker holds the lease.
    Each action stands alone: one that cannot be applied is logged and the rest go on."""
    created = []
    with transaction.atomic():
        hold(lease)
        for lesson in create:
            try:
                created.append(
                    memory_create(
                        embedder=embedder,
                        content=lesson["content"],
                        category=lesson["category"],
                        valence=lesson["valence"],
                        confidence=confidence,
                        source_session=session,
                    )
                )
            except MemoryRejected as problem:
                logger.warning("session %s: a lesson was not kept: %s", session.id, problem)
        for memory_id in reinforce:
            if not memory_reinforce(memory_id=memory_id):
                logger.warning("session %s: no memory %s to reinforce", session.id, memory_id)
        for memory_id in deprecate:
            if not memory_deprecate(memory_id=memory_id):
                logger.warning("session %s: no memory %s to deprecate", session.id, memory_id)
    return created
