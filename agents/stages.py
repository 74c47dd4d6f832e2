"""The steps of a chain: stages (one agent, several, or replicas of one, side by side),
the synthesis that merges a parallel stage, and the executive summary at the end."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from agents.controller import IteratingController, SingleShotController
from agents.memory import remembers
from agents.prompts import (
    Finding,
    exec_summary_messages,
    format_findings,
    investigation_messages,
    sub_agent_messages,
    synthesis_messages,
    system_prompt,
)
from agents.recorder import db
from agents.resolver import (
    EXEC_SUMMARY_STAGE,
    AgentSettings,
    ResolutionError,
    ResolvedAgent,
    exec_summary_settings,
    resolve,
    stage_settings,
    sub_agent_catalog,
    sub_agent_settings,
    synthesis_settings,
    with_alert_selection,
)
from agents.runs import Outcome, SessionRun, run_agent, start_agent
from agents.skills import agent_skills, skill_sections
from agents.sub_agents import SubAgentRunner
from config.types import ACTION, EXEC_SUMMARY, StageConfig
from sessions import services
from sessions.models import (
    AgentExecution,
    ExecutionStatus,
    ParallelType,
    Stage,
    StageType,
    TimelineEventType,
)

logger = logging.getLogger(__name__)


class SessionFailure(Exception):
    """A problem that ends the session with a message the user can act on."""


class StageFailed(SessionFailure):
    """A stage ended unsuccessfully; its agents have already put the reasons on the
    timeline."""


@dataclass(frozen=True)
class StageResult:
    findings: list[Finding]
    # What the next stage receives: the one agent's analysis, or the synthesis of many.
    analysis: str


async def run_stage(run: SessionRun, stage_config: StageConfig, previous: str) -> StageResult:
    settings = stage_settings(run.config, run.chain, stage_config)
    agents = [await _resolve(run, agent) for agent in settings]
    policy = stage_config.success_policy or run.config.defaults.success_policy
    parallel = stage_config.parallel
    stage = await db(services.stage_start)(
        lease=run.lease,
        name=stage_config.name,
        index=run.stage_index(),
        stage_type=StageType.ACTION
        if all(a.settings.type == ACTION for a in agents)
        else StageType.INVESTIGATION,
        parallel_type=(
            ParallelType.REPLICA
            if stage_config.replicas > 1
            else ParallelType.MULTI_AGENT
            if parallel
            else ParallelType.NONE
        ),
        success_policy=policy if parallel else "",
        expected_agent_count=len(agents),
    )

    def messages(agent: ResolvedAgent):
        return investigation_messages(
            system=_system(run, agent),
            alert_type=run.session.alert_type,
            alert_data=run.session.alert_data,
            runbook=run.runbook,
            previous=previous,
        )

    replicas = stage_config.replicas > 1
    # Every agent in one task group: they stream side by side. A failed agent does not
    # stop its siblings (run_agent turns failures into outcomes); a lost lease or a
    # cancelled session stops them all.
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(
                    _stage_agent(run, stage, agent, index, messages, replica=replicas)
                )
                for index, agent in enumerate(agents, start=1)
            ]
    except BaseExceptionGroup as failures:
        raise _first_cause(failures) from None
    outcomes = [task.result() for task in tasks]
    findings = [_finding(stage_config.name, outcome) for outcome in outcomes]
    succeeded = [o for o in outcomes if o.result.status == ExecutionStatus.COMPLETED]
    ok = len(succeeded) == len(outcomes) if policy == "all" else bool(succeeded)
    error = "" if ok else _stage_error(findings, policy if parallel else "")
    await db(services.stage_finish)(
        lease=run.lease,
        stage=stage,
        status=ExecutionStatus.COMPLETED if ok else _failed_status(outcomes),
        error_message=error,
    )
    if not ok:
        raise StageFailed(f"Stage {stage_config.name!r} failed: {error}")
    if not parallel:
        return StageResult(findings, succeeded[0].result.final_analysis)
    if run.budget is not None and run.budget.stopped and not run.budget.summarize_after:
        # Stopped by the budget with nothing more to run: the agents' answers as they are.
        return StageResult(findings, format_findings(findings))
    return StageResult(findings, await _synthesize(run, stage_config, findings))


async def _stage_agent(run, stage, agent, index, messages, *, replica: bool) -> Outcome:
    # Replicas share an agent, so each is named by its number, as TARSy names them:
    # ScalingReviewer-1, ScalingReviewer-2 (the configuration is still the agent's).
    name = f"{agent.name}-{index}" if replica else agent.name
    execution = await start_agent(run, stage=stage, agent=agent, agent_index=index, name=name)
    runner = _sub_agent_runner(run, agent, stage) if agent.settings.sub_agents else None
    return await run_agent(
        run,
        execution,
        agent,
        messages=messages,
        controller=_controller(agent.settings),
        sub_agents=runner,
    )


async def _synthesize(run: SessionRun, stage_config: StageConfig, findings: list[Finding]) -> str:
    """A synthesis step merges what the parallel agents found, failures included; its
    result is what the next stage receives. Recorded as a stage of its own."""
    agent = await _resolve(run, synthesis_settings(run.config, run.chain, stage_config))
    stage = await db(services.stage_start)(
        lease=run.lease,
        name=f"{stage_config.name} - Synthesis",
        index=run.stage_index(),
        stage_type=StageType.SYNTHESIS,
    )
    execution = await start_agent(run, stage=stage, agent=agent, agent_index=1)
    outcome = await run_agent(
        run,
        execution,
        agent,
        messages=lambda a: synthesis_messages(
            system=_system(run, a),
            alert_type=run.session.alert_type,
            alert_data=run.session.alert_data,
            findings=findings,
            runbook=run.runbook,
        ),
        controller=SingleShotController(thinking_fallback=True, interaction_type="synthesis"),
    )
    result = outcome.result
    await db(services.stage_finish)(
        lease=run.lease, stage=stage, status=result.status, error_message=result.error
    )
    if result.status != ExecutionStatus.COMPLETED:
        raise StageFailed(f"Stage {stage.name!r} failed: {result.error}")
    return result.final_analysis


async def executive_summary(run: SessionRun, final_analysis: str) -> tuple[str, str]:
    """(summary, error). Fails open: whatever goes wrong is recorded, and the session
    completes all the same."""
    try:
        agent = await _resolve(run, exec_summary_settings(run.config, run.chain))
    except SessionFailure as problem:
        return "", str(problem)
    stage = await db(services.stage_start)(
        lease=run.lease,
        name=EXEC_SUMMARY_STAGE,
        index=run.stage_index(),
        stage_type=StageType.EXEC_SUMMARY,
    )
    execution = await start_agent(run, stage=stage, agent=agent, agent_index=1)
    outcome = await run_agent(
        run,
        execution,
        agent,
        messages=lambda a: exec_summary_messages(
            system=_system(run, a),
            alert_type=run.session.alert_type,
            final_analysis=final_analysis,
        ),
        controller=SingleShotController(
            answer_type=TimelineEventType.EXECUTIVE_SUMMARY, interaction_type="executive_summary"
        ),
    )
    result = outcome.result
    await db(services.stage_finish)(
        lease=run.lease, stage=stage, status=result.status, error_message=result.error
    )
    if result.status != ExecutionStatus.COMPLETED:
        return "", result.error or str(result.status)
    return result.final_analysis.strip(), ""


def _sub_agent_runner(run: SessionRun, agent: ResolvedAgent, stage: Stage):
    """Builds, for the dispatching agent's execution, the runner of its sub-agents."""
    catalog = sub_agent_catalog(run.config, agent.settings)
    refs = {ref.name: ref for ref in agent.settings.sub_agents}

    def build(parent: AgentExecution) -> SubAgentRunner:
        dispatched = 0

        async def start(name: str, task: str):
            nonlocal dispatched
            dispatched += 1
            settings = sub_agent_settings(run.config, run.chain, refs[name])
            child = await _resolve(run, settings)
            execution = await start_agent(
                run, stage=stage, agent=child, agent_index=dispatched, parent=parent, task=task
            )

            def messages(a: ResolvedAgent):
                return sub_agent_messages(
                    system=_system(run, a, dispatched=True),
                    alert_type=run.session.alert_type,
                    alert_data=run.session.alert_data,
                    task=task,
                    dispatched_by=agent.name,
                    runbook=run.runbook,
                )

            return execution.id, run_agent(
                run, execution, child, messages=messages, controller=IteratingController()
            )

        return SubAgentRunner(
            catalog=catalog,
            guardrails=agent.settings.orchestrator,
            control=run.control,
            start=start,
        )

    return build


