"""TARSy's JSON shapes of our sessions (docs/api.md §1.2 to §1.6), built from the
selectors' rows plus a few per-page aggregate queries."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from api.protocol import timeline_metadata
from api.rest.common import iso, sid
from config.loader import get_config
from sessions import budget
from sessions.models import (
    AgentExecution,
    AlertSession,
    ChatMessage,
    ExecutionStatus,
    LLMInteraction,
    MCPInteraction,
    SessionRepeats,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventType,
)
from sessions.selectors.scoring import NOT_SCORED, score_summaries

# The stages of the chain itself; chat answers, summaries and scorings come after it.
NOT_INVESTIGATION = (StageType.CHAT, StageType.SCORING)


def cost_estimation_enabled() -> bool:
    return get_config().cost_estimation.enabled


def _duration_ms(session: AlertSession) -> int | None:
    seconds = session.duration_seconds
    return round(seconds * 1000) if seconds is not None else None


def _cost(total: Decimal | None, calls: int, priced: int) -> dict[str, Any]:
    """The opt cost keys: present only while cost estimation is on."""
    if not cost_estimation_enabled():
        return {}
    completeness = "none" if not priced else "complete" if priced == calls else "partial"
    # TARSy says 0 where nothing was priced (cost_completeness tells the two apart).
    return {"cost_completeness": completeness, "estimated_cost_usd": float(total or 0)}


def review_fields(session: AlertSession) -> dict[str, Any]:
    return {
        "review_status": session.review_status or None,
        "assignee": session.assignee or None,
        "quality_rating": session.quality_rating or None,
        "action_taken": session.action_taken or None,
        "investigation_feedback": session.investigation_feedback or None,
        "feedback_edited": bool(session.feedback_edited_at),
        "feedback_edited_by": session.feedback_edited_by or None,
        "feedback_edited_at": iso(session.feedback_edited_at),
    }


def _empty_stats() -> dict[str, Any]:
    return {
        "llm_interaction_count": 0,
        "mcp_interaction_count": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "cost": None,
        "priced": 0,
        "total_stages": 0,
        "completed_stages": 0,
        "failed_stages": 0,
        "has_parallel_stages": False,
        "has_sub_agents": False,
        "has_action_stages": False,
        "actions_executed": None,
        "chat_message_count": 0,
        "provider_fallback_count": 0,
        "current_stage_index": None,
        "current_stage_id": None,
    }


def session_stats(session_ids: list[Any]) -> dict[Any, dict[str, Any]]:
    """Counters of each session, a handful of queries for a whole page."""
    stats = {session_id: _empty_stats() for session_id in session_ids}
    if not stats:
        return stats
    for row in (
        LLMInteraction.objects.filter(session_id__in=session_ids)
        .values("session_id")
        .annotate(
            calls=Count("id"),
            priced=Count("id", filter=Q(estimated_cost_usd__isnull=False)),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            total_tokens=Sum("total_tokens"),
            cost=Sum("estimated_cost_usd"),
        )
    ):
        entry = stats[row["session_id"]]
        entry.update(
            llm_interaction_count=row["calls"],
            priced=row["priced"],
            input_tokens=row["input_tokens"] or 0,
            output_tokens=row["output_tokens"] or 0,
            total_tokens=row["total_tokens"] or 0,
            cost=row["cost"],
        )
    for row in _counts(MCPInteraction.objects.filter(session_id__in=session_ids)):
        stats[row["session_id"]]["mcp_interaction_count"] = row["n"]
    for row in _counts(ChatMessage.objects.filter(session_id__in=session_ids)):
        stats[row["session_id"]]["chat_message_count"] = row["n"]
    fallbacks = TimelineEvent.objects.filter(
        session_id__in=session_ids, event_type=TimelineEventType.PROVIDER_FALLBACK
    )
    for row in _counts(fallbacks):
        stats[row["session_id"]]["provider_fallback_count"] = row["n"]
    with_sub_agents = (
        AgentExecution.objects.filter(session_id__in=session_ids, parent_execution__isnull=False)
        .values_list("session_id", flat=True)
        .distinct()
    )
    for session_id in with_sub_agents:
        stats[session_id]["has_sub_agents"] = True
    stages: dict[Any, list[Stage]] = defaultdict(list)
    for stage in Stage.objects.filter(session_id__in=session_ids).order_by("index", "id"):
        stages[stage.session_id].append(stage)
    # A session queued again after its worker was stopped counts the stages of its
    # current run only; the interrupted run's stay in ``stages``.
    first_index = dict(
        AlertSession.objects.filter(id__in=session_ids, first_stage_index__gt=0).values_list(
            "id", "first_stage_index"
        )
    )
    for session_id, rows in stages.items():
        entry = stats[session_id]
        first = first_index.get(session_id, 0)
        # As TARSy counts: every stage of the run (the executive summary and each chat
        # turn too; our scorings are not stages in TARSy), failed meaning failed.
        counted = [s for s in rows if s.stage_type != StageType.SCORING and s.index >= first]
        actions = [s for s in rows if s.stage_type == StageType.ACTION]
        # TARSy's pointer moves with the investigation, not with the chat after it.
        investigation = [s for s in rows if s.stage_type not in NOT_INVESTIGATION]
        current = investigation[-1] if investigation else rows[-1]
        entry.update(
            total_stages=len(counted),
            completed_stages=sum(s.status == ExecutionStatus.COMPLETED for s in counted),
            failed_stages=sum(s.status == ExecutionStatus.FAILED for s in counted),
            has_parallel_stages=any(s.parallel_type for s in rows),
            has_action_stages=bool(actions),
            actions_executed=any(s.status == ExecutionStatus.COMPLETED for s in actions)
            if actions
            else None,
            current_stage_index=rows.index(current) + 1,
            current_stage_id=str(current.id),
        )
    return stats


def _counts(rows) -> Any:
    return rows.values("session_id").annotate(n=Count("id"))


def session_items(
    sessions: list[AlertSession], *, matched_in_content: set[Any] | frozenset[Any] = frozenset()
):
    """List items (§1.2) of a page of sessions."""
    ids = [s.id for s in sessions]
    stats = session_stats(ids)
    scores = score_summaries(ids)
    return [
        session_item(
            s,
            stats[s.id],
            scores.get(s.id, NOT_SCORED),
            matched_in_content=s.id in matched_in_content,
        )
        for s in sessions
    ]


def session_item(
    session: AlertSession,
    stats: dict[str, Any],
    score: dict[str, Any],
    *,
    matched_in_content: bool = False,
) -> dict[str, Any]:
    return {
        "id": str(session.id),
        "alert_type": session.alert_type or None,
        "chain_id": session.chain_id or None,
        "status": session.status,
        "author": session.author or None,
        "created_at": iso(session.created_at),
        "started_at": iso(session.started_at),
        "completed_at": iso(session.completed_at),
        "duration_ms": _duration_ms(session),
        "error_message": session.error_message or None,
        "executive_summary": session.executive_summary or None,
        "llm_interaction_count": stats["llm_interaction_count"],
        "mcp_interaction_count": stats["mcp_interaction_count"],
        "input_tokens": stats["input_tokens"],
        "output_tokens": stats["output_tokens"],
        "total_tokens": stats["total_tokens"],
        **_cost(stats["cost"], stats["llm_interaction_count"], stats["priced"]),
        "total_stages": stats["total_stages"],
        "completed_stages": stats["completed_stages"],
        "has_parallel_stages": stats["has_parallel_stages"],
        "has_sub_agents": stats["has_sub_agents"],
        "has_action_stages": stats["has_action_stages"],
        "actions_executed": stats["actions_executed"],
        "chat_message_count": stats["chat_message_count"],
        "provider_fallback_count": stats["provider_fallback_count"],
        "current_stage_index": stats["current_stage_index"],
        "current_stage_id": stats["current_stage_id"],
        "matched_in_content": matched_in_content,
        "latest_score": score["latest_score"],
        "scoring_status": score["scoring_status"],
        **review_fields(session),
    }


def triage_items(sessions: list[AlertSession]) -> list[dict[str, Any]]:
    """Triage rows: list items whose counters TARSy leaves at zero or null."""
    scores = score_summaries([s.id for s in sessions])
    return [session_item(s, _empty_stats(), scores.get(s.id, NOT_SCORED)) for s in sessions]


def session_detail(session: AlertSession) -> dict[str, Any]:
    """§1.4: the session, its stages and their top-level executions."""
    stats = session_stats([session.id])[session.id]
    score = score_summaries([session.id]).get(session.id, NOT_SCORED)
    chain = get_config().chains.get(session.chain_id)
    data: dict[str, Any] = {
        "id": str(session.id),
        "alert_data": session.alert_data,
        "alert_type": session.alert_type or None,
        "status": session.status,
        "chain_id": session.chain_id or None,
        "author": session.author or None,
        "error_message": session.error_message or None,
        "final_analysis": session.final_analysis or None,
        "executive_summary": session.executive_summary or None,
        "executive_summary_error": session.executive_summary_error or None,
        "runbook_url": session.runbook_url or None,
        "created_at": iso(session.created_at),
        "started_at": iso(session.started_at),
        "completed_at": iso(session.completed_at),
        "duration_ms": _duration_ms(session),
        "chat_enabled": chain is None or chain.chat.enabled,
        "chat_id": _chat_id(session),
        "chat_message_count": stats["chat_message_count"],
        "total_stages": stats["total_stages"],
        "completed_stages": stats["completed_stages"],
        "failed_stages": stats["failed_stages"],
        "has_parallel_stages": stats["has_parallel_stages"],
        "has_action_stages": stats["has_action_stages"],
        "actions_executed": stats["actions_executed"],
        "input_tokens": stats["input_tokens"],
        "output_tokens": stats["output_tokens"],
        "total_tokens": stats["total_tokens"],
        "cost_estimation_enabled": cost_estimation_enabled(),
        **_cost(stats["cost"], stats["llm_interaction_count"], stats["priced"]),
        "llm_interaction_count": stats["llm_interaction_count"],
        "mcp_interaction_count": stats["mcp_interaction_count"],
        "current_stage_index": stats["current_stage_index"],
        "current_stage_id": stats["current_stage_id"],
        "latest_score": score["latest_score"],
        "scoring_status": score["scoring_status"],
        "score_id": score["score_id"],
        **review_fields(session),
        "stages": _stages(session),
    }
    if cost_estimation_enabled():
        data["unpriced_interaction_count"] = stats["llm_interaction_count"] - stats["priced"]
    if session.slack_message_fingerprint:
        data["slack_message_fingerprint"] = session.slack_message_fingerprint
    if session.mcp_selection:
        data["mcp_selection"] = session.mcp_selection
    # Ours, beyond TARSy's shape: who cancelled and why.
    if session.cancelled_by:
        data["cancelled_by"] = session.cancelled_by
    if session.cancel_reason:
        data["cancel_reason"] = session.cancel_reason
    # Ours: the duplicates of its alert it took in (the duplicate-alert cooldown). Only
    # here, one query: the list does not carry them.
    repeats = SessionRepeats.objects.filter(session=session).values_list("count", "last_at")
    count, last_at = repeats.first() or (0, None)
    data["repeat_count"] = count
    data["last_repeated_at"] = iso(last_at)
    data["budget"] = budget.as_json(session)
    return data


def _chat_id(session: AlertSession) -> str | None:
    from sessions.models import Chat

    return sid(Chat.objects.filter(session=session).values_list("id", flat=True).first())


def _stages(session: AlertSession) -> list[dict[str, Any]]:
    stages = list(session.stages.order_by("index", "id"))
    executions: dict[int, list[AgentExecution]] = defaultdict(list)
    for execution in AgentExecution.objects.filter(session=session).order_by("agent_index", "id"):
        executions[execution.stage_id].append(execution)
    usage = _execution_usage(session)
    result = []
    for position, stage in enumerate(stages, start=1):
        data: dict[str, Any] = {
            "id": str(stage.id),
            "stage_name": stage.name,
            "stage_index": position,
            "stage_type": stage.stage_type,
            "status": stage.status,
            "parallel_type": stage.parallel_type or None,
            "expected_agent_count": stage.expected_agent_count,
            "started_at": iso(stage.started_at),
            "completed_at": iso(stage.completed_at),
        }
        if stage.stage_type == StageType.SYNTHESIS and position > 1:
            # It merges the stage just before it.
            data["referenced_stage_id"] = str(stages[position - 2].id)
        rows = executions.get(stage.id, [])
        children: dict[int, list[AgentExecution]] = defaultdict(list)
        for row in rows:
            if row.parent_execution_id is not None:
                children[row.parent_execution_id].append(row)
        ids = {row.id for row in rows}
        # A sub-agent whose parent is in another stage (a chat's) shows at the top level.
        top = [
            _execution(row, children, usage)
            for row in rows
            if row.parent_execution_id is None or row.parent_execution_id not in ids
        ]
        if top:
            data["executions"] = strip_private(top)
        result.append(data)
    return result


def _execution_usage(session: AlertSession) -> dict[int, dict[str, Any]]:
    return {
        row["execution_id"]: row
        for row in LLMInteraction.objects.filter(session=session, execution__isnull=False)
        .values("execution_id")
        .annotate(
            calls=Count("id"),
            priced=Count("id", filter=Q(estimated_cost_usd__isnull=False)),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            total_tokens=Sum("total_tokens"),
            cost=Sum("estimated_cost_usd"),
        )
    }


def _execution(
    execution: AgentExecution,
    children: dict[int, list[AgentExecution]],
    usage: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    """An execution; its sub-agents nest under it and their usage adds to its own."""
    subs = [_execution(c, children, usage) for c in children.get(execution.id, [])]
    own = usage.get(execution.id, {})
    totals = {
        key: (own.get(key) or 0) + sum(s[key] for s in subs)
        for key in ("input_tokens", "output_tokens", "total_tokens")
    }
    calls = (own.get("calls") or 0) + sum(s["_calls"] for s in subs)
    priced = (own.get("priced") or 0) + sum(s["_priced"] for s in subs)
    costs = [own.get("cost")] + [s.get("_cost") for s in subs]
    cost = sum(c for c in costs if c is not None) if any(c is not None for c in costs) else None
    started, completed = execution.started_at, execution.completed_at
    data: dict[str, Any] = {
        "execution_id": str(execution.id),
        "agent_name": execution.agent_name,
        "agent_index": execution.agent_index,
        "status": execution.status,
        "llm_backend": execution.llm_backend or None,
        "llm_provider": execution.llm_provider or None,
        "started_at": iso(started),
        "completed_at": iso(completed),
        "duration_ms": round((completed - started).total_seconds() * 1000)
        if started and completed
        else None,
        "error_message": execution.error_message or None,
        **totals,
        "_calls": calls,
        "_priced": priced,
        "_cost": cost,
    }
    optional = {
        "model_name": execution.model_name,
        "parent_execution_id": sid(execution.parent_execution_id),
        "task": execution.task,
        "original_llm_provider": execution.original_llm_provider,
        "original_llm_backend": execution.original_llm_backend,
        "original_model_name": execution.original_model_name,
    }
    data.update({key: value for key, value in optional.items() if value})
    if cost_estimation_enabled():
        data.update(_cost(cost, calls, priced))
        data["unpriced_interaction_count"] = calls - priced
    if subs:
        data["sub_agents"] = subs
    return data


def strip_private(value: Any) -> Any:
    """Drop the ``_`` keys the execution tree carries for its parents' sums."""
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip_private(v) for v in value]
    return value


