"""Sub-agents: an agent with a non-empty ``sub_agents`` list may dispatch other agents,
which run concurrently as child executions (TARSy's implicit orchestrator, ADR-0015).

The dispatching agent gets three tools beside its MCP tools — ``orchestrator.dispatch_agent``,
``orchestrator.list_agents``, ``orchestrator.cancel_agent`` — and the results of its
sub-agents are pushed into its conversation as they finish (``drain``/``wait``, used by
the iterating controller). Depth is one: a sub-agent dispatches nothing.

Guardrails (``orchestrator:`` in tarsy.yaml): ``max_concurrent_agents`` running at once,
``agent_timeout`` per sub-agent (it ends ``timed_out``), ``max_budget`` of time from the
first dispatch, after which running sub-agents are cancelled and no more are accepted.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.controller import AgentResult, ToolExecutor
from agents.prompts import sub_agent_result
from agents.runs import Outcome, RunControl
from config.types import AgentConfig, OrchestratorConfig
from llm.types import ConversationMessage, ToolDefinition
from sessions.models import ExecutionStatus

logger = logging.getLogger(__name__)

SERVER = "orchestrator"
DISPATCH, LIST, CANCEL = (
    f"{SERVER}.dispatch_agent",
    f"{SERVER}.list_agents",
    f"{SERVER}.cancel_agent",
)

# Starts one sub-agent: (agent name, task) → (its execution id, the run to await).
Start = Callable[[str, str], Awaitable[tuple[int, Awaitable[Outcome]]]]


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False
    duration_ms: int = 0


@dataclass
class _Child:
    execution_id: int
    name: str
    task: asyncio.Future[Outcome]
    status: str = "running"


class SubAgentRunner:
    def __init__(
        self,
        *,
        catalog: list[AgentConfig],
        guardrails: OrchestratorConfig,
        control: RunControl,
        start: Start,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.catalog = {agent.name: agent for agent in catalog}
        self.guardrails = guardrails
        self.control = control
        self._start = start
        self._clock = clock
        self._children: dict[int, _Child] = {}
        # What the dispatching agent is told as each sub-agent ends.
        self._results: asyncio.Queue[ConversationMessage] = asyncio.Queue()
        self._first_dispatch: float | None = None

    # --- the tools --------------------------------------------------------------------------

    def tools(self, mcp: ToolExecutor) -> ToolExecutor:
        return _WithOrchestration(mcp, self)

    def definitions(self) -> list[ToolDefinition]:
        names = sorted(self.catalog)
        return [
            ToolDefinition(
                DISPATCH,
                "Start a sub-agent on a task; returns its execution id at once. Its result "
                "arrives as a message when it finishes.",
                {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "enum": names, "description": "which agent"},
                        "task": {"type": "string", "description": "what to do and report"},
                    },
                    "required": ["name", "task"],
                },
            ),
            ToolDefinition(
                LIST,
                "The agents you may dispatch, and the sub-agents you dispatched with their state.",
                {"type": "object", "properties": {}},
            ),
            ToolDefinition(
                CANCEL,
                "Stop a running sub-agent.",
                {
                    "type": "object",
                    "properties": {
                        "execution_id": {"type": "integer"},
                        "reason": {"type": "string", "description": "optional, short"},
                    },
                    "required": ["execution_id"],
                },
            ),
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        started = self._clock()
        if name == DISPATCH:
            result = await self._dispatch(arguments)
        elif name == LIST:
            result = self._list()
        elif name == CANCEL:
            result = self._cancel(arguments)
        else:
            result = ToolResult(f"Unknown tool {name!r}", is_error=True)
        elapsed = round((self._clock() - started) * 1000)
        return ToolResult(result.content, result.is_error, elapsed)

    async def _dispatch(self, arguments: dict[str, Any]) -> ToolResult:
        name, task = arguments.get("name"), arguments.get("task")
        if name not in self.catalog:
            known = ", ".join(sorted(self.catalog))
            return ToolResult(f"Unknown agent {name!r}; you may dispatch: {known}", True)
        if not isinstance(task, str) or not task.strip():
            return ToolResult("'task' is required: say what the sub-agent should do", True)
        limit = self.guardrails.max_concurrent_agents
        if limit and self.running >= limit:
            return ToolResult(
                f"{self.running} sub-agents are running, the most allowed at once; wait for "
                "a result or cancel one first",
                True,
            )
        if self._budget_left() == 0:
            return ToolResult("The time budget for sub-agents is used up; conclude now", True)
        self._first_dispatch = self._first_dispatch or self._clock()
        execution_id, run = await self._start(name, task.strip())
        work = asyncio.ensure_future(run)
        # One step of the loop lets the run register with RunControl (it does so before
        # its first await), so that it can be stopped from now on.
        await asyncio.sleep(0)
        self._children[execution_id] = _Child(execution_id, name, work)
        if timeout := self.guardrails.agent_timeout:
            # Through the same stop as a cancel, so the sub-agent ends timed_out, recorded.
            timer = asyncio.get_running_loop().call_later(
                timeout,
                self.control.cancel,
                execution_id,
                f"sub-agent {name} timed out after {timeout:g} s",
                ExecutionStatus.TIMED_OUT,
            )
            work.add_done_callback(lambda _: timer.cancel())
        work.add_done_callback(functools.partial(self._finished, execution_id))
        return ToolResult(json.dumps({"execution_id": execution_id, "status": "accepted"}))

    def _finished(self, execution_id: int, task: asyncio.Future[Outcome]) -> None:
        """Every sub-agent's end is told, however it came: a dispatching agent waiting
        for its last sub-agent would otherwise wait until the session times out."""
        child = self._children[execution_id]
        if task.cancelled() or task.exception() is not None:
            child.status = "cancelled" if task.cancelled() else "failed"
            if not task.cancelled():
                logger.error(
                    "sub-agent %s (execution %s) failed outside its work",
                    child.name,
                    execution_id,
                    exc_info=task.exception(),
                )
            message = sub_agent_result(
                name=child.name,
                execution_id=execution_id,
                status=child.status,
                text="(it ended without a result)",
            )
        else:
            outcome = task.result()
            child.status = outcome.result.status
            message = self._message(outcome)
        self._results.put_nowait(message)

    def _list(self) -> ToolResult:
        return ToolResult(
            json.dumps(
                {
                    "agents": [
                        {"name": a.name, "description": a.description}
                        for a in self.catalog.values()
                    ],
                    "dispatched": [
                        {"execution_id": c.execution_id, "name": c.name, "status": c.status}
                        for c in self._children.values()
                    ],
                },
                indent=2,
            )
        )

    def _cancel(self, arguments: dict[str, Any]) -> ToolResult:
        execution_id = arguments.get("execution_id")
        child = self._children.get(execution_id) if isinstance(execution_id, int) else None
        if child is None:
            return ToolResult(f"No sub-agent with execution id {execution_id!r}", True)
        reason = str(arguments.get("reason") or "").strip()[:500]
        attribution = "Cancelled by the dispatching agent" + (f": {reason}" if reason else "")
        if not self.control.cancel(child.execution_id, attribution):
            return ToolResult(f"Sub-agent {execution_id} is not running ({child.status})", True)
        return ToolResult(json.dumps({"execution_id": execution_id, "status": "cancelling"}))

    # --- results, for the controller ---------------------------------------------------------

    @property
    def running(self) -> int:
        return sum(1 for child in self._children.values() if not child.task.done())

    def drain(self) -> list[ConversationMessage]:
        messages = []
        while not self._results.empty():
            messages.append(self._results.get_nowait())
        return messages

    async def wait(self) -> list[ConversationMessage]:
        """At least one result; within the budget, or the running ones are cancelled."""
        left = self._budget_left()
        try:
            async with asyncio.timeout(left):
                first = await self._results.get()
        except TimeoutError:
            await self.cancel_all("the time budget for sub-agents was used up")
            return self.drain()
        return [first, *self.drain()]

    async def cancel_all(self, reason: str) -> None:
        running = [child for child in self._children.values() if not child.task.done()]
        for child in running:
            self.control.cancel(child.execution_id, f"Cancelled: {reason}")
        if running:
            await asyncio.wait([child.task for child in running])

    def _budget_left(self) -> float | None:
        budget = self.guardrails.max_budget
        if budget is None or self._first_dispatch is None:
            return None
        return max(0.0, budget - (self._clock() - self._first_dispatch))

    @staticmethod
    def _message(outcome: Outcome) -> ConversationMessage:
        result: AgentResult = outcome.result
        text = result.final_analysis if result.status == ExecutionStatus.COMPLETED else result.error
        return sub_agent_result(
            name=outcome.execution.agent_name,
            execution_id=outcome.execution.id,
            status=str(result.status),
            text=text or "(no text)",
        )


class _WithOrchestration:
    """The agent's MCP tools plus the orchestration tools, as one tool executor."""

    def __init__(self, mcp: ToolExecutor, runner: SubAgentRunner) -> None:
        self.mcp = mcp
        self.runner = runner

    async def list_tools(self) -> list[ToolDefinition]:
        return [*await self.mcp.list_tools(), *self.runner.definitions()]

    async def call_tool(self, name: str, arguments: dict[str, Any]):
        if name.startswith(f"{SERVER}."):
            return await self.runner.call(name, arguments)
        return await self.mcp.call_tool(name, arguments)
