"""What a row of the session list says about a session beyond its own columns: how its
investigation ran (chips) and, when it has no executive summary, the head of its final
analysis. For a whole page of rows in one query, whatever the page's size."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    CharField,
    Count,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Substr

from sessions.models import (
    AgentExecution,
    AlertSession,
    ChatMessage,
    Stage,
    StageType,
    TimelineEvent,
    TimelineEventType,
)

# Enough of a final analysis for a row's two lines once its Markdown is gone.
ANALYSIS_HEAD_CHARS = 1000


@dataclass(frozen=True)
class RowFacts:
    parallel: bool = False  # a stage ran more than one agent
    sub_agents: bool = False  # an orchestrator dispatched sub-agents
    fallback: bool = False  # an agent fell back to another LLM provider
    chat_messages: int = 0  # follow-up questions asked in its chat
    actions: bool = False  # an action stage ran
    analysis_head: str = ""  # the final analysis's head, when there is no executive summary


def row_facts(session_ids: Iterable[Any]) -> dict[Any, RowFacts]:
    """Each session's ``RowFacts``, in one query (subqueries on indexed foreign keys)."""
    ids = list(session_ids)
    if not ids:
        return {}
    session = OuterRef("pk")
    chats = (
        ChatMessage.objects.filter(session=session)
        .order_by()
        .values("session")
        .annotate(n=Count("id"))
        .values("n")
    )
    rows = (
        AlertSession.objects.filter(id__in=ids)
        .order_by()
        .annotate(
            f_parallel=Exists(
                Stage.objects.filter(session=session).filter(
                    Q(parallel_type__gt="") | Q(expected_agent_count__gt=1)
                )
            ),
            f_sub_agents=Exists(
                AgentExecution.objects.filter(session=session, parent_execution__isnull=False)
            ),
            f_fallback=Exists(
                TimelineEvent.objects.filter(
                    session=session, event_type=TimelineEventType.PROVIDER_FALLBACK
                )
            ),
            f_chat=Coalesce(Subquery(chats, output_field=IntegerField()), Value(0)),
            f_actions=Exists(Stage.objects.filter(session=session, stage_type=StageType.ACTION)),
            f_analysis=Case(
                When(executive_summary="", then=Substr("final_analysis", 1, ANALYSIS_HEAD_CHARS)),
                default=Value(""),
                output_field=CharField(),
            ),
        )
        .values_list(
            "id", "f_parallel", "f_sub_agents", "f_fallback", "f_chat", "f_actions", "f_analysis"
        )
    )
    return {
        row[0]: RowFacts(
            parallel=bool(row[1]),
            sub_agents=bool(row[2]),
            fallback=bool(row[3]),
            chat_messages=int(row[4] or 0),
            actions=bool(row[5]),
            analysis_head=row[6] or "",
        )
        for row in rows
    }