async def _resolve(run: SessionRun, settings: AgentSettings) -> ResolvedAgent:
    selection = run.session.mcp_selection
    if selection and settings.iterating:
        settings = with_alert_selection(settings, selection)
    try:
        return await db(resolve)(run.config, settings)
    except ResolutionError as problem:
        raise SessionFailure(str(problem)) from None


def _system(run: SessionRun, agent: ResolvedAgent, *, dispatched: bool = False) -> str:
    """``dispatched``: a sub-agent's (no lessons of past investigations: its task is narrow)."""
    return system_prompt(
        agent_name=agent.name,
        agent_type=agent.settings.type,
        custom_instructions=agent.settings.custom_instructions,
        servers=list(agent.servers.values()),
        sub_agents=sub_agent_catalog(run.config, agent.settings),
        skills=skill_sections(agent_skills(run.config, agent.settings)),
        memories=run.memories.section if remembers(agent, dispatched=dispatched) else "",
    )


def _controller(settings: AgentSettings) -> IteratingController | SingleShotController:
    if settings.iterating:
        return IteratingController()
    if settings.type == EXEC_SUMMARY:
        return SingleShotController(
            answer_type=TimelineEventType.EXECUTIVE_SUMMARY, interaction_type="executive_summary"
        )
    return SingleShotController(
        thinking_fallback=settings.type == "synthesis", interaction_type=settings.type
    )


