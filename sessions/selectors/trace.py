"""Reads for the trace page: every model call and tool call of a session, as recorded.

The page shows one summary line per interaction and loads the bodies (the conversation
a model was sent, a large tool result) only when one is opened, so it stays light for a
session with hundreds of calls: the page's queries leave those columns out, and their
number does not depend on how many interactions there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Case, F, QuerySet, TextField, Value, When
from django.db.models.functions import Length

from sessions import selectors
from sessions.models import AlertSession, LLMInteraction, MCPInteraction, answer_message
from sessions.selectors.timeline import StageNode, session_tree

# A tool result up to this many characters is shown in place; a longer one loads when
# its interaction is opened.
INLINE_RESULT_CHARS = 2048

# What an LLM interaction's summary line does not need: its conversation and answer.
LLM_BODY_FIELDS = ("request_messages", "tools", "response_text", "thinking", "tool_calls")
# What putting a request back together reads of each earlier call it continues.
CHAIN_FIELDS = (
    "id",
    "extends",
    "shared_messages",
    "request_messages",
    "response_text",
    "tool_calls",
)


@dataclass(frozen=True)
class TraceEntry:
    """One line of the trace: an LLM or an MCP interaction."""

    interaction: LLMInteraction | MCPInteraction

    @property
    def kind(self) -> str:
        return "llm" if isinstance(self.interaction, LLMInteraction) else "mcp"

    @property
    def execution_id(self) -> int | None:
        return self.interaction.execution_id

    @property
    def stage_id(self) -> int | None:
        return None  # an interaction is placed by its execution alone


@dataclass(frozen=True)
class Trace:
    stages: list[StageNode[TraceEntry]]
    # Interactions of no agent (the session's own); the page lists them apart.
    session_entries: list[TraceEntry]
    llm_count: int
    mcp_count: int
    usage: dict[str, Any]


def session_trace(session: AlertSession) -> Trace:
    """Stages in order, each with its agents (sub-agents under the agent that dispatched
    them), each with its interactions in the order they happened."""
    llm_interactions = list(session.llm_interactions.defer(*LLM_BODY_FIELDS).order_by("id"))
    mcp_interactions = list(_mcp_summaries(session))
    interactions: list[LLMInteraction | MCPInteraction] = [*llm_interactions, *mcp_interactions]
    entries = sorted(
        (TraceEntry(i) for i in interactions),
        # A model call is recorded when it ends, before the tools it asked for run.
        key=lambda entry: (entry.interaction.created_at, entry.kind != "llm"),
    )
    stages, session_entries = session_tree(
        selectors.session_stages(session), selectors.session_executions(session), entries
    )
    return Trace(
        stages=stages,
        session_entries=session_entries,
        llm_count=len(llm_interactions),
        mcp_count=len(mcp_interactions),
        usage=selectors.session_usage(session),
    )


def _mcp_summaries(session: AlertSession) -> QuerySet[MCPInteraction]:
    """MCP interactions without their result, except a result short enough to show in
    place (``result_if_small``; None when it has to be loaded on demand)."""
    return (
        session.mcp_interactions.defer("result")
        .annotate(result_chars=Length("result"))
        .annotate(
            result_if_small=Case(
                When(result_chars__lte=INLINE_RESULT_CHARS, then=F("result")),
                default=Value(None),
                output_field=TextField(),
            )
        )
        .order_by("id")
    )


def request_messages(interaction: LLMInteraction) -> list[dict[str, Any]]:
    """The whole request of one model call, exactly as its provider received it.

    A call that continues an earlier one stores only what it adds
    (``LLMInteraction.extends``): its request is rebuilt from the calls it continues, back
    to one stored whole. Two queries, whatever the number of calls: the execution's links,
    then the bodies of the calls on the chain.
    """
    if interaction.extends_id is None:
        return list(interaction.request_messages)
    links = dict(
        LLMInteraction.objects.filter(
            execution_id=interaction.execution_id, id__lt=interaction.id
        ).values_list("id", "extends_id")
    )
    chain = [interaction.extends_id]
    while (earlier := links.get(chain[-1])) is not None:
        chain.append(earlier)
    calls = LLMInteraction.objects.only(*CHAIN_FIELDS).in_bulk(chain)
    root, *later = [calls[i] for i in reversed(chain)]
    messages = list(root.request_messages)
    previous = root
    for call in [*later, interaction]:
        answer = answer_message(previous.response_text, previous.tool_calls)
        shared = call.shared_messages or 0
        messages = [*messages, answer][:shared] + list(call.request_messages)
        previous = call
    return messages
