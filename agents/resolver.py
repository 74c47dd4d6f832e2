"""The one place that decides how an agent runs.

tarsy.yaml's hierarchy (defaults → agent → chain → stage → stage-agent, later wins),
the LLM provider rows in the database, the backend that drives them, Gemini native
tools, MCP servers, sub-agents and their guardrails all meet here; the executor gets a
``ResolvedAgent`` and looks nothing up itself.

Resolving touches the database (provider rows): call these from a sync context (the
executor uses ``db()``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from config.loader import get_config
from config.providers import default_provider, provider_rows
from config.types import (
    ITERATING_TYPES,
    AgentConfig,
    ChainConfig,
    FallbackProvider,
    MCPServerConfig,
    OrchestratorConfig,
    StageAgentConfig,
    StageConfig,
    SubAgentRef,
    SynthesisConfig,
    TarsyConfig,
)
from llm.base import Provider
from llm.models import BACKENDS_FOR_TYPE, LLMProvider
from llm.registry import get_backend
from llm.types import ProviderConfig

logger = logging.getLogger(__name__)

ADMIN = "Django admin → LLM providers"
# The summary stage, named as TARSy names it (clients find it by name).
EXEC_SUMMARY_STAGE = "Executive Summary"


class ResolutionError(Exception):
    """An agent cannot run as configured; the message says what to fix."""


class ProviderMissing(ResolutionError):
    """The provider is not there (or disabled): admin may still add or enable it."""


@dataclass(frozen=True)
class ProviderChoice:
    """A provider row resolved to the backend that drives it."""

    config: ProviderConfig
    backend: str
    provider: Provider

    def describe(self) -> str:
        return f"{self.config.name!r} ({self.backend}, {self.config.model or 'no model'})"


@dataclass(frozen=True)
class AgentSettings:
    """An agent's tarsy.yaml settings with the hierarchy applied; no database needed."""

    name: str
    type: str
    description: str
    custom_instructions: str
    max_iterations: int
    mcp_servers: tuple[str, ...]
    llm_provider: str | None  # None: the provider marked default in admin
    llm_backend: str | None  # None: the provider type's default backend
    # Whether the backend was chosen with the provider (at its level or a narrower one).
    # A backend inherited from a wider level that cannot drive the provider gives way
    # to the provider type's own (an OpenAI executive_summary_provider under a chain on
    # google-native runs on langchain); a chosen one that cannot is an error.
    backend_pinned: bool = True
    fallback_providers: tuple[FallbackProvider, ...] = ()
    native_tools: tuple[str, ...] | None = None  # None: the provider's own setting
    # The agent's own switches (TARSy's mapping form), over the provider's tools.
    agent_native_tools: dict[str, bool] | None = None
    sub_agents: tuple[SubAgentRef, ...] = ()  # empty: the agent dispatches none
    orchestrator: OrchestratorConfig = dataclasses.field(default_factory=OrchestratorConfig)
    # The alert's ``mcp`` override: its choice of tools per server (None: all of them),
    # and Gemini native tools it turns on or off on top of the providers' own.
    tool_filter: dict[str, frozenset[str]] | None = None
    native_tool_switches: dict[str, bool] | None = None
    # Skills on demand (None: every skill; empty: none) and in the prompt (agents/skills.py).
    skills: tuple[str, ...] | None = None
    required_skills: tuple[str, ...] = ()

    @property
    def iterating(self) -> bool:
        return self.type in ITERATING_TYPES

    @property
    def requires_native_tools(self) -> bool:
        """TARSy's RequiresNativeTools: the agent's own definition turns on a Gemini
        native tool, so a fallback must be google-native too."""
        return bool(self.native_tools) or any((self.agent_native_tools or {}).values())


@dataclass(frozen=True)
class ResolvedAgent:
    """Everything one agent execution needs: its settings, servers and providers."""

    settings: AgentSettings
    servers: dict[str, MCPServerConfig]
    choice: ProviderChoice
    fallbacks: tuple[ProviderChoice, ...] = ()
    # Per MCP server: who summarises its large results; a server missing here uses the
    # agent's provider (ADR-0024's "unset").
    summarizers: dict[str, ProviderChoice] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.settings.name


def _last_set(*values):
    chosen = None
    for value in values:
        if value is not None:
            chosen = value
    return chosen


def _orchestrator(
    config: TarsyConfig, agent: AgentConfig, here: OrchestratorConfig | None = None
) -> OrchestratorConfig:
    defaults, own = config.defaults.orchestrator, agent.orchestrator or OrchestratorConfig()
    here = here or OrchestratorConfig()
    return OrchestratorConfig(
        max_concurrent_agents=here.max_concurrent_agents
        or own.max_concurrent_agents
        or defaults.max_concurrent_agents,
        agent_timeout=here.agent_timeout or own.agent_timeout or defaults.agent_timeout,
        max_budget=here.max_budget or own.max_budget or defaults.max_budget,
    )


def _level(*values) -> int:
    """The index of the last value set (-1: none)."""
    return max((index for index, value in enumerate(values) if value is not None), default=-1)


