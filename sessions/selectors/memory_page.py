"""What the memory page reads: the store filtered and searched, one memory with the
sessions that made, reinforced and were given it, and its audit history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from sessions.models import (
    DEFAULT_PROJECT,
    AlertSession,
    InjectedMemory,
    InvestigationMemory,
    MemoryEvent,
    MemoryEventKind,
)

# The deprecated filter: what each choice shows.
ACTIVE, DEPRECATED, ALL = "active", "deprecated", "all"
HISTORY_LIMIT = 200  # the newest audit events a memory's page shows


def memories(
    *,
    q: str = "",
    alert_type: str = "",
    category: str = "",
    valence: str = "",
    deprecated: str = ACTIVE,
    project: str = DEFAULT_PROJECT,
) -> QuerySet[InvestigationMemory]:
    """The memories matching, newest first; ``q``: a case-insensitive substring of the
    content (ASCII letters only on SQLite, as its LIKE)."""
    rows = InvestigationMemory.objects.filter(project=project).select_related("source_session")
    if q:
        rows = rows.filter(content__icontains=q)
    if alert_type:
        rows = rows.filter(alert_type=alert_type)
    if category:
        rows = rows.filter(category=category)
    if valence:
        rows = rows.filter(valence=valence)
    if deprecated == ACTIVE:
        rows = rows.filter(deprecated=False)
    elif deprecated == DEPRECATED:
        rows = rows.filter(deprecated=True)
    return rows.defer("embedding").order_by("-created_at", "-id")


def memory_alert_types(project: str = DEFAULT_PROJECT) -> list[str]:
    """The alert types memories were learned from (none for a memory without a session)."""
    return list(
        InvestigationMemory.objects.filter(project=project)
        .exclude(alert_type="")
        .order_by("alert_type")
        .values_list("alert_type", flat=True)
        .distinct()
    )


@dataclass(frozen=True)
class MemoryHistory:
    memory: InvestigationMemory | None  # None: deleted; its events remain
    memory_ref: str
    created_by: list[AlertSession]
    reinforced_by: list[tuple[AlertSession, MemoryEvent]]
    injected_into: list[InjectedMemory]
    events: list[MemoryEvent]

    @property
    def deleted(self) -> MemoryEvent | None:
        return next((e for e in self.events if e.kind == MemoryEventKind.DELETED), None)


def memory_history(memory_id: Any, project: str = DEFAULT_PROJECT) -> MemoryHistory | None:
    """One memory and what happened to it, newest event first; for a deleted memory its
    events alone. None: no such memory, and nothing was ever recorded of one."""
    ref = str(memory_id)
    memory = (
        InvestigationMemory.objects.filter(id=memory_id, project=project)
        .select_related("source_session")
        .defer("embedding")
        .first()
    )
    events = list(
        MemoryEvent.objects.filter(memory_ref=ref)
        .select_related("session")
        .order_by("-created_at", "-id")[:HISTORY_LIMIT]
    )
    if memory is None and not events:
        return None
    created_by: list[AlertSession] = []
    if memory is not None and memory.source_session is not None:
        created_by.append(memory.source_session)
    for event in events:
        if (
            event.kind == MemoryEventKind.CREATED
            and event.session is not None
            and event.session not in created_by
        ):
            created_by.append(event.session)
    reinforced_by = [
        (e.session, e) for e in events if e.kind == MemoryEventKind.REINFORCED and e.session
    ]
    injected_into = (
        list(
            InjectedMemory.objects.filter(memory=memory)
            .select_related("session")
            .order_by("-created_at")
        )
        if memory is not None
        else []
    )
    return MemoryHistory(memory, ref, created_by, reinforced_by, injected_into, events)
