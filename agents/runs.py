"""One agent execution, start to end: its record, tools, controller and outcome.

Stage agents, parallel agents, synthesis, the executive summary and sub-agents all run
through ``run_agent``; what differs is the messages they start from and the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from agents.budget import SessionBudget
from agents.controller import (
    AgentResult,
    AgentRun,
    IteratingController,
    SingleShotController,
    SubAgents,
    ToolExecutor,
)
from agents.memory import SessionMemories, WithMemory, record_injection, remembers
from agents.recorder import Recorder, db
from agents.resolver import ResolvedAgent
from agents.skills import AgentSkills, WithSkills, agent_skills
from agents.steering import Steering
from agents.tools.mcp_client import MCPServerError
from agents.tools.toolbox import ToolBox
from config.types import ChainConfig, TarsyConfig
from llm.types import ConversationMessage
from masking import mask_text
from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    Stage,
    TimelineEventStatus,
    TimelineEventType,
)

logger = logging.getLogger(__name__)

Controller = IteratingController | SingleShotController


class RunControl:
    """The running agents of one session, so that one of them can be stopped alone: a
    cancel request for a parallel agent or a sub-agent, ``cancel_agent``, a sub-agent's
    ``agent_timeout``. The stopped agent ends with the status and reason given here."""

    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task[AgentResult]] = {}
        self._stops: dict[int, tuple[ExecutionStatus, str]] = {}

    def track(self, execution_id: int, task: asyncio.Task[AgentResult]) -> None:
        self._tasks[execution_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(execution_id, None))

    def cancel(
        self,
        execution_id: int,
        reason: str,
        status: ExecutionStatus = ExecutionStatus.CANCELLED,
    ) -> bool:
        task = self._tasks.get(execution_id)
        if task is None or task.done() or execution_id in self._stops:
            return False
        self._stops[execution_id] = (status, reason)
        task.cancel()
        return True

    def stopped_because(self, execution_id: int) -> tuple[ExecutionStatus, str] | None:
        return self._stops.get(execution_id)


@dataclass
class SessionRun:
    """What every step of one session's run shares."""

    session: AlertSession
    lease: services.Lease
    config: TarsyConfig
    chain: ChainConfig
    control: RunControl = field(default_factory=RunControl)
    next_stage_index: int = 0
    runbook: str = ""  # resolved when the session starts (sessions/runbooks.py)
    # Lessons of past investigations, recalled when the session starts (agents/memory.py).
    memories: SessionMemories = field(default_factory=SessionMemories)
    # What the investigation may still spend (agents/budget.py); None: no limits.
    budget: SessionBudget | None = None

    def stage_index(self) -> int:
        index = self.next_stage_index
        self.next_stage_index += 1
        return index


@dataclass(frozen=True)
class Outcome:
    """How one agent execution ended."""

    execution: AgentExecution
    result: AgentResult


async def start_agent(
    run: SessionRun,
    *,
    stage: Stage,
    agent: ResolvedAgent,
    agent_index: int,
    parent: AgentExecution | None = None,
    task: str = "",
    name: str = "",
) -> AgentExecution:
    """The execution's record, named ``name`` (the agent's own name by default);
    ``run_agent`` then runs it."""
    return await db(services.execution_start)(
        lease=run.lease,
        stage=stage,
        agent_name=name or agent.name,
        agent_index=agent_index,
        llm_backend=agent.choice.backend,
        llm_provider=agent.choice.config.name,
        model_name=agent.choice.config.model,
        parent_execution=parent,
        task=task,
    )