def stage_agent_settings(
    config: TarsyConfig, chain: ChainConfig, stage: StageConfig, stage_agent: StageAgentConfig
) -> AgentSettings:
    agent = config.agents[stage_agent.name]
    providers = (
        config.defaults.llm_provider,
        agent.llm_provider,
        chain.llm_provider,
        stage_agent.llm_provider,
    )
    backends = (
        config.defaults.llm_backend,
        agent.llm_backend,
        chain.llm_backend,
        stage_agent.llm_backend,
    )
    return AgentSettings(
        name=agent.name,
        type=agent.type,
        description=agent.description,
        custom_instructions=agent.custom_instructions,
        max_iterations=_last_set(
            config.defaults.max_iterations,
            agent.max_iterations,
            chain.max_iterations,
            stage.max_iterations,
            stage_agent.max_iterations,
        ),
        mcp_servers=_last_set(
            agent.mcp_servers, chain.mcp_servers, stage.mcp_servers, stage_agent.mcp_servers
        )
        or (),
        llm_provider=_last_set(*providers),
        llm_backend=_last_set(*backends),
        backend_pinned=_level(*backends) >= _level(*providers),
        fallback_providers=_last_set(
            config.defaults.fallback_providers,
            agent.fallback_providers,
            chain.fallback_providers,
            stage.fallback_providers,
            stage_agent.fallback_providers,
        )
        or (),
        native_tools=agent.native_tools,
        agent_native_tools=agent.native_tool_switches,
        # The most specific list wins: stage-agent, then stage, then chain; of it, the
        # agents with a description (an empty catalog leaves a plain agent, as in TARSy).
        sub_agents=tuple(
            ref
            for ref in next(
                (r for r in (stage_agent.sub_agents, stage.sub_agents, chain.sub_agents) if r), ()
            )
            if config.agents[ref.name].description
        ),
        orchestrator=_orchestrator(config, agent, stage_agent.orchestrator),
        # A stage agent's (or sub-agent reference's) skills add to the agent's own (TARSy:
        # additive, unlike mcp_servers); an agent with every skill keeps every skill.
        skills=agent.skills
        if agent.skills is None or not stage_agent.skills
        else tuple(dict.fromkeys((*agent.skills, *stage_agent.skills))),
        required_skills=tuple(
            dict.fromkeys((*agent.required_skills, *stage_agent.required_skills))
        ),
    )


def synthesis_settings(
    config: TarsyConfig, chain: ChainConfig, stage: StageConfig
) -> AgentSettings:
    synthesis = stage.synthesis or SynthesisConfig()
    step = StageAgentConfig(
        name=synthesis.agent,
        llm_provider=synthesis.llm_provider,
        llm_backend=synthesis.llm_backend,
    )
    return dataclasses.replace(
        stage_agent_settings(config, chain, stage, step), **NO_TOOLS_OR_SKILLS
    )


def exec_summary_settings(config: TarsyConfig, chain: ChainConfig) -> AgentSettings:
    step = StageAgentConfig(name="ExecSummaryAgent", llm_provider=chain.executive_summary_provider)
    summary_stage = StageConfig(name=EXEC_SUMMARY_STAGE, agents=(step,))
    return dataclasses.replace(
        stage_agent_settings(config, chain, summary_stage, step), **NO_TOOLS_OR_SKILLS
    )


# Synthesis and the executive summary read what others found: no tools, no skills.
NO_TOOLS_OR_SKILLS: dict[str, Any] = {
    "mcp_servers": (),
    "sub_agents": (),
    "skills": (),
    "required_skills": (),
}


def sub_agent_settings(config: TarsyConfig, chain: ChainConfig, ref: SubAgentRef) -> AgentSettings:
    """A dispatched agent: its own definition under the chain, the ref's iteration cap.
    Depth is one: it dispatches nothing itself."""
    step = StageAgentConfig(
        name=ref.name,
        max_iterations=ref.max_iterations,
        llm_provider=ref.llm_provider,
        llm_backend=ref.llm_backend,
        mcp_servers=ref.mcp_servers,
        skills=ref.skills,
        required_skills=ref.required_skills,
    )
    stage = StageConfig(name="sub-agent", agents=(step,))
    return dataclasses.replace(stage_agent_settings(config, chain, stage, step), sub_agents=())


def stage_settings(
    config: TarsyConfig, chain: ChainConfig, stage: StageConfig
) -> list[AgentSettings]:
    """The agents a stage runs: each listed agent, or ``replicas`` copies of one."""
    agents = [stage_agent_settings(config, chain, stage, entry) for entry in stage.agents]
    return agents * stage.replicas