def _finding(stage: str, outcome: Outcome) -> Finding:
    result = outcome.result
    completed = result.status == ExecutionStatus.COMPLETED
    execution = outcome.execution
    return Finding(
        stage=stage,
        agent=execution.agent_name,
        status=str(result.status),
        text=result.final_analysis if completed else result.error or str(result.status),
    )


def _stage_error(findings: list[Finding], policy: str) -> str:
    failures = [f"{f.agent}: {f.text}" for f in findings if f.status != ExecutionStatus.COMPLETED]
    if not policy:
        return findings[0].text
    need = "every agent" if policy == "all" else "at least one agent"
    return f"success policy '{policy}' needs {need} to succeed; " + "; ".join(failures)


def _failed_status(outcomes: list[Outcome]) -> ExecutionStatus:
    statuses = {o.result.status for o in outcomes}
    if statuses == {ExecutionStatus.CANCELLED}:
        return ExecutionStatus.CANCELLED
    if ExecutionStatus.TIMED_OUT in statuses and len(statuses) == 1:
        return ExecutionStatus.TIMED_OUT
    return ExecutionStatus.FAILED


def _first_cause(group: BaseExceptionGroup) -> BaseException:
    """The exception to act on: a lost lease before anything else."""
    leaves = list(_leaves(group))
    return next((e for e in leaves if isinstance(e, services.LeaseLost)), leaves[0])


def _leaves(group: BaseExceptionGroup):
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def previous_context(findings: list[Finding], analysis: str, stage: str, parallel: bool) -> str:
    """What a later stage reads of this one: each agent's result under its name, and the
    synthesis that merged them."""
    if not parallel:
        return format_findings(findings)
    merged = Finding(stage=stage, agent="synthesis", status="completed", text=analysis)
    return format_findings([*findings, merged])