def session_summary(session: AlertSession) -> dict[str, Any]:
    stats = session_stats([session.id])[session.id]
    score = score_summaries([session.id]).get(session.id, NOT_SCORED)
    data: dict[str, Any] = {
        "session_id": str(session.id),
        "total_interactions": stats["llm_interaction_count"] + stats["mcp_interaction_count"],
        "llm_interactions": stats["llm_interaction_count"],
        "mcp_interactions": stats["mcp_interaction_count"],
        "input_tokens": stats["input_tokens"],
        "output_tokens": stats["output_tokens"],
        "total_tokens": stats["total_tokens"],
        "cost_estimation_enabled": cost_estimation_enabled(),
        **_cost(stats["cost"], stats["llm_interaction_count"], stats["priced"]),
        "total_duration_ms": _duration_ms(session),
        "chain_statistics": {
            "total_stages": stats["total_stages"],
            "completed_stages": stats["completed_stages"],
            "failed_stages": stats["failed_stages"],
            "current_stage_index": stats["current_stage_index"],
        },
    }
    if cost_estimation_enabled():
        data["unpriced_interaction_count"] = stats["llm_interaction_count"] - stats["priced"]
    if score["latest_score"] is not None:
        data["total_score"] = score["latest_score"]
    if score["scoring_status"]:
        data["scoring_status"] = score["scoring_status"]
    return data


def timeline_item(event: TimelineEvent) -> dict[str, Any]:
    """§1.6: every key but ``edges`` is omitted when empty."""
    data: dict[str, Any] = {
        "id": str(event.id),
        "session_id": str(event.session_id),
        "stage_id": sid(event.stage_id),
        "execution_id": sid(event.execution_id),
        "parent_execution_id": sid(
            event.execution.parent_execution_id if event.execution else None
        ),
        "sequence_number": event.sequence_number,
        "created_at": iso(event.created_at),
        "updated_at": iso(event.updated_at),
        "event_type": event.event_type,
        "status": event.status,
        "content": event.content,
        "metadata": timeline_metadata(event.event_type, event.metadata or {}),
    }
    data = {key: value for key, value in data.items() if value not in (None, "", {}, [])}
    data["edges"] = {}
    return data
