"""Runs one claimed session: its chain's stages in order, each with its agent."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError

from agents.config import get_config
from agents.config_types import ChainConfig, ResolvedAgentConfig, StageConfig, TarsyConfig
from agents.controller import AgentResult, AgentRun, IteratingController, ProviderChoice
from agents.masking import mask_text
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


LEASE_LOST = "lease_lost"


class _Stop:
    """Why the session's task was cancelled from outside: its lease was lost (write
    nothing more), or it must be ended now with ``message`` (its cluster died)."""

    def __init__(self) -> None:
        self.lease_lost = False
        self.message: str | None = None


async def execute_session(
    lease: services.Lease, *, should_stop: Callable[[], str | None] | None = None
) -> str:
    """Run one claimed session to its end; returns the status it ended with.

    A keeper beside the run renews the lease (the heartbeat) and checks it every
    ``TARSY_LEASE_CHECK_INTERVAL``: once the lease is lost, the run is cancelled — its LLM
    stream and MCP calls close — and nothing more is written. ``should_stop`` is polled
    too; a reason from it ends the session failed with that reason.
    """
    stop = _Stop()
    run = asyncio.create_task(_run_session(lease, stop), name=f"session-{lease.session_id}")
    keeper = asyncio.create_task(_keep_lease(lease, run, stop, should_stop), name="lease-keeper")
    try:
        return await run
    except asyncio.CancelledError:
        if not (stop.lease_lost or stop.message):
            raise
        # Stopped while it was writing its end: that write finishes in its thread anyway.
        return LEASE_LOST if stop.lease_lost else SessionStatus.FAILED
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _keep_lease(
    lease: services.Lease,
    run: asyncio.Task[str],
    stop: _Stop,
    should_stop: Callable[[], str | None] | None,
) -> None:
    last_beat = time.monotonic()
    while True:
        await asyncio.sleep(settings.TARSY_LEASE_CHECK_INTERVAL)
        if should_stop is not None and (reason := should_stop()):
            stop.message = reason
            run.cancel()
            return
        try:
            if time.monotonic() - last_beat >= settings.TARSY_HEARTBEAT_INTERVAL:
                await db(services.session_heartbeat)(lease=lease)
                last_beat = time.monotonic()
            elif await db(services.session_lease_status)(lease=lease) is None:
                raise services.LeaseLost(lease)
        except services.LeaseLost:
            stop.lease_lost = True
            run.cancel()
            return
        except DatabaseError as exc:
            # A database hiccup is not a lost lease; the next check tries again.
            logger.warning("session %s: lease check failed: %s", lease.session_id, exc)


async def _run_session(lease: services.Lease, stop: _Stop) -> str:
    session = await db(AlertSession.objects.get)(id=lease.session_id)
    try:
        try:
            async with asyncio.timeout(settings.TARSY_SESSION_TIMEOUT):
                final_analysis = await _run_chain(session, lease)
        except TimeoutError:
            message = (
                f"The session exceeded its timeout of {int(settings.TARSY_SESSION_TIMEOUT)} s."
            )
            return await _end(lease, SessionStatus.TIMED_OUT, message)
        except asyncio.CancelledError:
            if stop.lease_lost:
                raise services.LeaseLost(lease) from None
            if stop.message is None:
                raise  # cancelled by whoever runs us: not ours to record
            asyncio.current_task().uncancel()
            return await _end(lease, SessionStatus.FAILED, stop.message)
        except StageFailed as failure:
            return await _end(lease, SessionStatus.FAILED, str(failure), explain=False)
        except SessionFailure as failure:
            return await _end(lease, SessionStatus.FAILED, str(failure))
        except services.LeaseLost:
            raise
        except Exception as exc:
            logger.exception("session %s crashed", lease.session_id)
            message = f"Internal error: {type(exc).__name__}: {exc}"
            return await _end(lease, SessionStatus.FAILED, message)
        await db(services.session_end)(
            lease=lease, status=SessionStatus.COMPLETED, final_analysis=final_analysis
        )
        return SessionStatus.COMPLETED
    except services.LeaseLost:
        # Reaped, timed out or cancelled elsewhere: whoever took the lease has written
        # the ending. Write nothing, stop.
        logger.warning("session %s: lease lost; this worker stops here", lease.session_id)
        return LEASE_LOST


async def _end(
    lease: services.Lease, status: SessionStatus, message: str, *, explain: bool = True
) -> str:
    await db(services.session_end)(
        lease=lease, status=status, error_message=message, explain=explain
    )
    return status


async def _run_chain(session: AlertSession, lease: services.Lease) -> str:
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
        stage = await db(services.stage_start)(lease=lease, name=stage_config.name, index=index)
        # An exception leaves the stage open; session_end closes it with the session's status.
        result = await _run_stage(config, chain, stage_config, stage, session, lease, previous)
        await db(services.stage_finish)(
            lease=lease, stage=stage, status=result.status, error_message=result.error
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
    lease: services.Lease,
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
        lease=lease,
        stage=stage,
        agent_name=agent.agent_name,
        agent_index=1,
        llm_backend=choice.backend,
        llm_provider=choice.config.name,
        model_name=choice.config.model,
    )
    recorder = Recorder(session, execution, lease)
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
        # The message quotes the server's stderr, which may hold its configuration.
        message = mask_text(str(exc))
        result = AgentResult(ExecutionStatus.FAILED, error=message)
        await recorder.add_item(TimelineEventType.ERROR, message, status=TimelineEventStatus.FAILED)
    # An exception leaves the execution open; session_end closes it with the session's status.
    await db(services.execution_finish)(
        lease=lease,
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
