"""Investigation memories in TARSy's shapes (TARSY-API §1.12): a session's lessons, those
it was given, and the whole store, a page at a time; staff may edit and delete."""

from __future__ import annotations

import math
from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router

from agents.memory import memory_embedder
from api.rest import schemas
from api.rest.common import iso, json_body, only_fields, respond
from api.rest.docs import ERRORS
from config.loader import get_config
from llm.embeddings import EmbeddingFailed
from sessions.auth import ApiRejected, request_author
from sessions.models import (
    DEFAULT_PROJECT,
    InjectedMemory,
    InvestigationMemory,
    MemoryCategory,
    MemoryValence,
)
from sessions.services.memory import EDITABLE, MemoryRejected, memory_edit, memory_remove

router = Router(tags=["memories"])

PAGE_SIZE, MAX_PAGE_SIZE = 20, 200
NOT_FOUND = "memory not found"


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
    response={200: dict[str, Any], **ERRORS, 404: schemas.Error, 502: schemas.Error},
)
def memory_update(request: HttpRequest, memory_id: UUID) -> JsonResponse:
    """Staff only: ``{content?, category?, valence?, deprecated?}``. New content is masked
    and embedded again."""
    _staff(request)
    memory = _memory(memory_id)
    body = json_body(request, example='{"content": "...", "deprecated": true}') or {}
    only_fields(body, EDITABLE)
    try:
        memory = memory_edit(
            memory=memory,
            actor=request_author(request),
            changes=body,
            embedder=lambda: memory_embedder(get_config()),
        )
    except MemoryRejected as problem:
        raise ApiRejected(str(problem)) from None
    except EmbeddingFailed as problem:  # nothing is changed
        raise ApiRejected(f"the new content cannot be embedded: {problem}", 502) from None
    except InvestigationMemory.DoesNotExist:  # deleted meanwhile
        raise ApiRejected(NOT_FOUND, 404) from None
    return respond(memory_item(memory))


@router.delete("/memories/{uuid:memory_id}", response={204: None, **ERRORS, 404: schemas.Error})
def memory_delete(request: HttpRequest, memory_id: UUID) -> HttpResponse:
    """Staff only."""
    _staff(request)
    memory_remove(memory=_memory(memory_id), actor=request_author(request))
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
