"""Runs one claimed session: its chain's stages in order, each with its agent."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from django.conf import settings

from agents.config import get_config
from agents.config_types import ChainConfig, ResolvedAgentConfig, StageConfig, TarsyConfig
from agents.controller import AgentResult, AgentRun, IteratingController, ProviderChoice
from agents.mcp_client import MCPServerError
from agents.prompts import initial_messages
from agents.recorder import Recorder, db
from agents.toolbox import ToolBox
from llm.models import BACKENDS_FOR_TYPE, LLMProvider
from llm.registry import get_backend
from sessions import services
from sessions.models import (
    AlertSession,
    ExecutionStatus,
    SessionStatus,
    Stage,
    TimelineEventStatus,
    TimelineEventType,
)

logger = logging.getLogger(__name__)


class SessionFailure(Exception):
    """A problem that ends the session with a message the user can act on."""


class StageFailed(SessionFailure):
    """A stage ended unsuccessfully; its agent has already put the reason on the timeline."""


async def execute_session(session_id: str) -> str:
    session = await db(AlertSession.objects.get)(id=session_id)
    heartbeat = asyncio.create_task(_heartbeat(session_id))
    try:
        async with asyncio.timeout(settings.TARSY_SESSION_TIMEOUT):
            final_analysis = await _run_chain(session)
    except TimeoutError:
        message = f"The session exceeded its timeout of {int(settings.TARSY_SESSION_TIMEOUT)} s."
        await _fail(session, SessionStatus.TIMED_OUT, message)
        return SessionStatus.TIMED_OUT
    except StageFailed as failure:
        await _fail(session, SessionStatus.FAILED, str(failure), explain=False)
        return SessionStatus.FAILED
    except SessionFailure as failure:
        await _fail(session, SessionStatus.FAILED, str(failure))
        return SessionStatus.FAILED
    except Exception as exc:
        logger.exception("session %s crashed", session_id)
        await _fail(session, SessionStatus.FAILED, f"Internal error: {type(exc).__name__}: {exc}")
        return SessionStatus.FAILED
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
    await db(services.session_finish)(
        session_id=session.id, status=SessionStatus.COMPLETED, final_analysis=final_analysis
    )
    return SessionStatus.COMPLETED


async def _heartbeat(session_id: str) -> None:
    while True:
        await asyncio.sleep(settings.TARSY_HEARTBEAT_INTERVAL)
        await db(services.session_heartbeat)(session_id=session_id)


async def _fail(
    session: AlertSession, status: SessionStatus, message: str, *, explain: bool = True
) -> None:
    work_status = (
        ExecutionStatus.TIMED_OUT if status == SessionStatus.TIMED_OUT else ExecutionStatus.FAILED
    )
    await db(services.session_close_open_work)(
        session_id=session.id, status=work_status, reason=message
    )
    if explain:
        await db(services.timeline_event_add)(
            session=session,
            event_type=TimelineEventType.ERROR,
            content=message,
            status=TimelineEventStatus.FAILED,
        )
    await db(services.session_finish)(session_id=session.id, status=status, error_message=message)


async def _run_chain(session: AlertSession) -> str:
    config = get_config()
    chain = config.chains.get(session.chain_id)
    if chain is None:
        raise SessionFailure(
            f"Chain {session.chain_id!r} is no longer configured in {config.source}; "
            f"configured chains: {', '.join(config.chains)}"
        )
    previous = ""
    result = AgentResult(ExecutionStatus.FAILED)
    for index, stage_config in enumerate(chain.stages):
        stage = await db(services.stage_start)(session=session, name=stage_config.name, index=index)
        # An exception leaves the stage open; _fail closes it with the session's status.
        result = await _run_stage(config, chain, stage_config, stage, session, previous)
        await db(services.stage_finish)(
            stage=stage, status=result.status, error_message=result.error
        )
        if result.status != ExecutionStatus.COMPLETED:
            raise StageFailed(f"Stage {stage_config.name!r} failed: {result.error}")
        previous += f"### Stage '{stage_config.name}'\n\n{result.final_analysis}\n\n"
    return result.final_analysis


async def _run_stage(
    config: TarsyConfig,
    chain: ChainConfig,
    stage_config: StageConfig,
    stage: Stage,
    session: AlertSession,
    previous: str,
) -> AgentResult:
    agent = config.resolve_agent(chain, stage_config, stage_config.agents[0])
    choice = await db(_resolve_provider)(agent.llm_provider, agent.llm_backend, agent.agent_name)
    fallbacks = await db(_resolve_fallbacks)(agent)
    if agent.native_tools is not None:
        # The agent's choice of Gemini native tools overrides its providers' rows.
        choice, *fallbacks = [
            dataclasses.replace(
                c, config=dataclasses.replace(c.config, native_tools=agent.native_tools)
            )
            for c in (choice, *fallbacks)
        ]
    execution = await db(services.execution_start)(
        stage=stage,
        agent_name=agent.agent_name,
        agent_index=1,
        llm_backend=choice.backend,
        llm_provider=choice.config.name,
        model_name=choice.config.model,
    )
    recorder = Recorder(session, execution)
    servers = {name: config.mcp_servers[name] for name in agent.mcp_servers}
    try:
        async with ToolBox(servers) as tools:
            run = AgentRun(
                agent=agent,
                choice=choice,
                fallbacks=fallbacks,
                cost=config.cost_estimation,
                tools=tools,
                recorder=recorder,
                messages=initial_messages(
                    agent=agent,
                    servers=list(servers.values()),
                    alert_type=session.alert_type,
                    alert_data=session.alert_data,
                    runbook=session.runbook,
                    previous_stages=previous,
                ),
            )
            result = await IteratingController().run(run)
    except MCPServerError as exc:
        result = AgentResult(ExecutionStatus.FAILED, error=str(exc))
        await recorder.add_item(
            TimelineEventType.ERROR, str(exc), status=TimelineEventStatus.FAILED
        )
    # An exception leaves the execution open; _fail closes it with the session's status.
    await db(services.execution_finish)(
        execution=recorder.execution,
        status=result.status,
        final_analysis=result.final_analysis,
        error_message=result.error,
        iterations=result.iterations,
    )
    return result


def _resolve_provider(name: str | None, backend: str | None, agent_name: str) -> ProviderChoice:
    admin = "Django admin → LLM providers"
    if name:
        row = LLMProvider.objects.filter(name=name).first()
        if row is None:
            known = ", ".join(LLMProvider.objects.values_list("name", flat=True)) or "none"
            raise SessionFailure(
                f"LLM provider {name!r} (used by {agent_name}) does not exist; "
                f"providers: {known}. Add it in {admin}"
            )
        if not row.enabled:
            raise SessionFailure(
                f"LLM provider {name!r} (used by {agent_name}) is disabled; enable it in {admin}"
            )
    else:
        row = LLMProvider.objects.filter(is_default=True).order_by("-enabled").first()
        if row is None:
            raise SessionFailure(
                f"No LLM provider is configured: mark one as default in {admin} or set "
                "defaults.llm_provider in tarsy.yaml"
            )
        if not row.enabled:
            raise SessionFailure(
                f"The default LLM provider {row.name!r} is disabled: enable it, or mark "
                f"another provider as default, in {admin}"
            )
    backend = backend or row.default_backend()
    allowed = BACKENDS_FOR_TYPE[row.type]
    if backend not in allowed:
        raise SessionFailure(
            f"llm_backend {backend!r} cannot drive provider {row.name!r} of type {row.type!r}; "
            f"allowed: {', '.join(allowed)}"
        )
    return ProviderChoice(row.to_config(), backend, get_backend(backend))


def _resolve_fallbacks(agent: ResolvedAgentConfig) -> list[ProviderChoice]:
    choices = []
    for fallback in agent.fallback_providers:
        try:
            choices.append(_resolve_provider(fallback.provider, fallback.backend, agent.agent_name))
        except SessionFailure as problem:
            # A broken fallback must not stop an agent whose own provider works.
            logger.warning("skipping fallback provider for %s: %s", agent.agent_name, problem)
    return choices
