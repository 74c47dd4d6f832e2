"""Writing investigation memories (TARSy's ADR-0014, TARSY-GO-NEWER §1.5): a new lesson,
reinforcing or deprecating one, and what an SRE's rating of a session does to the
lessons it taught."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Least
from django.utils import timezone

from llm.embeddings import Embedder, EmbeddingFailed, to_blob
from masking import mask_text
from sessions.models import (
    DEFAULT_PROJECT,
    AlertSession,
    InjectedMemory,
    InvestigationMemory,
    MemoryCategory,
    MemoryEvent,
    MemoryEventKind,
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
# What of a memory's content an audit event keeps (old and new, each).
AUDIT_CONTENT_CHARS = 300
EDITABLE = ("content", "category", "valence", "deprecated")

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
    credential from one session's tool output into another session's prompt.
    ``EmbeddingFailed`` where the embedder cannot embed it (nothing is stored then)."""
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
    with transaction.atomic():
        memory = InvestigationMemory.objects.create(
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
        _event(
            memory,
            MemoryEventKind.CREATED,
            session=source_session,
            details={"confidence": memory.confidence},
        )
    return memory


def memory_reinforce(
    *, memory_id: Any, project: str = DEFAULT_PROJECT, session: AlertSession | None = None
) -> bool:
    """Seen again (in ``session``): more confidence, and its decay starts over. False: no
    such memory."""
    now = timezone.now()
    with transaction.atomic():
        rows = InvestigationMemory.objects.filter(id=memory_id, project=project)
        before = rows.select_for_update().values_list("confidence", "seen_count").first()
        if before is None or not rows.update(
            confidence=Least(F("confidence") * REINFORCE, 1.0),
            seen_count=F("seen_count") + 1,
            last_seen_at=now,
            updated_at=now,
        ):
            return False
        memory = rows.get()
        _event(
            memory,
            MemoryEventKind.REINFORCED,
            session=session,
            details={
                "confidence": [before[0], memory.confidence],
                "seen_count": [before[1], memory.seen_count],
            },
        )
    return True


def memory_deprecate(
    *, memory_id: Any, project: str = DEFAULT_PROJECT, session: AlertSession | None = None
) -> bool:
    """Left out of every recall from now on (a Reflector's conclusion from ``session``).
    False: no such memory."""
    with transaction.atomic():
        rows = InvestigationMemory.objects.filter(id=memory_id, project=project)
        was = rows.select_for_update().values_list("deprecated", flat=True).first()
        if was is None or not rows.update(deprecated=True, updated_at=timezone.now()):
            return False
        _event(
            rows.get(),
            MemoryEventKind.DEPRECATED,
            session=session,
            details={"deprecated": [was, True]},
        )
    return True


def memory_review_rating(*, session: AlertSession, old: str, new: str, actor: str = "") -> None:
    """An SRE rated (or re-rated, or cleared the rating of) ``session``: its lessons'
    trust follows. The old rating's effect is taken back first; then ``accurate`` raises
    confidence *1.2 (at most 1), ``partially_accurate`` lowers it *0.6, ``inaccurate``
    deprecates them. Each lesson it changed gets a ``review_adjusted`` event naming the
    reviewer (``actor``)."""
    if old == new:
        return
    now = timezone.now()
    mine = InvestigationMemory.objects.filter(source_session=session)
    with transaction.atomic():
        before = {m[0]: m[1:] for m in mine.values_list("id", "confidence", "deprecated")}
        if not before:
            return
        if old in _RATED:
            _scale(mine.filter(deprecated=False), 1 / _RATED[QualityRating(old)], now)
        elif old == QualityRating.INACCURATE:
            mine.filter(deprecated=True).update(deprecated=False, updated_at=now)
        if new in _RATED:
            _scale(mine.filter(deprecated=False), _RATED[QualityRating(new)], now)
        elif new == QualityRating.INACCURATE:
            mine.filter(deprecated=False).update(deprecated=True, updated_at=now)
        for memory in mine.defer("embedding"):
            confidence, deprecated = before[memory.id]
            if (confidence, deprecated) == (memory.confidence, memory.deprecated):
                continue
            details: dict[str, Any] = {"rating": [old, new]}
            if confidence != memory.confidence:
                details["confidence"] = [confidence, memory.confidence]
            if deprecated != memory.deprecated:
                details["deprecated"] = [deprecated, memory.deprecated]
            _event(
                memory,
                MemoryEventKind.REVIEW_ADJUSTED,
                session=session,
                actor=actor,
                details=details,
            )


def _scale(memories: Any, factor: float, now: Any) -> None:
    memories.update(confidence=Least(F("confidence") * factor, 1.0), updated_at=now)


def memories_injected(
    *, lease: Lease, session: AlertSession, injected: list[tuple[InvestigationMemory, float, float]]
) -> None:
    """The lessons put into the session's prompts (memory, similarity, score); a session
    run again (its worker lost) records each once."""
    with transaction.atomic():
        hold(lease)
        already = set(
            InjectedMemory.objects.filter(session=session).values_list("memory_id", flat=True)
        )
        MemoryEvent.objects.bulk_create(
            [
                MemoryEvent(
                    memory=memory,
                    memory_ref=str(memory.id),
                    kind=MemoryEventKind.INJECTED,
                    session=session,
                    details={"similarity": round(sim, 4), "score": round(score, 6)},
                )
                for memory, sim, score in injected
                if memory.id not in already
            ]
        )
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
            except (MemoryRejected, EmbeddingFailed) as problem:
                # TARSy's: a lesson that cannot be embedded is skipped, the rest go on.
                logger.warning("session %s: a lesson was not kept: %s", session.id, problem)
        for memory_id in reinforce:
            if not memory_reinforce(memory_id=memory_id, session=session):
                logger.warning("session %s: no memory %s to reinforce", session.id, memory_id)
        for memory_id in deprecate:
            if not memory_deprecate(memory_id=memory_id, session=session):
                logger.warning("session %s: no memory %s to deprecate", session.id, memory_id)
    return created


# --- a person's changes (the memory page, the REST API) ----------------------------------


def memory_edit(
    *,
    memory: InvestigationMemory,
    actor: str,
    changes: dict[str, Any],
    embedder: Callable[[], Embedder],
) -> InvestigationMemory:
    """A person's change of ``{content?, category?, valence?, deprecated?}``, recorded
    with ``actor``. New content is masked and embedded again (``embedder()`` makes the
    embedder then); ``MemoryRejected`` for a value that cannot be kept, ``EmbeddingFailed``
    where the new content cannot be embedded. Either way nothing is changed. A change to
    nothing is no change: no event."""
    if unknown := sorted(set(changes) - set(EDITABLE)):
        raise MemoryRejected(f"cannot change {', '.join(unknown)}; only {', '.join(EDITABLE)}")
    new: dict[str, Any] = {}
    if "content" in changes:
        content = changes["content"]
        if not isinstance(content, str) or not content.strip():
            raise MemoryRejected("content must be non-empty text")
        content = mask_text(content.strip())
        if len(content) > MAX_LESSON_CHARS:
            raise MemoryRejected(
                f"content is over {MAX_LESSON_CHARS} characters; a lesson is short"
            )
        new["content"] = content
    for name, allowed in (("category", MemoryCategory.values), ("valence", MemoryValence.values)):
        if name in changes:
            if changes[name] not in allowed:
                raise MemoryRejected(
                    f"invalid {name} {changes[name]!r}; one of {', '.join(allowed)}"
                )
            new[name] = str(changes[name])
    if "deprecated" in changes:
        if not isinstance(changes["deprecated"], bool):
            raise MemoryRejected("deprecated must be true or false")
        new["deprecated"] = changes["deprecated"]
    vector = None
    if new.get("content", memory.content) != memory.content:
        made = embedder()
        vector = (made, made.embed([new["content"]], "document")[0])
    with transaction.atomic():
        current = InvestigationMemory.objects.select_for_update().get(pk=memory.pk)
        changed = {
            name: [getattr(current, name), value]
            for name, value in new.items()
            if getattr(current, name) != value
        }
        if not changed:
            return current
        for name, (_, value) in changed.items():
            setattr(current, name, value)
        fields = [*changed, "updated_at"]
        if "content" in changed:
            if vector is None:  # ``memory`` was read before someone else changed it
                made = embedder()
                vector = (made, made.embed([new["content"]], "document")[0])
            made, row = vector
            current.embedding = to_blob(row)
            current.embedding_model, current.dimensions = made.name, made.dimensions
            fields += ["embedding", "embedding_model", "dimensions"]
        current.updated_at = timezone.now()
        current.save(update_fields=fields)
        if "content" in changed:
            changed["content"] = [_cut(text) for text in changed["content"]]
        if set(changed) == {"deprecated"}:
            kind = MemoryEventKind.DEPRECATED if new["deprecated"] else MemoryEventKind.RESTORED
        else:
            kind = MemoryEventKind.EDITED
        _event(current, kind, actor=actor, details=changed)
    return current


def memory_remove(*, memory: InvestigationMemory, actor: str) -> None:
    """A person deletes a memory; its ``deleted`` event (with what it said) stays."""
    with transaction.atomic():
        _event(
            memory,
            MemoryEventKind.DELETED,
            actor=actor,
            details={
                "content": _cut(memory.content),
                "category": memory.category,
                "valence": memory.valence,
                "confidence": memory.confidence,
                "seen_count": memory.seen_count,
            },
        )
        memory.delete()


def _event(
    memory: InvestigationMemory,
    kind: str,
    *,
    session: AlertSession | None = None,
    actor: str = "",
    details: dict[str, Any] | None = None,
) -> MemoryEvent:
    return MemoryEvent.objects.create(
        memory=memory,
        memory_ref=str(memory.id),
        kind=kind,
        session=session,
        actor=actor,
        details=details or {},
    )


def _cut(text: str) -> str:
    return text if len(text) <= AUDIT_CONTENT_CHARS else text[:AUDIT_CONTENT_CHARS] + "…"
