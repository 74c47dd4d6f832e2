"""Every read of the domain that is more than ``objects.get``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import Case, Count, F, Q, QuerySet, Sum, TextField, Value, When
from django.db.models.functions import Length
from django.utils import timezone

from sessions import search
from sessions.models import (
    RUNNING_SESSION_STATUSES,
    AgentExecution,
    AlertSession,
    LLMInteraction,
    SessionEvent,
    SessionEventType,
    SessionStatus,
    Stage,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
    WorkerCluster,
)

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 100


def session_list(
    *, statuses: list[str] | None = None, alert_type: str = "", query: search.Query | None = None
) -> QuerySet[AlertSession]:
    sessions = AlertSession.objects.all().order_by("-created_at")
    if statuses:
        sessions = sessions.filter(status__in=statuses)
    if alert_type:
        sessions = sessions.filter(alert_type=alert_type)
    if query:
        sessions = search.matching(sessions, query)
    return sessions.defer("alert_data", "final_analysis")


# Finding each match's session and sorting them costs about this many times as much per
# match as ``search.matching_in_order`` costs per session its walk passes (SQLite, at
# 100,000 sessions: ~3.3 µs against ~0.3 µs).
SORT_TO_WALK_COST = 11


def session_search(
    sessions: QuerySet[AlertSession],
    query: search.Query,
    *,
    matches: int | None,
    rows_needed: int,
    index_ordered: bool,
    filtered: bool,
) -> tuple[QuerySet[AlertSession], int | None]:
    """``sessions`` narrowed to those matching ``query``, for a caller inside
    ``search.gathered(query)`` (which counted ``matches``; None on PostgreSQL) that orders
    them and takes its page (its first ``rows_needed`` rows); and how many they are when
    that is known without counting them (no filter but the search).

    With an order an index can walk (``index_ordered``: by creation time, or by a column
    whose index goes on by creation time: status, alert type, author), a common word
    is searched by walking the sessions in that order (``search.matching_in_order``); a
    rare one by joining its matches to their sessions and sorting them
    (``search.matching_gathered``), whichever costs less. Both give the same sessions in
    the same order."""
    if matches is None:  # PostgreSQL plans this itself
        return search.matching(sessions, query), None
    total = None if filtered else matches
    if matches == 0:
        return sessions.none(), total
    if index_ordered:
        searchable = search.searchable_sessions()
        # The walk passes about rows_needed / (matches / searchable) sessions.
        walked = min(searchable, rows_needed * searchable / matches)
        if walked < SORT_TO_WALK_COST * matches:
            return search.matching_in_order(sessions), total
    return search.matching_gathered(sessions), total


def session_page(sessions: QuerySet[AlertSession], *, page: int, page_size: int) -> Page:
    return Paginator(sessions, page_size).get_page(page)


def live_worker_clusters(*, within_seconds: float) -> list[WorkerCluster]:
    cutoff = timezone.now() - timedelta(seconds=within_seconds)
    return list(WorkerCluster.objects.filter(heartbeat_at__gte=cutoff))


@dataclass(frozen=True)
class QueueState:
    pending: int
    running: int
    oldest_pending_seconds: float | None


def queue_state() -> QueueState:
    oldest = (
        AlertSession.objects.filter(status=SessionStatus.PENDING)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    return QueueState(
        pending=AlertSession.objects.filter(status=SessionStatus.PENDING).count(),
        running=AlertSession.objects.filter(status__in=RUNNING_SESSION_STATUSES).count(),
        oldest_pending_seconds=(timezone.now() - oldest).total_seconds() if oldest else None,
    )


def active_sessions() -> QuerySet[AlertSession]:
    return AlertSession.objects.filter(
        status__in=[SessionStatus.PENDING, SessionStatus.IN_PROGRESS, SessionStatus.CANCELLING]
    )


PANEL_LIMIT = 50


@dataclass
class Panels:
    """The list page's Active and Queued panels: what runs now, and what waits, in order."""

    active: list[AlertSession]
    active_total: int
    queued: list[AlertSession]
    queued_total: int


