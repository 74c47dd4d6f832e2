"""The memory audit (issue 21): every change to a memory, and every session it was given
to, is a ``MemoryEvent`` naming the session or the person, written with the change."""

from __future__ import annotations

import pytest

from llm.embeddings import EmbeddingFailed, LocalHashingEmbedder, OpenAIEmbedder
from sessions import services
from sessions.models import (
    AlertSession,
    InjectedMemory,
    InvestigationMemory,
    MemoryEvent,
    MemoryEventKind,
    QualityRating,
)
from sessions.services import ReviewChange
from sessions.services.memory import (
    AUDIT_CONTENT_CHARS,
    MemoryRejected,
    memory_create,
    memory_edit,
    memory_remove,
)
from tests.conftest import running_session

pytestmark = pytest.mark.django_db

EMBEDDER = LocalHashingEmbedder()
AWS_KEY = "AKIAQ7XRMB2NW4TK9P3Z"


def remember(content: str, **fields) -> InvestigationMemory:
    return memory_create(
        embedder=EMBEDDER,
        content=content,
        category=fields.pop("category", "semantic"),
        valence=fields.pop("valence", "positive"),
        **fields,
    )


def events(memory) -> list[tuple[str, str, object, dict]]:
    return [
        (e.kind, e.actor, e.session_id, e.details)
        for e in MemoryEvent.objects.filter(memory_ref=str(memory.id)).order_by("id")
    ]


def edit(memory, actor="alice", **changes) -> InvestigationMemory:
    return memory_edit(memory=memory, actor=actor, changes=changes, embedder=lambda: EMBEDDER)


def test_a_reflectors_lessons_reinforcements_and_deprecations_name_their_session():
    source, _ = running_session()
    old = remember("payments pods need 1Gi", source_session=source, confidence=0.5)
    stale = remember("restart the ingress first")
    assert events(old) == [(MemoryEventKind.CREATED, "", source.id, {"confidence": 0.5})]
    assert events(stale)[0][2] is None  # no session: none named

    later, lease = running_session()
    [new] = services.memory_reflection_apply(
        lease=lease,
        session=later,
        embedder=EMBEDDER,
        create=[{"content": "check the HPA", "category": "procedural", "valence": "neutral"}],
        reinforce=[str(old.id), "00000000-0000-0000-0000-000000000000"],
        deprecate=[str(stale.id)],
    )
    assert events(new) == [(MemoryEventKind.CREATED, "", later.id, {"confidence": 0.7})]
    kind, actor, session_id, details = events(old)[-1]
    assert (kind, actor, session_id) == (MemoryEventKind.REINFORCED, "", later.id)
    assert details["seen_count"] == [1, 2]
    assert details["confidence"][0] == 0.5
    assert details["confidence"][1] == pytest.approx(0.55)
    assert events(stale)[-1] == (
        MemoryEventKind.DEPRECATED,
        "",
        later.id,
        {"deprecated": [False, True]},
    )
    # The unknown memory left no event behind.
    assert MemoryEvent.objects.count() == 5


def test_injection_is_recorded_once_per_session_and_memory():
    session, lease = running_session()
    first, second = remember("alpha lesson"), remember("beta lesson")
    services.memories_injected(lease=lease, session=session, injected=[(first, 0.8, 0.02)])
    # The session run again (its worker lost): the first is not recorded twice.
    services.memories_injected(
        lease=lease, session=session, injected=[(first, 0.8, 0.02), (second, 0.6, 0.01)]
    )
    assert events(first)[1:] == [
        (MemoryEventKind.INJECTED, "", session.id, {"similarity": 0.8, "score": 0.02})
    ]
    assert [e[0] for e in events(second)] == [MemoryEventKind.CREATED, MemoryEventKind.INJECTED]
    assert InjectedMemory.objects.filter(session=session).count() == 2


def test_a_review_rating_records_each_lesson_it_changed_with_the_reviewer():
    session = services.session_create(
        alert_type="kubernetes", alert_data="x", chain_id="kubernetes-investigation", author="t"
    )
    claim = services.session_claim(session_id=session.id, worker_id="w")
    services.session_end(lease=claim.lease, status="completed", executive_summary="done")
    taught = remember("a lesson of the session", source_session=session, confidence=0.5)
    gone = remember("already deprecated", source_session=session)
    services.memory_deprecate(memory_id=gone.id)
    other = remember("another session's lesson")

    services.review_apply(
        session_id=session.id,
        change=ReviewChange("complete", quality_rating=QualityRating.ACCURATE),
        actor="bob",
    )
    kind, actor, session_id, details = events(taught)[-1]
    assert (kind, actor, session_id) == (MemoryEventKind.REVIEW_ADJUSTED, "bob", session.id)
    assert details["rating"] == ["", "accurate"]
    assert details["confidence"][0] == 0.5
    assert details["confidence"][1] == pytest.approx(0.6)
    assert "deprecated" not in details
    # Unchanged by the rating (deprecated already; not this session's): no event.
    assert events(gone)[-1][0] == MemoryEventKind.DEPRECATED
    assert len(events(other)) == 1

    services.review_apply(
        session_id=session.id,
        change=ReviewChange("update_feedback", quality_rating=QualityRating.INACCURATE),
        actor="carol",
    )
    kind, actor, _, details = events(taught)[-1]
    assert (kind, actor, details["rating"]) == (
        MemoryEventKind.REVIEW_ADJUSTED,
        "carol",
        ["accurate", "inaccurate"],
    )
    assert details["deprecated"] == [False, True]


