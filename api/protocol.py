"""TARSy's WebSocket wire format (docs/api.md §2), made from our event log.

The event log stores our own payloads; this module reshapes one row into the payload
TARSy would have sent for it: string ids, 1-based stage indexes, TARSy's status enums,
opt keys left out when empty. Rows TARSy has no counterpart for give ``None``.

Which of our rows are *persistent* follows TARSy, not our ``transient`` flag: TARSy
stores timeline, session, stage, review and chat events (they carry ``db_event_id`` and
are replayed by catch-up); execution status, scores and stream chunks are live only.
"""

from __future__ import annotations

import functools
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from agents.memory import MEMORY_TOOLS
from config.schema import ORCHESTRATOR_SERVER
from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    ScoreStatus,
    SessionEvent,
    SessionEventType,
    SessionStatus,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventType,
)

LIST_CHANNEL = "sessions"
SESSION_CHANNEL_PREFIX = "session:"
# PostgreSQL's NOTIFY limit (8000 bytes) less TARSy's margin: a live payload larger than
# this reaches TARSy's clients as a stub, and they re-fetch over REST.
TRUNCATE_OVER = 7900

PERSISTENT_TYPES = (
    SessionEventType.TIMELINE_CREATED,
    SessionEventType.TIMELINE_COMPLETED,
    SessionEventType.SESSION_STATUS,
    SessionEventType.STAGE_STATUS,
    SessionEventType.REVIEW_STATUS,
    SessionEventType.CHAT_CREATED,
    SessionEventType.INTERACTION_CREATED,
)
# What TARSy also sends, as a live copy without db_event_id, on the global channel.
LIST_CHANNEL_TYPES = (
    SessionEventType.SESSION_STATUS,
    SessionEventType.REVIEW_STATUS,
    SessionEventType.SCORE_UPDATED,
)
# TARSy publishes a session's status when a worker claims it and when it ends only.
_UNSENT_SESSION_STATUSES = (SessionStatus.PENDING, SessionStatus.CANCELLING)
_SCORING_STATUSES: dict[str, str] = {
    ScoreStatus.PENDING: "in_progress",
    ScoreStatus.IN_PROGRESS: "in_progress",
    ScoreStatus.COMPLETED: "completed",
    ScoreStatus.FAILED: "failed",
    ScoreStatus.TIMED_OUT: "failed",
    ScoreStatus.CANCELLED: "failed",
    "memorizing": "memorizing",  # the score is in; its lessons are being drawn
}


def session_channel(session_id: Any) -> str:
    return f"{SESSION_CHANNEL_PREFIX}{session_id}"


def channel_session_id(channel: str) -> uuid.UUID | None:
    """The session a ``session:<id>`` channel names; None for any other channel."""
    if not channel.startswith(SESSION_CHANNEL_PREFIX):
        return None
    try:
        return uuid.UUID(channel.removeprefix(SESSION_CHANNEL_PREFIX))
    except ValueError:
        return None


def is_persistent(event_type: str) -> bool:
    return event_type in PERSISTENT_TYPES


def rfc3339(value: str | datetime) -> str:
    """RFC 3339 in UTC, ``Z``, fraction without trailing zeros (Go's RFC3339Nano)."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if fraction := f"{moment.microsecond:06d}".rstrip("0"):
        text += f".{fraction}"
    return text + "Z"


def encode(payload: dict[str, Any]) -> str:
    """Compact JSON escaped as Go's ``encoding/json`` does, so that the size compared
    with ``TRUNCATE_OVER`` is the size TARSy would have measured."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    # Outside strings JSON has none of these characters, so replacing them is safe.
    for char, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def live_frame(payload: dict[str, Any]) -> str:
    """A live event as sent: whole, or TARSy's stub when it is over ``TRUNCATE_OVER`` bytes."""
    text = encode(payload)
    if len(text.encode()) <= TRUNCATE_OVER:
        return text
    stub: dict[str, Any] = {
        "type": payload["type"],
        "event_id": payload.get("event_id", ""),
        "session_id": payload["session_id"],
        "truncated": True,
    }
    if "db_event_id" in payload:
        stub["db_event_id"] = payload["db_event_id"]
    return encode(stub)


