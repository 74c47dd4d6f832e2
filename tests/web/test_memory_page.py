"""The memory page (issue 21): the store listed, searched and filtered; one memory with
the sessions that made, reinforced and were given it and its audit; staff edit,
deprecate and delete (recorded with who), others read only."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from llm.embeddings import LocalHashingEmbedder
from sessions import services
from sessions.models import InvestigationMemory, MemoryEvent, MemoryEventKind
from sessions.services.memory import memory_create
from tests.conftest import running_session

pytestmark = pytest.mark.django_db

EMBEDDER = LocalHashingEmbedder()
AWS_KEY = "AKIAQ7XRMB2NW4TK9P3Z"
PASSWORD = "password=Hunter2Secret99"


def remember(content: str, **fields) -> InvestigationMemory:
    return memory_create(
        embedder=EMBEDDER,
        content=content,
        category=fields.pop("category", "semantic"),
        valence=fields.pop("valence", "positive"),
        **fields,
    )


def listed(client: Client, query: str = "") -> list[str]:
    """The memory ids of the list's rows, in order."""
    response = client.get(f"/memories/{query}")
    assert response.status_code == 200
    return re.findall(
        r'class="memory-row" data-memory-id="([0-9a-f-]+)"', response.content.decode()
    )


@pytest.fixture
def staff(user):
    user.is_staff = True
    user.save()
    return user


def post(client: Client, path: str, data: dict | None = None):
    token = client.get("/memories/").cookies["csrftoken"].value
    return client.post(path, {**(data or {}), "csrfmiddlewaretoken": token})


def test_the_list_is_newest_first_filtered_searched_and_paged(browser_client):
    session, _ = running_session(alert_type="PodCrashLooping")
    oldest = remember("Payments pods need 1Gi of memory", source_session=session)
    procedural = remember("check the HPA first", category="procedural", valence="negative")
    deprecated = remember("restart the ingress", valence="neutral")
    services.memory_deprecate(memory_id=deprecated.id)

    # Deprecated memories are hidden unless asked for.
    assert listed(browser_client) == [str(procedural.id), str(oldest.id)]
    assert listed(browser_client, "?deprecated=all") == [
        str(deprecated.id),
        str(procedural.id),
        str(oldest.id),
    ]
    assert listed(browser_client, "?deprecated=deprecated") == [str(deprecated.id)]
    assert listed(browser_client, "?category=procedural") == [str(procedural.id)]
    assert listed(browser_client, "?valence=positive") == [str(oldest.id)]
    assert listed(browser_client, "?alert_type=PodCrashLooping") == [str(oldest.id)]
    assert listed(browser_client, "?q=PAYMENTS+pods") == [str(oldest.id)]
    assert listed(browser_client, "?q=nothing+like+this") == []

    page = browser_client.get("/memories/").content.decode()
    assert f'href="/sessions/{session.id}/"' in page  # the row's source session
    assert '<option value="PodCrashLooping">PodCrashLooping</option>' in page
    assert 'id="nav-memory"' in page

    # An htmx request from the filters gets the results alone, and the URL to show.
    fragment = browser_client.get("/memories/?category=procedural", HTTP_HX_REQUEST="true")
    assert fragment.content.decode().startswith('<section id="memory-results">')
    assert fragment["HX-Push-Url"] == "/memories/?category=procedural"

    first = remember("lesson number 0")
    for n in range(1, 26):
        remember(f"lesson number {n}")
    assert len(listed(browser_client)) == 25
    second = browser_client.get("/memories/?page=2").content.decode()
    assert "Page 2 of 2" in second
    assert listed(browser_client, "?page=2") == [str(first.id), str(procedural.id), str(oldest.id)]