def test_a_persons_edit_is_masked_recorded_with_old_and_new_and_cut():
    memory = remember("short lesson")
    long_text = f"rotate {AWS_KEY} and " + "y" * 600
    memory = edit(memory, content=long_text, category="procedural", valence="negative")
    assert AWS_KEY not in memory.content
    assert "[MASKED_AWS_ACCESS_KEY]" in memory.content
    kind, actor, session_id, details = events(memory)[-1]
    assert (kind, actor, session_id) == (MemoryEventKind.EDITED, "alice", None)
    assert details["category"] == ["semantic", "procedural"]
    assert details["valence"] == ["positive", "negative"]
    old, new = details["content"]
    assert old == "short lesson"
    assert new.startswith("rotate [MASKED_AWS_ACCESS_KEY]")
    assert new.endswith("…")
    assert len(new) == AUDIT_CONTENT_CHARS + 1
    assert AWS_KEY not in str(details)

    # The same values again change nothing and record nothing.
    count = MemoryEvent.objects.count()
    edit(memory, content=long_text, category="procedural")
    assert MemoryEvent.objects.count() == count


def test_deprecation_and_restoring_by_a_person_are_their_own_kinds():
    memory = remember("a lesson")
    memory = edit(memory, actor="dave", deprecated=True)
    assert memory.deprecated
    memory = edit(memory, actor="erin", deprecated=False)
    assert [(e[0], e[1], e[3]) for e in events(memory)[1:]] == [
        (MemoryEventKind.DEPRECATED, "dave", {"deprecated": [False, True]}),
        (MemoryEventKind.RESTORED, "erin", {"deprecated": [True, False]}),
    ]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"content": "   "}, "content must be non-empty text"),
        ({"content": "x" * 2001}, "content is over 2000 characters"),
        # With new content that is fine: none of it is kept either.
        ({"content": "new words", "category": "lore"}, "invalid category 'lore'"),
        ({"content": "new words", "valence": "happy"}, "invalid valence 'happy'"),
        ({"content": "new words", "deprecated": "yes"}, "deprecated must be true or false"),
        ({"content": "new words", "owner": "x"}, "cannot change owner"),
    ],
)
def test_a_rejected_edit_changes_nothing_and_records_nothing(changes, problem):
    memory = remember("a lesson")
    with pytest.raises(MemoryRejected, match=problem):
        edit(memory, **changes)
    memory.refresh_from_db()
    assert memory.content == "a lesson"
    assert len(events(memory)) == 1


def test_content_that_cannot_be_embedded_changes_nothing(monkeypatch):
    monkeypatch.delenv("MEMPAGE_NO_SUCH_KEY", raising=False)
    memory = remember("a lesson")
    provider = OpenAIEmbedder(api_key_env="MEMPAGE_NO_SUCH_KEY", dimensions=768)
    with pytest.raises(EmbeddingFailed, match="MEMPAGE_NO_SUCH_KEY"):
        memory_edit(
            memory=memory,
            actor="alice",
            changes={"content": "new words", "valence": "negative"},
            embedder=lambda: provider,
        )
    memory.refresh_from_db()
    assert (memory.content, memory.valence) == ("a lesson", "positive")
    assert len(events(memory)) == 1


def test_a_deleted_memorys_history_stays_with_what_it_said():
    session, lease = running_session()
    memory = remember("a lesson to delete", source_session=session)
    services.memories_injected(lease=lease, session=session, injected=[(memory, 0.9, 0.03)])
    memory_id = memory.id
    memory_remove(memory=memory, actor="frank")
    assert not InvestigationMemory.objects.filter(id=memory_id).exists()
    rows = MemoryEvent.objects.filter(memory_ref=str(memory_id)).order_by("id")
    assert [(e.kind, e.memory_id) for e in rows] == [
        (MemoryEventKind.CREATED, None),
        (MemoryEventKind.INJECTED, None),
        (MemoryEventKind.DELETED, None),
    ]
    deleted = rows.last()
    assert deleted.actor == "frank"
    assert deleted.details["content"] == "a lesson to delete"
    assert deleted.details["category"] == "semantic"
    # The session's own row is untouched; its link from the events too.
    assert AlertSession.objects.filter(id=session.id).exists()
    assert rows.first().session_id == session.id