def catchup_events(session_id: Any, *, after: int, limit: int) -> list[SessionEvent]:
    """The events catch-up replays for a session: what TARSy would have stored."""
    return list(
        SessionEvent.objects.filter(session_id=session_id, id__gt=after, type__in=PERSISTENT_TYPES)
        .exclude(type=SessionEventType.SESSION_STATUS, payload__status__in=_UNSENT_SESSION_STATUSES)
        .order_by("id")[:limit]
    )


def tarsy_payload(event: dict[str, Any]) -> dict[str, Any] | None:
    """TARSy's payload for an event-log row (``relay.event_message`` shape), without
    ``db_event_id``; None when TARSy would not send it. May read the database."""
    translate = _TRANSLATORS.get(event["type"])
    if translate is None:
        return None  # ours only (slack.status)
    stored = event["payload"]
    body = translate(str(event["session_id"]), stored)
    if body is None:
        return None
    return {
        "type": event["type"],
        "session_id": str(event["session_id"]),
        "timestamp": rfc3339(stored.get("timestamp") or timezone.now()),
        **body,
    }


# --- one translator per event type ---------------------------------------------------


def _opt(**fields: Any) -> dict[str, Any]:
    """Go's ``omitempty``: keys whose value is empty are left out."""
    return {key: value for key, value in fields.items() if value not in (None, "", {}, [])}