def test_wrong_filters_are_named_and_ignored_never_a_server_error(browser_client):
    memory = remember("a lesson")
    response = browser_client.get(
        "/memories/?category=lore&deprecated=maybe&page=zz&q=" + "x" * 201
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "Unknown category &#x27;lore&#x27;" in page
    assert "Unknown deprecated filter &#x27;maybe&#x27;" in page
    assert "The search is over 200 characters; ignored." in page
    assert listed(browser_client, "?category=lore&deprecated=maybe") == [str(memory.id)]


def test_the_detail_shows_who_made_reinforced_and_was_given_it_and_the_history(browser_client):
    source, _ = running_session(alert_type="PodCrashLooping")
    memory = remember("payments pods need 1Gi", source_session=source)
    reinforcer, lease = running_session(alert_type="OOMKilled")
    services.memory_reflection_apply(
        lease=lease,
        session=reinforcer,
        embedder=EMBEDDER,
        create=[],
        reinforce=[str(memory.id)],
        deprecate=[],
    )
    given, given_lease = running_session(alert_type="HighLatency")
    services.memories_injected(lease=given_lease, session=given, injected=[(memory, 0.8, 0.02)])

    page = browser_client.get(f"/memories/{memory.id}/").content.decode()
    created = page.split('id="memory-created-by"')[1].split("</ul>")[0]
    reinforced = page.split('id="memory-reinforced-by"')[1].split("</ul>")[0]
    injected = page.split('id="memory-injected-into"')[1].split("</ul>")[0]
    assert f"/sessions/{source.id}/" in created
    assert f"/sessions/{reinforcer.id}/" in reinforced
    assert f"/sessions/{given.id}/" in injected
    assert f"/sessions/{given.id}/" not in created + reinforced
    kinds = re.findall(r'class="memory-event" data-kind="(\w+)"', page)
    assert kinds == ["injected", "reinforced", "created"]  # newest first
    assert "seen_count</strong>: 1 → 2" in page
    # Not staff: no controls.
    assert 'id="memory-edit-form"' not in page
    assert "memory-deprecate-form" not in page
    assert "memory-delete-link" not in page

    assert browser_client.get("/memories/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_someone_not_staff_gets_403_and_nothing_changes(browser_client):
    memory = remember("a lesson")
    for path, data in (
        (
            f"/memories/{memory.id}/edit/",
            {"content": "x", "category": "semantic", "valence": "neutral"},
        ),
        (f"/memories/{memory.id}/deprecate/", {"deprecated": "true"}),
        (f"/memories/{memory.id}/delete/", {}),
    ):
        response = post(browser_client, path, data)
        assert response.status_code == 403, path
        assert "Only staff" in response.content.decode()
    assert browser_client.get(f"/memories/{memory.id}/delete/").status_code == 403
    memory.refresh_from_db()
    assert (memory.content, memory.valence, memory.deprecated) == ("a lesson", "positive", False)
    assert MemoryEvent.objects.filter(memory=memory).count() == 1  # its creation only


def test_staff_edit_deprecate_and_delete_are_recorded_with_who(browser_client, staff):
    memory = remember("a lesson")
    page = browser_client.get(f"/memories/{memory.id}/").content.decode()
    assert 'id="memory-edit-form"' in page

    # Without the CSRF token: refused as everywhere else.
    assert (
        browser_client.post(f"/memories/{memory.id}/deprecate/", {"deprecated": "true"}).status_code
        == 403
    )

    edited = post(
        browser_client,
        f"/memories/{memory.id}/edit/",
        {
            "content": f"use {AWS_KEY} with {PASSWORD}",
            "category": "procedural",
            "valence": "negative",
        },
    )
    assert (edited.status_code, edited.url) == (302, f"/memories/{memory.id}/")
    memory.refresh_from_db()
    assert AWS_KEY not in memory.content
    assert "Hunter2Secret99" not in memory.content
    assert memory.content == "use [MASKED_AWS_ACCESS_KEY] with password=[MASKED_PASSWORD]"
    assert (memory.category, memory.valence) == ("procedural", "negative")
    assert (
        memory.embedding_model,
        bytes(memory.embedding),
    ) == ("local-hashing-v1", EMBEDDER.embed([memory.content], "document")[0].tobytes())

    assert (
        post(
            browser_client, f"/memories/{memory.id}/deprecate/", {"deprecated": "true"}
        ).status_code
        == 302
    )
    memory.refresh_from_db()
    assert memory.deprecated
    assert (
        post(
            browser_client, f"/memories/{memory.id}/deprecate/", {"deprecated": "false"}
        ).status_code
        == 302
    )
    memory.refresh_from_db()
    assert not memory.deprecated

    page = browser_client.get(f"/memories/{memory.id}/").content.decode()
    assert "Memory restored." in page
    assert AWS_KEY not in page
    assert "Hunter2Secret99" not in page
    history = page.split('id="memory-events"')[1]
    assert re.findall(r'data-kind="(\w+)"', history) == [
        "restored",
        "deprecated",
        "edited",
        "created",
    ]
    assert history.count('<td class="actor">alice</td>') == 3
    assert "category</strong>: semantic → procedural" in history

    confirm = browser_client.get(f"/memories/{memory.id}/delete/")
    assert confirm.status_code == 200
    assert "Delete this memory?" in confirm.content.decode()
    deleted = post(browser_client, f"/memories/{memory.id}/delete/")
    assert (deleted.status_code, deleted.url) == (302, "/memories/")
    assert not InvestigationMemory.objects.filter(id=memory.id).exists()
    event = MemoryEvent.objects.get(memory_ref=str(memory.id), kind=MemoryEventKind.DELETED)
    assert event.actor == "alice"
    # Its page stays, with the history.
    gone = browser_client.get(f"/memories/{memory.id}/").content.decode()
    assert "Deleted by alice" in gone
    assert 'data-kind="deleted"' in gone
    assert 'id="memory-edit-form"' not in gone


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"content": "  ", "category": "semantic", "valence": "positive"}, "The content is empty"),
        (
            {"content": "x" * 2001, "category": "semantic", "valence": "positive"},
            "content is over 2000 characters",
        ),
        (
            {"content": "ok", "category": "lore", "valence": "positive"},
            "Unknown category &#x27;lore&#x27;",
        ),
        (
            {"content": "ok", "category": "semantic", "valence": "happy"},
            "Unknown valence &#x27;happy&#x27;",
        ),
    ],
)
def test_bad_input_is_shown_on_the_form_and_changes_nothing(browser_client, staff, data, error):
    memory = remember("a lesson")
    response = post(browser_client, f"/memories/{memory.id}/edit/", data)
    assert response.status_code == 400
    page = response.content.decode()
    assert error in page.split('id="memory-edit-errors"')[1].split("</div>")[0]
    memory.refresh_from_db()
    assert (memory.content, memory.category, memory.valence) == ("a lesson", "semantic", "positive")
    assert MemoryEvent.objects.filter(memory=memory).count() == 1