def resolve(config: TarsyConfig, settings: AgentSettings) -> ResolvedAgent:
    """Attach providers and MCP servers; ``ResolutionError`` says what is missing."""
    choice = provider_choice(
        settings.llm_provider, settings.llm_backend, settings.name, pinned=settings.backend_pinned
    )
    fallbacks = []
    for fallback in settings.fallback_providers:
        try:
            fallbacks.append(provider_choice(fallback.provider, fallback.backend, settings.name))
        except ResolutionError as problem:
            # A broken fallback must not stop an agent whose own provider works.
            logger.warning("skipping fallback provider for %s: %s", settings.name, problem)
    if settings.native_tools is not None:
        # The agent's choice of Gemini native tools overrides its providers' rows.
        choice, *fallbacks = [
            dataclasses.replace(
                c, config=dataclasses.replace(c.config, native_tools=settings.native_tools)
            )
            for c in (choice, *fallbacks)
        ]
    if settings.agent_native_tools:
        choice, *fallbacks = [
            _switch_native_tools(c, settings.agent_native_tools) for c in (choice, *fallbacks)
        ]
    if settings.native_tool_switches:
        choice, *fallbacks = [
            _switch_native_tools(c, settings.native_tool_switches) for c in (choice, *fallbacks)
        ]
    servers = {name: config.mcp_servers[name] for name in settings.mcp_servers}
    summarizers = {}
    for server_id, server in servers.items():
        # The server's named provider, else the defaults', else the agent's. A named
        # provider's backend is its own: never the agent's (a Claude summariser must not
        # inherit google-native).
        named = server.summarization.llm_provider
        backend = server.summarization.llm_backend
        if named is None:
            named = config.defaults.summarization_provider
            backend = config.defaults.summarization_backend
        if named is None:
            continue
        try:
            summarizers[server_id] = provider_choice(
                named, backend, f"the summarization of {server_id}"
            )
        except ResolutionError as problem:
            logger.warning("summarizing %s with the agent's provider: %s", server_id, problem)
    return ResolvedAgent(settings, servers, choice, tuple(fallbacks), summarizers)


def _switch_native_tools(choice: ProviderChoice, switches: dict[str, bool]) -> ProviderChoice:
    tools = [t for t in choice.config.native_tools if switches.get(t, True)]
    tools += [t for t, on in switches.items() if on and t not in tools]
    return dataclasses.replace(
        choice, config=dataclasses.replace(choice.config, native_tools=tuple(tools))
    )


def with_alert_selection(settings: AgentSettings, selection: dict) -> AgentSettings:
    """An investigating agent's settings under the alert's ``mcp`` override: its servers
    (and tools) replaced by the alert's, and Gemini native tools as the alert says."""
    servers = tuple(entry["name"] for entry in selection["servers"])
    tool_filter = {
        entry["name"]: frozenset(entry["tools"])
        for entry in selection["servers"]
        if "tools" in entry
    }
    return dataclasses.replace(
        settings,
        mcp_servers=servers,
        tool_filter=tool_filter or None,
        native_tool_switches=selection.get("native_tools"),
    )


def provider_choice(
    name: str | None, backend: str | None, agent_name: str, *, pinned: bool = True
) -> ProviderChoice:
    """``pinned``: the backend was chosen with the provider (AgentSettings.backend_pinned);
    one that was not, and cannot drive it, gives way to the provider type's default."""
    row, backend = pick_provider(
        provider_rows(get_config()), name, backend, agent_name, pinned=pinned
    )
    return ProviderChoice(row.to_config(), backend, get_backend(backend))


def pick_provider(
    rows: Sequence[LLMProvider],
    name: str | None,
    backend: str | None,
    agent_name: str,
    *,
    pinned: bool = True,
) -> tuple[LLMProvider, str]:
    """The provider row and the backend that drives it; ``ResolutionError`` says why
    none can. Pure: ``manage.py check`` asks it of every LLM use before any runs."""
    row = default_provider(name, rows)
    if name:
        if row is None:
            known = ", ".join(sorted(row.name for row in rows)) or "none"
            raise ProviderMissing(
                f"LLM provider {name!r} (used by {agent_name}) does not exist; "
                f"providers: {known}. Add it in {ADMIN} or llm-providers.yaml"
            )
        if not row.enabled:
            raise ProviderMissing(
                f"LLM provider {name!r} (used by {agent_name}) is disabled; enable it in {ADMIN}"
            )
    else:
        if row is None:
            raise ProviderMissing(
                f"No LLM provider is configured: mark one as default in {ADMIN} or set "
                "defaults.llm_provider in tarsy.yaml"
            )
        if not row.enabled:
            raise ProviderMissing(
                f"The default LLM provider {row.name!r} is disabled: enable it, or mark "
                f"another provider as default, in {ADMIN}"
            )
    allowed = BACKENDS_FOR_TYPE[row.type]
    if backend is None or (backend not in allowed and not pinned):
        backend = row.default_backend()
    if backend not in allowed:
        raise ResolutionError(
            f"llm_backend {backend!r} cannot drive provider {row.name!r} of type {row.type!r} "
            f"(used by {agent_name}); allowed: {', '.join(allowed)}"
        )
    return row, backend


def sub_agent_catalog(config: TarsyConfig, settings: AgentSettings) -> list[AgentConfig]:
    """The agents ``settings`` may dispatch, in the order configured: those with a
    description (the dispatching agent chooses by it; ``manage.py check`` warns of the
    rest, as TARSy leaves them out)."""
    agents = (config.agents[ref.name] for ref in settings.sub_agents)
    return [agent for agent in agents if agent.description]