def _id(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _timeline_created(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": str(p["event_id"]),
        **_opt(
            stage_id=_id(p.get("stage_id")),
            execution_id=_id(p.get("execution_id")),
            parent_execution_id=_id(_execution_parent(session_id, p.get("execution_id"))),
        ),
        "event_type": p["event_type"],
        "status": p["status"],
        "content": _content(p),
        **_opt(metadata=timeline_metadata(p["event_type"], p.get("metadata") or {})),
        "sequence_number": p.get("sequence_number", 0),
    }


def _timeline_completed(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": str(p["event_id"]),
        **_opt(parent_execution_id=_id(_execution_parent(session_id, p.get("execution_id")))),
        "event_type": p["event_type"],
        "content": _content(p),
        "status": p["status"],
        **_opt(metadata=timeline_metadata(p["event_type"], p.get("metadata") or {})),
    }


def _content(p: dict[str, Any]) -> str:
    """The item's text: from the payload, or from its row when the payload leaves a
    long text out."""
    if "content" in p:
        return p["content"] or ""
    row = TimelineEvent.objects.filter(id=p["event_id"]).values_list("content", flat=True)
    return row.first() or ""


def timeline_metadata(event_type: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """An item's metadata under TARSy's keys (docs/api.md §1.6); our other keys stay."""
    data = dict(metadata)
    if event_type == TimelineEventType.LLM_TOOL_CALL:
        # Ours: tool_name "server.tool", arguments an object; TARSy: the bare tool
        # name, arguments a JSON string.
        server = data.get("server_name", "")
        name = str(data.get("tool_name", ""))
        if server and name.startswith(f"{server}."):
            data["tool_name"] = name.removeprefix(f"{server}.")
        if "arguments" in data and not isinstance(data["arguments"], str):
            data["arguments"] = json.dumps(data["arguments"], separators=(",", ":"))
        # TARSy's tool_type: "orchestrator" for the sub-agent tools (dispatch_agent…),
        # "memory" for the memory tools, "skill" for load_skill (built-in, of no server).
        kinds = {ORCHESTRATOR_SERVER: "orchestrator", "": "skill"}
        kind = "memory" if not server and data.get("tool_name") in MEMORY_TOOLS else None
        data.setdefault("tool_type", kind or kinds.get(server, "mcp"))
    elif event_type == TimelineEventType.PROVIDER_FALLBACK:
        renames = {
            "from_provider": "original_provider",
            "from_backend": "original_backend",
            "to_provider": "fallback_provider",
            "to_backend": "fallback_backend",
            "from_model": "original_model",
            "to_model": "fallback_model",
        }
        data = {renames.get(key, key): value for key, value in data.items()}
    return data


def _stream_chunk(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": str(p["event_id"]),
        **_opt(parent_execution_id=_id(_item_parent(session_id, int(p["event_id"])))),
        "delta": p.get("delta", ""),
    }


def _session_status(session_id: str, p: dict[str, Any]) -> dict[str, Any] | None:
    if p["status"] in _UNSENT_SESSION_STATUSES:
        return None
    return {"status": p["status"]}


def _interaction_created(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        **_opt(stage_id=_id(p.get("stage_id")), execution_id=_id(p.get("execution_id"))),
        "interaction_id": str(p["interaction_id"]),
        "interaction_type": p["interaction_type"],
    }


def _stage_status(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    status = p["status"]
    if status in (ExecutionStatus.PENDING, ExecutionStatus.ACTIVE):
        status = "started"
    referenced = None
    if p.get("stage_type") == StageType.SYNTHESIS and p.get("index"):
        # A synthesis stage merges the stage just before it (TARSy's reference).
        referenced = (
            Stage.objects.filter(session_id=uuid.UUID(session_id), index=p["index"] - 1)
            .values_list("id", flat=True)
            .first()
        )
    return {
        **_opt(stage_id=_id(p.get("stage_id"))),
        "stage_name": p.get("name", ""),
        "stage_index": p.get("index", 0) + 1,  # ours count from 0
        "stage_type": p.get("stage_type", ""),
        **_opt(referenced_stage_id=_id(referenced)),
        "status": status,
    }


def _execution_status(session_id: str, p: dict[str, Any]) -> dict[str, Any] | None:
    if p.get("cancel_requested") or p["status"] == ExecutionStatus.PENDING:
        return None  # ours only: someone asked it to stop; it is still running
    return {
        "stage_id": str(p["stage_id"]),
        "execution_id": str(p["execution_id"]),
        **_opt(parent_execution_id=_id(p.get("parent_execution_id"))),
        "agent_index": p.get("agent_index", 1),
        "status": p["status"],
        **_opt(error_message=p.get("error_message")),
    }


def _execution_progress(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "stage_id": str(p["stage_id"]),
        "execution_id": str(p["execution_id"]),
        **_opt(parent_execution_id=_id(p.get("parent_execution_id"))),
        "phase": p["phase"],
        "message": p["message"],
    }


def _review_status(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        **_opt(
            review_status=p.get("review_status"),
            assignee=p.get("assignee"),
            quality_rating=p.get("quality_rating"),
            action_taken=p.get("action_taken"),
            investigation_feedback=p.get("investigation_feedback"),
        ),
        "actor": p.get("actor", ""),
    }


def _chat_created(session_id: str, p: dict[str, Any]) -> dict[str, Any]:
    return {"chat_id": str(p["chat_id"]), "created_by": p.get("created_by", "")}


def _score_updated(session_id: str, p: dict[str, Any]) -> dict[str, Any] | None:
    status = _SCORING_STATUSES.get(p.get("scoring_status", ""))
    return None if status is None else {"scoring_status": status}


_TRANSLATORS = {
    SessionEventType.TIMELINE_CREATED: _timeline_created,
    SessionEventType.TIMELINE_COMPLETED: _timeline_completed,
    SessionEventType.STREAM_CHUNK: _stream_chunk,
    SessionEventType.SESSION_STATUS: _session_status,
    SessionEventType.STAGE_STATUS: _stage_status,
    SessionEventType.EXECUTION_STATUS: _execution_status,
    SessionEventType.EXECUTION_PROGRESS: _execution_progress,
    SessionEventType.REVIEW_STATUS: _review_status,
    SessionEventType.CHAT_CREATED: _chat_created,
    SessionEventType.SCORE_UPDATED: _score_updated,
    SessionEventType.INTERACTION_CREATED: _interaction_created,
}


# --- TARSy's progress events, derived from ours ------------------------------------------

_PHASES: dict[str, str] = {
    StageType.SYNTHESIS: "synthesizing",
    StageType.EXEC_SUMMARY: "finalizing",
}
# Our events TARSy's progress events are derived from.
PROGRESS_SOURCES = (SessionEventType.STAGE_STATUS, SessionEventType.EXECUTION_STATUS)


def progress_payloads(event: dict[str, Any]) -> list[dict[str, Any]]:
    """TARSy's transient ``session.progress`` (a stage starts) and ``execution.progress``
    (an agent starts; the agent's own phases after that are events of their own) for one
    of our events; [] for the rest. May read the database."""
    kind, p = event["type"], event["payload"]
    session_id = str(event["session_id"])
    base = {"session_id": session_id, "timestamp": rfc3339(p.get("timestamp") or timezone.now())}
    if kind == SessionEventType.STAGE_STATUS and p.get("stage_type") == StageType.SCORING:
        return []  # a scoring follows the ended session: TARSy reports no progress for it
    if kind == SessionEventType.STAGE_STATUS and p.get("status") in (
        ExecutionStatus.PENDING,
        ExecutionStatus.ACTIVE,
    ):
        name = p.get("name", "")
        text = (
            "Generating executive summary"
            if p.get("stage_type") == StageType.EXEC_SUMMARY
            else f"Starting stage: {name}"
        )
        return [
            {
                "type": "session.progress",
                **base,
                "current_stage_name": name,
                "current_stage_index": p.get("index", 0) + 1,
                "total_stages": _total_stages(session_id, p.get("index", 0) + 1),
                "active_executions": AgentExecution.objects.filter(
                    session_id=uuid.UUID(session_id), status=ExecutionStatus.ACTIVE
                ).count(),
                "status_text": text,
            }
        ]
    if kind == SessionEventType.EXECUTION_STATUS and p.get("status") == ExecutionStatus.ACTIVE:
        stage_type = (
            Stage.objects.filter(id=p["stage_id"]).values_list("stage_type", flat=True).first()
        )
        if stage_type == StageType.SCORING:
            return []
        agent = p.get("agent_name") or "agent"
        return [
            {
                "type": "execution.progress",
                **base,
                "stage_id": str(p["stage_id"]),
                "execution_id": str(p["execution_id"]),
                **_opt(parent_execution_id=_id(p.get("parent_execution_id"))),
                "phase": _PHASES.get(stage_type or "", "investigating"),
                "message": f"{agent} started",
            }
        ]
    return []


def _total_stages(session_id: str, at_least: int) -> int:
    """The stages a session's chain runs: its stages, a synthesis after each parallel
    one, and the executive summary (TARSy's count); never fewer than have started."""
    from config.loader import get_config

    chain_id = AlertSession.objects.filter(id=session_id).values_list("chain_id", flat=True).first()
    chain = get_config().chains.get(chain_id or "")
    if chain is None:
        return at_least
    total = sum(2 if stage.parallel else 1 for stage in chain.stages) + 1
    return max(total, at_least)


# An execution's parent never changes: each is read once per process (and every stream
# chunk of an item would otherwise cost a query per socket). Keyed with the session too,
# so that a database whose ids start over (tests) cannot be answered from the cache.
@functools.lru_cache(maxsize=4096)
def _parent_of_execution(session_id: str, execution_id: int) -> int | None:
    # Django parses the UUID's text; the stubs take only a UUID.
    row = AgentExecution.objects.filter(id=execution_id, session_id=session_id).values_list(  # type: ignore[misc]
        "parent_execution_id", flat=True
    )
    return row.first()


def _execution_parent(session_id: str, execution_id: Any) -> int | None:
    if execution_id in (None, ""):
        return None
    return _parent_of_execution(session_id, int(execution_id))


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)  # an item's execution never changes; one read per stream
def _item_parent(session_id: str, item_id: int) -> int | None:
    row = TimelineEvent.objects.filter(id=item_id, session_id=session_id).values_list(  # type: ignore[misc]  # as above
        "execution__parent_execution_id", flat=True
    )
    return row.first()
