"""TARSy's memory routes (TARSY-API §1.12): a session's lessons and those it was given,
the store a page at a time, and staff-only edits that mask and re-embed."""

from __future__ import annotations

import json

import pytest

from llm.embeddings import LocalHashingEmbedder, from_blobs
from sessions import services
from sessions.models import InjectedMemory, InvestigationMemory

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, api_token):
    def call(method: str, path: str, body: dict | None = None):
        return getattr(client, method)(
            f"/api/v1{path}",
            data=json.dumps(body) if body is not None else None,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {api_token}",
        )

    return call


def remember(content: str, **fields) -> InvestigationMemory:
    return services.memory_create(
        embedder=LocalHashingEmbedder(),
        content=content,
        category=fields.pop("category", "semantic"),
        valence=fields.pop("valence", "positive"),
        **fields,
    )


@pytest.fixture
def session():
    return services.session_create(
        alert_type="kubernetes", alert_data="x", chain_id="kubernetes-investigation", author="t"
    )


def test_a_sessions_lessons_and_those_it_was_given(api, session):
    taught = remember("payments pods need 1Gi", source_session=session)
    given = remember("check the config map first")
    InjectedMemory.objects.create(session=session, memory=given, similarity=0.8, score=0.02)
    [item] = api("get", f"/sessions/{session.id}/memories").json()
    assert item == {
        "id": str(taught.id),
        "project": "default",
        "content": "payments pods need 1Gi",
        "category": "semantic",
        "valence": "positive",
        "confidence": 0.7,
        "seen_count": 1,
        "source_session_id": str(session.id),
        "alert_type": "kubernetes",
        "chain_id": "kubernetes-investigation",
        "deprecated": False,
        "created_at": item["created_at"],
        "updated_at": item["updated_at"],
        "last_seen_at": item["last_seen_at"],
    }
    assert [m["id"] for m in api("get", f"/sessions/{session.id}/injected-memories").json()] == [
        str(given.id)
    ]
    unknown = "00000000-0000-0000-0000-000000000000"
    assert api("get", f"/sessions/{unknown}/memories").json() == []


def test_the_store_pages_and_filters(api, session):
    for n in range(3):
        remember(f"lesson {n}", category="procedural", valence="negative")
    remember("from the session", source_session=session)
    page = api("get", "/memories?page=1&page_size=2").json()
    assert (page["total"], page["page"], page["page_size"], page["total_pages"]) == (4, 1, 2, 2)
    assert [m["content"] for m in page["memories"]] == ["from the session", "lesson 2"]
    assert api("get", "/memories?category=procedural").json()["total"] == 3
    assert api("get", "/memories?valence=positive").json()["total"] == 1
    assert api("get", f"/memories?source_session_id={session.id}").json()["total"] == 1
    assert api("get", "/memories?deprecated=true").json()["total"] == 0
    bad = api("get", "/memories?category=lore")
    assert (bad.status_code, "invalid category 'lore'" in bad.json()["error"]) == (400, True)
    assert api("get", "/memories?page_size=500").status_code == 400


def test_only_staff_edit_and_new_content_is_masked_and_embedded_again(api, user):
    memory = remember("check the config map first")
    before = bytes(memory.embedding)
    refused = api("patch", f"/memories/{memory.id}", {"deprecated": True})
    assert refused.status_code == 403
    user.is_staff = True
    user.save()
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
    changed = api(
        "patch", f"/memories/{memory.id}", {"content": f"use {token}", "valence": "neutral"}
    )
    assert changed.status_code == 200, changed.json()
    assert token not in changed.json()["content"]
    assert changed.json()["valence"] == "neutral"
    memory.refresh_from_db()
    assert bytes(memory.embedding) != before
    expected = LocalHashingEmbedder().embed([memory.content], "document")
    assert (from_blobs([bytes(memory.embedding)], 768) == expected).all()
    assert api("patch", f"/memories/{memory.id}", {"category": "lore"}).status_code == 400
    assert api("patch", f"/memories/{memory.id}", {"owner": "x"}).status_code == 400
    assert api("patch", f"/memories/{memory.id}", {"content": "x" * 2001}).status_code == 400
    assert api("delete", f"/memories/{memory.id}").status_code == 204
    missing = api("get", f"/memories/{memory.id}")
    assert (missing.status_code, missing.json()["error"]) == (404, "memory not found")
