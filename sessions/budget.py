"""An investigation's budget (issue 23) in words and figures: what each limit is called,
how an amount reads, what an investigation has spent. ``agents/budget.py`` enforces it;
the session page shows it as meters and the API as ``budget``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone

from config.types import BUDGET_KINDS
from sessions.models import AlertSession, LLMInteraction, MCPInteraction, StageType

LABELS = {
    "tokens": "tokens",
    "cost_usd": "cost",
    "wall_time": "wall time",
    "tool_calls": "tool calls",
    "llm_calls": "LLM calls",
}
# The calls of a session that are not its investigation: a chat's answers and scoring.
AFTERWARDS = (StageType.CHAT, StageType.SCORING)


def amount(kind: str, value: float) -> str:
    """``$0.50``, ``12,000``, ``95 s``."""
    if kind == "cost_usd":
        return f"${value:,.2f}" if value >= 0.1 or value == 0 else f"${value:.4f}"
    if kind == "wall_time":
        return f"{value:,.0f} s"
    return f"{int(value):,}"


def stop_reason(kind: str, spent: float, limit: float) -> str:
    """``cost $0.50 of $0.50``: which limit stopped an investigation, and at what."""
    return f"{LABELS[kind]} {amount(kind, spent)} of {amount(kind, limit)}"


@dataclass(frozen=True)
class Spent:
    """What an investigation has spent: its model calls and tool calls, stages of a chat
    or a scoring left out, and the time since it started."""

    tokens: int = 0
    cost_usd: float = 0.0
    wall_time: float = 0.0
    tool_calls: int = 0
    llm_calls: int = 0

    def of(self, kind: str) -> float:
        return float(getattr(self, kind))


def spent(session: AlertSession) -> Spent:
    """Two queries: the model calls' totals and the tool calls' count."""
    investigation = ~Q(execution__stage__stage_type__in=AFTERWARDS)
    calls = (
        LLMInteraction.objects.filter(session_id=session.id)
        .filter(investigation)
        .aggregate(count=Count("id"), tokens=Sum("total_tokens"), cost=Sum("estimated_cost_usd"))
    )
    tools = (
        MCPInteraction.objects.filter(session_id=session.id, interaction_type="tool_call")
        .filter(investigation)
        .count()
    )
    return Spent(
        tokens=calls["tokens"] or 0,
        cost_usd=float(calls["cost"] or 0),
        wall_time=_elapsed(session),
        tool_calls=tools,
        llm_calls=calls["count"],
    )


def _elapsed(session: AlertSession) -> float:
    if session.started_at is None:
        return 0.0
    end = session.completed_at or timezone.now()
    return max(0.0, (end - session.started_at).total_seconds())


@dataclass(frozen=True)
class Meter:
    kind: str
    label: str
    spent: str
    limit: str
    percent: int  # 0 to 100, for the bar
    reached: bool
    limit_value: float = 0.0
    # Wall time while the session runs: when it started (ISO), so the page ticks it.
    since: str = ""


def meters(session: AlertSession, used: Spent | None = None) -> list[Meter]:
    """One meter per limit of the session's budget; none when it has no budget."""
    limits = limits_of(session)
    if not limits:
        return []
    used = used if used is not None else spent(session)
    shown = []
    for kind, limit in limits.items():
        value = used.of(kind)
        shown.append(
            Meter(
                kind=kind,
                label=LABELS[kind],
                spent=amount(kind, value),
                limit=amount(kind, limit),
                percent=min(100, int(value * 100 / limit)) if limit else 100,
                reached=value >= limit,
                limit_value=limit,
                since=(
                    session.started_at.isoformat()
                    if kind == "wall_time" and session.started_at and not session.completed_at
                    else ""
                ),
            )
        )
    return shown


def limits_of(session: AlertSession) -> dict[str, float]:
    budget = session.budget or {}
    return {
        kind: float(budget[kind])
        for kind in BUDGET_KINDS
        if isinstance(budget.get(kind), int | float) and not isinstance(budget.get(kind), bool)
    }


def as_json(session: AlertSession) -> dict[str, Any] | None:
    """The API's ``budget``: limits, what was spent, and which limit stopped it (null
    when none did); null for a session without a budget."""
    limits = limits_of(session)
    if not limits:
        return None
    used = spent(session)
    budget = session.budget or {}
    return {
        "limits": {kind: budget[kind] for kind in limits},
        "spent": {
            "tokens": used.tokens,
            "cost_usd": round(used.cost_usd, 6),
            "wall_time": round(used.wall_time, 1),
            "tool_calls": used.tool_calls,
            "llm_calls": used.llm_calls,
        },
        "after_limit": budget.get("after_limit", "summarize"),
        "stopped_by": session.budget_stop or None,
    }
