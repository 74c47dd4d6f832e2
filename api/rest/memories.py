"""Investigation memories in TARSy's shapes (TARSY-API §1.12): a session's lessons, those
it was given, and the whole store, a page at a time; staff may edit and delete."""

from __future__ import annotations

import math
from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from ninja import Router

from agents.memory import memory_embedder
from api.rest import schemas
from api.rest.common import iso, json_body, only_fields, respond
from api.rest.docs import ERRORS
from config.loader import get_config
from llm.embeddings import to_blob
from masking import mask_text
from sessions.auth import ApiRejected
from sessions.models import (
    DEFAULT_PROJECT,
    InjectedMemory,
    InvestigationMemory,
    MemoryCategory,
    MemoryValence,
)
from sessions.services.memory import MAX_LESSON_CHARS

router = Router(tags=["memories"])

PAGE_SIZE, MAX_PAGE_SIZE = 20, 200
NOT_FOUND = "memory not found"
EDITABLE = ("content", "category", "valence", "deprecated")


def memory_item(memory: InvestigationMemory) -> dict[str, Any]:
    return {
        "id": str(memory.id),
        "project": memory.project,
        "content": memory.content,
        "category": memory.category,
        "valence": memory.valence,
        "confidence": memory.confidence,
        "seen_count": memory.seen_count,
        "source_session_id": str(memory.source_session_id) if memory.source_session_id else None,
        "alert_type": memory.alert_type or None,
        "chain_id": memory.chain_id or None,
        "deprecated": memory.deprecated,
        "created_at": iso(memory.created_at),
        "updated_at": iso(memory.updated_at),
        "last_seen_at": iso(memory.last_seen_at),
    }


@router.get("/sessions/{uuid:session_id}/memories", response={200: list[dict[str, Any]], **ERRORS})
def session_memories(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """The lessons this session taught (``[]`` for none, or no such session)."""
    memories = InvestigationMemory.objects.filter(source_session_id=session_id)
    return respond([memory_item(m) for m in memories.order_by("created_at")])


@router.get(
    "/sessions/{uuid:session_id}/injected-memories", response={200: list[dict[str, Any]], **ERRORS}
)
def session_injected_memories(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """The lessons put into this session's prompts, best match first."""
    injected = InjectedMemory.objects.filter(session_id=session_id).select_related("memory")
    return respond([memory_item(i.memory) for i in injected.order_by("-score")])


@router.get("/memories", response={200: dict[str, Any], **ERRORS})
def memories_list(
    request: HttpRequest,
    page: int = 1,
    page_size: int = PAGE_SIZE,
    category: str | None = None,
    valence: str | None = None,
    deprecated: bool | None = None,
    source_session_id: UUID | None = None,
) -> JsonResponse:
    """Newest first; ``page_size`` at most 200."""
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ApiRejected(f"page must be at least 1 and page_size 1 to {MAX_PAGE_SIZE}")
    memories = InvestigationMemory.objects.filter(project=DEFAULT_PROJECT)
    if category is not None:
        memories = memories.filter(category=_choice("category", category, MemoryCategory.values))
    if valence is not None:
        memories = memories.filter(valence=_choice("valence", valence, MemoryValence.values))
    if deprecated is not None:
        memories = memories.filter(deprecated=deprecated)
    if source_session_id is not None:
        memories = memories.filter(source_session_id=source_session_id)
    total = memories.count()
    start = (page - 1) * page_size
    return respond(
        {
            "memories": [
                memory_item(m) for m in memories.order_by("-created_at")[start : start + page_size]
            ],
            "total": total,
            "page": page,
            "page_size": page_size,
            "total_pages": math.ceil(total / page_size),
        }
    )


@router.get(
    "/memories/{uuid:memory_id}", response={200: dict[str, Any], **ERRORS, 404: schemas.Error}
)
def memory_get(request: HttpRequest, memory_id: UUID) -> JsonResponse:
    return respond(memory_item(_memory(memory_id)))


@router.patch(
    "/memories/{uuid:memory_id}",
    response={200: dict[str, Any], **ERRORS, 404: schemas.Error},
)
def memory_update(request: HttpRequest, memory_id: UUID) -> JsonResponse:
    """Staff only: ``{content?, category?, valence?, deprecated?}``. New content is masked
    and embedded again."""
    _staff(request)
    memory = _memory(memory_id)
    body = json_body(request, example='{"content": "...", "deprecated": true}') or {}
    only_fields(body, EDITABLE)
    if "content" in body:
        content = body["content"]
        if not isinstance(content, str) or not content.strip():
            raise ApiRejected("content must be non-empty text")
        content = mask_text(content.strip())
        if len(content) > MAX_LESSON_CHARS:
            raise ApiRejected(f"content is over {MAX_LESSON_CHARS} characters; a lesson is short")
        if content != memory.content:
            embedder = memory_embedder(get_config())
            memory.content = content
            memory.embedding = to_blob(embedder.embed([content], "document")[0])
            memory.embedding_model, memory.dimensions = embedder.name, embedder.dimensions
    if "category" in body:
        memory.category = _choice("category", body["category"], MemoryCategory.values)
    if "valence" in body:
        memory.valence = _choice("valence", body["valence"], MemoryValence.values)
    if "deprecated" in body:
        if not isinstance(body["deprecated"], bool):
            raise ApiRejected("deprecated must be true or false")
        memory.deprecated = body["deprecated"]
    memory.updated_at = timezone.now()
    memory.save()
    return respond(memory_item(memory))


@router.delete("/memories/{uuid:memory_id}", response={204: None, **ERRORS, 404: schemas.Error})
def memory_delete(request: HttpRequest, memory_id: UUID) -> HttpResponse:
    """Staff only."""
    _staff(request)
    _memory(memory_id).delete()
    return HttpResponse(status=204)


def _memory(memory_id: UUID) -> InvestigationMemory:
    memory = InvestigationMemory.objects.filter(id=memory_id, project=DEFAULT_PROJECT).first()
    if memory is None:
        raise ApiRejected(NOT_FOUND, 404)
    return memory


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise ApiRejected("only staff may change or delete memories", 403)


def _choice(name: str, value: Any, allowed: list[str]) -> str:
    if value not in allowed:
        raise ApiRejected(f"invalid {name} {value!r}; one of {', '.join(allowed)}")
    return str(value)