def session_panels() -> Panels:
    active = list(
        AlertSession.objects.filter(status__in=RUNNING_SESSION_STATUSES)
        .order_by("started_at", "created_at")
        .only(
            "id",
            "alert_type",
            "chain_id",
            "author",
            "status",
            "created_at",
            "started_at",
            "first_stage_index",
        )[:PANEL_LIMIT]
    )
    queued = list(
        AlertSession.objects.filter(status=SessionStatus.PENDING)
        .order_by("created_at", "id")
        .only("id", "alert_type", "chain_id", "author", "status", "created_at")[:PANEL_LIMIT]
    )
    current: dict[Any, Stage] = {}
    for stage in Stage.objects.filter(session__in=[s.id for s in active]).order_by("-index"):
        current.setdefault(stage.session_id, stage)
    for session in active:
        session.current_stage = current.get(session.id)
        if session.current_stage is not None:
            # Counted in the current run (one interrupted by a shutdown may have come before).
            session.current_stage_number = (
                session.current_stage.index - session.first_stage_index + 1
            )
    for position, session in enumerate(queued, start=1):
        session.queue_position = position
    return Panels(
        active=active,
        active_total=len(active)
        if len(active) < PANEL_LIMIT
        else AlertSession.objects.filter(status__in=RUNNING_SESSION_STATUSES).count(),
        queued=queued,
        queued_total=len(queued)
        if len(queued) < PANEL_LIMIT
        else AlertSession.objects.filter(status=SessionStatus.PENDING).count(),
    )


def stage_progress(session: AlertSession) -> str:
    """``stage 2 of 3`` once a chain has started: its investigation and action stages so
    far (synthesis, the executive summary, chat answers and scoring are steps, not stages
    of the chain), of its current run (a run interrupted by its worker's shutdown may
    have come before)."""
    from config.loader import get_config

    started = (
        session.stages.filter(index__gte=session.first_stage_index)
        .exclude(stage_type__in=("exec_summary", "synthesis", "chat", "scoring"))
        .count()
    )
    chain = get_config().chains.get(session.chain_id)
    if not started or chain is None:
        return ""
    return f"stage {started} of {len(chain.stages)}"


def session_stages(session: AlertSession) -> list[Stage]:
    return list(session.stages.order_by("index", "id"))


def session_executions(session: AlertSession) -> list[AgentExecution]:
    return list(session.executions.select_related("stage").order_by("stage__index", "id"))


def session_timeline(session: AlertSession) -> list[TimelineEvent]:
    return list(session.timeline.select_related("stage").order_by("id"))


# The REST timeline's page: a 2,000-item session was one response of 11.7 MB.
TIMELINE_PAGE_SIZE = 500
MAX_TIMELINE_PAGE_SIZE = 2000


@dataclass(frozen=True)
class TimelinePage:
    items: list[TimelineEvent]
    total: int  # items in the whole timeline
    more: bool  # whether items follow this page


class UnknownTimelineItem(LookupError):
    """The cursor names no item of this session's timeline."""


def session_timeline_page(session: AlertSession, *, after: int | None, limit: int) -> TimelinePage:
    """Up to ``limit`` items in TARSy's order (``sequence_number``, then ``id``), those
    after the item ``after`` (the last one a client already has). A cursor rather than an
    offset: one page costs the same wherever it is (the index keeps that order), and an
    item added meanwhile does not shift the next page back over one already read."""
    items = session.timeline.select_related("execution").order_by("sequence_number", "id")
    if after is not None:
        position = session.timeline.filter(id=after).values_list("sequence_number", flat=True)
        if not position:
            raise UnknownTimelineItem(after)
        items = items.filter(
            Q(sequence_number__gt=position[0]) | Q(sequence_number=position[0], id__gt=after)
        )
    rows = list(items[: limit + 1])
    return TimelinePage(rows[:limit], total=session.timeline.count(), more=len(rows) > limit)


# A tool result longer than this is not in the session page; it loads when opened.
INLINE_RESULT_CHARS = 1000


def session_timeline_for_page(session: AlertSession) -> list[TimelineEvent]:
    """The timeline without the bodies of long tool results (``content`` is empty for
    them; ``content_length`` says how long they are)."""
    long_result = Q(event_type=TimelineEventType.LLM_TOOL_CALL) & Q(
        content_length__gt=INLINE_RESULT_CHARS
    )
    return list(
        session.timeline.order_by("id")
        .annotate(content_length=Length("content"))
        .annotate(
            page_content=Case(
                When(long_result, then=Value("")), default=F("content"), output_field=TextField()
            )
        )
        .defer("content")
    )


def session_usage(session: AlertSession) -> dict[str, Any]:
    return session_usage_by_id(session.id)


def session_usage_by_id(session_id: Any) -> dict[str, Any]:
    """Token totals and estimated cost (None when no call had a configured rate)."""
    totals = LLMInteraction.objects.filter(session_id=session_id).aggregate(
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
        thinking_tokens=Sum("thinking_tokens"),
        total_tokens=Sum("total_tokens"),
        estimated_cost_usd=Sum("estimated_cost_usd"),
        calls=Count("id"),
    )
    cost = totals.pop("estimated_cost_usd")
    usage: dict[str, Any] = {key: value or 0 for key, value in totals.items()}
    usage["estimated_cost_usd"] = float(cost) if cost is not None else None
    return usage


def latest_event_id() -> int:
    """The log's cursor now: its newest id, or the newest id expired from it."""
    newest = SessionEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    pruned = (
        AlertSession.objects.order_by("-events_pruned_through")
        .values_list("events_pruned_through", flat=True)
        .first()
    )
    return max(newest, pruned or 0)