async def run_agent(
    run: SessionRun,
    execution: AgentExecution,
    agent: ResolvedAgent,
    *,
    messages: Callable[[ResolvedAgent], list[ConversationMessage]],
    controller: Controller,
    sub_agents: Callable[[AgentExecution], SubAgents] | None = None,
) -> Outcome:
    """Run the execution in a task the session can stop alone, and record how it ended.
    ``sub_agents`` builds the agent's sub-agent runner, if it dispatches any."""
    recorder = Recorder(run.session, execution, run.lease, budget=run.budget)
    work = asyncio.create_task(
        _execute(run, agent, recorder, messages, controller, sub_agents),
        name=f"agent-{execution.id}",
    )
    run.control.track(execution.id, work)
    try:
        result = await work
    except asyncio.CancelledError:
        stopped = run.control.stopped_because(execution.id)
        if stopped is None:
            work.cancel()
            raise  # the whole session is being stopped: not this agent's to record
        result = AgentResult(stopped[0], error=stopped[1])
    await db(services.execution_finish)(
        lease=run.lease,
        execution=recorder.execution,
        status=result.status,
        final_analysis=result.final_analysis,
        error_message=result.error,
        iterations=result.iterations,
    )
    return Outcome(recorder.execution, result)


def _with_memory(run: SessionRun, agent: ResolvedAgent, tools: ToolExecutor) -> ToolExecutor:
    """With memory on, every iterating agent may recall lessons and search past sessions."""
    if not (run.config.defaults.memory.enabled and agent.settings.iterating):
        return tools
    return WithMemory(tools, config=run.config, session=run.session, injected=run.memories.ids)


def _with_skills(tools: ToolExecutor, skills: AgentSkills) -> ToolExecutor:
    return WithSkills(tools, skills.on_demand) if skills.on_demand else tools


async def _execute(
    run: SessionRun,
    agent: ResolvedAgent,
    recorder: Recorder,
    messages: Callable[[ResolvedAgent], list[ConversationMessage]],
    controller: Controller,
    sub_agents: Callable[[AgentExecution], SubAgents] | None,
) -> AgentResult:
    execution = recorder.execution
    if execution.parent_execution_id is not None and execution.task:
        # First on a sub-agent's timeline, as in TARSy: what it was dispatched to do.
        await recorder.add_item(TimelineEventType.TASK_ASSIGNED, execution.task)
    skills = agent_skills(run.config, agent.settings)
    for skill in skills.required:
        # In its prompt from the start: shown, and read by scoring, as in TARSy.
        await recorder.add_item(
            TimelineEventType.SKILL_LOADED, skill.body, metadata={"skill_name": skill.name}
        )
    if run.memories.recalled and remembers(
        agent, dispatched=execution.parent_execution_id is not None
    ):
        await record_injection(recorder, run.memories)
    try:
        async with ToolBox(
            agent.servers,
            execution_id=str(recorder.execution.id),
            only=agent.settings.tool_filter,
        ) as toolbox:
            runner = sub_agents(recorder.execution) if sub_agents else None
            try:
                return await controller.run(
                    AgentRun(
                        settings=agent.settings,
                        choice=agent.choice,
                        fallbacks=list(agent.fallbacks),
                        cost=run.config.cost_estimation,
                        tools=_with_memory(
                            run,
                            agent,
                            _with_skills(runner.tools(toolbox) if runner else toolbox, skills),
                        ),
                        recorder=recorder,
                        messages=messages(agent),
                        sub_agents=runner,
                        servers=agent.servers,
                        summarizers=agent.summarizers,
                        # While the session runs, not in a chat answer on an ended one.
                        steering=(
                            None
                            if isinstance(run.lease, services.ChatLease)
                            else Steering(recorder)
                        ),
                        budget=run.budget,
                    )
                )
            finally:
                if runner is not None:
                    # Sub-agents never outlive the agent that dispatched them.
                    with contextlib.suppress(Exception):
                        await runner.cancel_all("the agent that dispatched it has finished")
    except MCPServerError as exc:
        # The message quotes the server's stderr, which may hold its configuration.
        message = mask_text(str(exc))
        await recorder.add_item(TimelineEventType.ERROR, message, status=TimelineEventStatus.FAILED)
        return AgentResult(ExecutionStatus.FAILED, error=message)
