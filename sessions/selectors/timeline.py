"""A session's timeline as the pages show it: items (from rows or from event payloads)
grouped into stages and agents, sub-agents nested under the agent that dispatched them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from sessions.models import AgentExecution, Stage


@dataclass
class TimelineItem:
    """What the ``_timeline_item.html`` partial renders, from a row or an event payload."""

    id: int
    event_type: str
    status: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sequence_number: int = 0
    execution_id: int | None = None
    content_length: int | None = None
    stage_id: int | None = None

    def __post_init__(self) -> None:
        if self.content_length is None:
            self.content_length = len(self.content)

    @classmethod
    def from_model(cls, event, streamed: str = "") -> TimelineItem:
        """From a row of ``selectors.session_timeline_for_page`` (a long tool result's
        body left out) or a plain row."""
        content: str | None
        if event.status == "streaming":
            content = streamed
        else:
            content = getattr(event, "page_content", None)
            if content is None:
                content = event.content
        return cls(
            event.id,
            event.event_type,
            event.status,
            content,
            event.metadata,
            event.sequence_number,
            event.execution_id,
            getattr(event, "content_length", None),
            event.stage_id,
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TimelineItem:
        return cls(
            payload["event_id"],
            payload["event_type"],
            payload["status"],
            payload.get("content", ""),
            payload.get("metadata") or {},
            payload.get("sequence_number", 0),
            payload.get("execution_id"),
            stage_id=payload.get("stage_id"),
        )

    @property
    def body_inline(self) -> bool:
        """Whether the page carries this item's body, or loads it when opened."""
        from sessions.selectors import INLINE_RESULT_CHARS

        assert self.content_length is not None  # set by __post_init__
        return self.event_type != "llm_tool_call" or self.content_length <= INLINE_RESULT_CHARS

    @property
    def is_streaming(self) -> bool:
        return self.status == "streaming"

    @property
    def container(self) -> str:
        """Where the page keeps this item: its agent's card, its stage's own list (a chat
        question), or the session's own list."""
        if self.execution_id is not None:
            return f"#execution-{self.execution_id}-items"
        if self.stage_id is not None:
            return f"#stage-{self.stage_id}-items"
        return "#session-items"


class _Placed(Protocol):
    """What places an item in the tree: a timeline item, or a trace's interaction."""

    @property
    def execution_id(self) -> int | None: ...
    @property
    def stage_id(self) -> int | None: ...


ItemT = TypeVar("ItemT", bound=_Placed)


@dataclass
class ExecutionNode(Generic[ItemT]):
    """An agent's card: its items, and the sub-agents it dispatched."""

    execution: AgentExecution
    items: list[ItemT] = field(default_factory=list)
    children: list[ExecutionNode[ItemT]] = field(default_factory=list)


@dataclass
class StageNode(Generic[ItemT]):
    stage: Stage
    executions: list[ExecutionNode[ItemT]] = field(default_factory=list)
    items: list[ItemT] = field(default_factory=list)  # the stage's own: a chat question


def session_tree(
    stages: list[Stage], executions: list[AgentExecution], items: list[ItemT]
) -> tuple[list[StageNode[ItemT]], list[ItemT]]:
    """Stages in order, each with its own items and its agents (sub-agents nested under
    the agent that dispatched them), each with its items; and the items of the session
    itself."""
    nodes: dict[int, ExecutionNode[ItemT]] = {e.id: ExecutionNode(e) for e in executions}
    by_stage: dict[int | None, StageNode[ItemT]] = {s.id: StageNode(s) for s in stages}
    loose: list[ItemT] = []
    for item in items:
        node = nodes.get(item.execution_id) if item.execution_id else by_stage.get(item.stage_id)
        (node.items if node else loose).append(item)
    for execution in executions:
        node = nodes[execution.id]
        if execution.parent_execution_id in nodes:
            nodes[execution.parent_execution_id].children.append(node)
        elif execution.stage_id in by_stage:
            by_stage[execution.stage_id].executions.append(node)
    return [by_stage[stage.id] for stage in stages], loose