def session_event_cursor(session_id: Any) -> int:
    """A session page's cursor: the newest event of that session (or the newest expired).

    Not the log's newest id: on PostgreSQL a smaller id of this session may still be in
    flight then. Each session's events become visible in id order (services/events.py),
    so everything of this session up to its own newest event is already visible.
    """
    newest = (
        SessionEvent.objects.filter(session_id=session_id)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    pruned = (
        AlertSession.objects.filter(id=session_id)
        .values_list("events_pruned_through", flat=True)
        .first()
    )
    return max(newest or 0, pruned or 0)


def events_for_relay(head: int, holes: list[int], *, limit: int) -> list[SessionEvent]:
    """Events after ``head``, and those of ``holes`` that have appeared since."""
    where = Q(id__gt=head)
    if holes:
        where |= Q(id__in=holes)
    return list(SessionEvent.objects.filter(where).order_by("id")[:limit])


def event_ids_near_head(window: int) -> tuple[int, set[int]]:
    """The newest event id, and which of the ``window`` ids up to it exist."""
    head = latest_event_id()
    if not window:
        return head, set()
    return head, set(
        SessionEvent.objects.filter(id__gt=head - window, id__lte=head).values_list("id", flat=True)
    )


def events_after(
    cursor: int, *, session_id: Any = None, limit: int = 500, types: list[str] | None = None
) -> list[SessionEvent]:
    events = SessionEvent.objects.filter(id__gt=cursor)
    if session_id is not None:
        events = events.filter(session_id=session_id)
    if types:
        events = events.filter(type__in=types)
    return list(events.order_by("id")[:limit])


def events_pruned_after(cursor: int, *, session_id: Any = None) -> bool:
    """Whether events after ``cursor`` (of one session, or of any) have expired."""
    sessions = AlertSession.objects.filter(events_pruned_through__gt=cursor)
    if session_id is not None:
        sessions = sessions.filter(id=session_id)
    return sessions.exists()


def persistent_event_count_after(cursor: int, *, session_id: Any) -> int:
    return SessionEvent.objects.filter(
        id__gt=cursor, session_id=session_id, transient=False
    ).count()


def streamed_text(timeline_event_ids: list[int], *, up_to_event_id: int) -> dict[int, str]:
    """Text streamed so far into each still-streaming item, as of one event-log cursor.

    A page rendered at cursor C shows exactly the chunks up to C; the live socket then
    resumes from C, so nothing is shown twice and nothing is missing.
    """
    if not timeline_event_ids:
        return {}
    chunks: dict[int, list[str]] = defaultdict(list)
    rows = (
        SessionEvent.objects.filter(
            timeline_event_id__in=timeline_event_ids,
            type=SessionEventType.STREAM_CHUNK,
            id__lte=up_to_event_id,
        )
        .order_by("id")
        .values_list("timeline_event_id", "payload")
    )
    for timeline_event_id, payload in rows:
        assert timeline_event_id is not None  # filtered on it
        chunks[timeline_event_id].append(payload.get("delta", ""))
    return {key: "".join(parts) for key, parts in chunks.items()}


def session_streamed_text(session_id: Any) -> dict[int, str]:
    """Each still-streaming item of a session, with the text saved of it so far."""
    ids = list(
        TimelineEvent.objects.filter(
            session_id=session_id, status=TimelineEventStatus.STREAMING
        ).values_list("id", flat=True)
    )
    saved = streamed_text(ids, up_to_event_id=2**62)
    return {item_id: saved.get(item_id, "") for item_id in ids}


def mcp_servers_health(server_ids: list[str]) -> list[dict[str, Any]]:
    """Each configured MCP server's last health check, sorted by id; a server no worker
    has used yet is reported unhealthy with "not checked yet"."""
    from sessions.models import MCPServerHealth

    checks = {h.server_id: h for h in MCPServerHealth.objects.filter(server_id__in=server_ids)}
    servers = []
    for server_id in sorted(server_ids):
        health = checks.get(server_id)
        if health is None:
            servers.append(
                {
                    "id": server_id,
                    "healthy": False,
                    "last_check": None,
                    "tool_count": 0,
                    "tools": [],
                    "error": "not checked yet: no worker has started this server",
                }
            )
            continue
        servers.append(
            {
                "id": server_id,
                "healthy": health.healthy,
                "last_check": health.checked_at.isoformat(),
                "tool_count": len(health.tools),
                "tools": health.tools,
                "error": health.error or None,
            }
        )
    return servers


def cluster_silence_limit() -> float:
    """A cluster that has not beaten for this long is dead (three missed beats)."""
    return 3 * settings.TARSY_RECOVERY_INTERVAL