def test_a_bad_deprecate_value_and_an_unknown_memory_are_named(browser_client, staff):
    memory = remember("a lesson")
    response = post(browser_client, f"/memories/{memory.id}/deprecate/", {"deprecated": "maybe"})
    assert (response.status_code, response.content.decode()) == (
        400,
        "deprecated must be true or false, not 'maybe'.",
    )
    unknown = "00000000-0000-0000-0000-000000000000"
    assert post(browser_client, f"/memories/{unknown}/edit/", {"content": "x"}).status_code == 404


def test_content_that_cannot_be_embedded_is_named_on_the_form(
    browser_client, staff, tarsy_config, monkeypatch
):
    monkeypatch.delenv("MEMPAGE_NO_SUCH_KEY", raising=False)
    tarsy_config(
        lambda config: (
            config["defaults"]
            .setdefault("memory", {})
            .update(
                embedding={
                    "provider": "openai",
                    "api_key_env": "MEMPAGE_NO_SUCH_KEY",
                    "dimensions": 768,
                }
            )
        )
    )
    memory = remember("a lesson")
    response = post(
        browser_client,
        f"/memories/{memory.id}/edit/",
        {"content": "new words", "category": "semantic", "valence": "positive"},
    )
    assert response.status_code == 502
    assert "cannot be embedded" in response.content.decode()
    assert "MEMPAGE_NO_SUCH_KEY" in response.content.decode()
    memory.refresh_from_db()
    assert memory.content == "a lesson"


def test_the_rest_api_records_its_edits_and_deletes_with_the_token_user(client, api_token, staff):
    memory = remember("a lesson")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"}
    changed = client.patch(
        f"/api/v1/memories/{memory.id}",
        data='{"valence": "neutral"}',
        content_type="application/json",
        **headers,
    )
    assert changed.status_code == 200
    assert client.delete(f"/api/v1/memories/{memory.id}", **headers).status_code == 204
    assert [
        (e.kind, e.actor, e.details.get("valence"))
        for e in MemoryEvent.objects.filter(memory_ref=str(memory.id)).order_by("id")
    ] == [
        (MemoryEventKind.CREATED, "", None),
        (MemoryEventKind.EDITED, "alice", ["positive", "neutral"]),
        (MemoryEventKind.DELETED, "alice", "neutral"),
    ]
