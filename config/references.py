"""What tarsy.yaml names: of itself (agents, MCP servers, alert types; checked when the
file loads, by ``TarsyFile``'s validator) and outside itself (LLM providers, rows in
Django admin, and backends; checked by ``manage.py check``, which has a database)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from config.fields import Loc, Problem
from config.types import ITERATING_TYPES, SCORING, SYNTHESIS, FallbackProvider, TarsyConfig

if TYPE_CHECKING:
    from config.schema import AgentSchema, ChainSchema, SubAgentSchema, TarsyFile


def file_problems(file: TarsyFile) -> list[Problem]:
    """Every name that points at nothing, or at the wrong kind of thing, with its key."""
    servers, agents = file.mcp_servers, file.agents
    problems: list[Problem] = []

    def check_servers(loc: Loc, names: Iterable[str] | None) -> None:
        for index, name in enumerate(names or ()):
            if name not in servers:
                defined = ", ".join(servers) or "none"
                problems.append(((*loc, index), f"unknown MCP server {name!r}; defined: {defined}"))

    for name, agent in agents.items():
        check_servers(("agents", name, "mcp_servers"), agent.mcp_servers)
    handled_by: dict[str, str] = {}
    for chain_id, chain in file.agent_chains.items():
        at: Loc = ("agent_chains", chain_id)
        for alert_type in chain.alert_types:
            if alert_type in handled_by:
                message = (
                    f"alert type {alert_type!r} is already handled by chain "
                    f"{handled_by[alert_type]!r}"
                )
                problems.append(((*at, "alert_types"), message))
            handled_by.setdefault(alert_type, chain_id)
        check_servers((*at, "mcp_servers"), chain.mcp_servers)
        check_servers((*at, "chat", "mcp_servers"), chain.chat.mcp_servers)
        for stage_index, stage in enumerate(chain.stages):
            for entry_loc, entry in stage.entries:
                loc = (*at, "stages", stage_index, *entry_loc)
                if entry.name not in agents:
                    defined = ", ".join(agents) or "none"
                    problems.append(
                        ((*loc, "name"), f"unknown agent {entry.name!r}; defined: {defined}")
                    )
                check_servers((*loc, "mcp_servers"), entry.mcp_servers)
        problems += _agent_kinds(at, chain, agents)
    alert_type = file.defaults.alert_type
    if alert_type not in handled_by:
        known = ", ".join(sorted(handled_by))
        message = f"no chain handles alert type {alert_type!r}; chains handle: {known}"
        problems.append((("defaults", "alert_type"), message))
    return problems


def _agent_kinds(at: Loc, chain: ChainSchema, agents: Mapping[str, AgentSchema]) -> list[Problem]:
    """The agents a chain names for a role are of the kind the role needs."""
    problems: list[Problem] = []

    def check_role(loc: Loc, name: str, kinds: tuple[str, ...], kind: str, role: str) -> None:
        agent = agents.get(name)
        if agent is None or agent.type not in kinds:
            known = ", ".join(sorted(n for n, a in agents.items() if a.type in kinds))
            problems.append((loc, f"{name!r} is not {kind} agent; {role} agents: {known}"))

    chat, scoring = chain.chat, chain.scoring
    check_role((*at, "chat", "agent"), chat.agent, ITERATING_TYPES, "an iterating", "chat")
    check_role((*at, "scoring", "agent"), scoring.agent, (SCORING,), "a scoring", "scoring")
    refs: list[tuple[Loc, tuple[SubAgentSchema, ...] | None]] = [
        ((*at, "sub_agents"), chain.sub_agents),
        ((*at, "chat", "sub_agents"), chain.chat.sub_agents),
    ]
    for index, stage in enumerate(chain.stages):
        stage_at = (*at, "stages", index)
        if stage.synthesis is not None:
            check_role(
                (*stage_at, "synthesis", "agent"),
                stage.synthesis.agent,
                (SYNTHESIS,),
                "a synthesis",
                "synthesis",
            )
        refs.append(((*stage_at, "sub_agents"), stage.sub_agents))
        refs += [
            ((*stage_at, *loc, "sub_agents"), entry.sub_agents) for loc, entry in stage.entries
        ]
    for loc, sub_agents in refs:
        for index, ref in enumerate(sub_agents or ()):
            problem = _sub_agent_problem(ref.name, agents)
            if problem is not None:
                problems.append(((*loc, index), problem))
    return problems


def _sub_agent_problem(name: str, agents: Mapping[str, AgentSchema]) -> str | None:
    agent = agents.get(name)
    if agent is None:
        return f"unknown agent {name!r}; defined: {', '.join(agents)}"
    if agent.type not in ITERATING_TYPES:
        return f"{name!r} is a {agent.type} agent; sub-agents iterate with tools"
    if not agent.description:
        return (
            f"agent {name!r} has no description; the dispatching agent chooses sub-agents "
            "by their description, so give it one"
        )
    return None


class _Level(Protocol):
    """Settings that may name an LLM provider and a backend."""

    @property
    def llm_provider(self) -> str | None: ...
    @property
    def llm_backend(self) -> str | None: ...


# Where tarsy.yaml names a provider and a backend: (key, provider, key, backend).
_Named = tuple[str, str | None, str, str | None]


def _named_providers(config: TarsyConfig) -> Iterator[_Named]:
    def level(
        key: str, node: _Level, fallbacks: tuple[FallbackProvider, ...] | None = None
    ) -> Iterator[_Named]:
        yield f"{key}.llm_provider", node.llm_provider, f"{key}.llm_backend", node.llm_backend
        for index, fallback in enumerate(fallbacks or ()):
            item = f"{key}.fallback_providers[{index}]"
            yield f"{item}.provider", fallback.provider, f"{item}.backend", fallback.backend

    defaults = config.defaults
    yield from level("defaults", defaults, defaults.fallback_providers)
    yield (
        "defaults.summarization.llm_provider",
        defaults.summarization_provider,
        "defaults.summarization.llm_backend",
        defaults.summarization_backend,
    )
    for server in config.mcp_servers.values():
        yield from level(f"mcp_servers.{server.id}.summarization", server.summarization)
    for agent in config.agents.values():
        yield from level(f"agents.{agent.name}", agent, agent.fallback_providers)
    for chain in config.chains.values():
        chain_key = f"agent_chains.{chain.id}"
        yield from level(chain_key, chain, chain.fallback_providers)
        for stage_index, stage in enumerate(chain.stages):
            stage_key = f"{chain_key}.stages[{stage_index}]"
            for index, step in enumerate(stage.agents):
                yield from level(f"{stage_key}.agents[{index}]", step, step.fallback_providers)
            if stage.synthesis is not None:
                yield from level(f"{stage_key}.synthesis", stage.synthesis)
        yield from level(f"{chain_key}.chat", chain.chat)
        yield from level(f"{chain_key}.scoring", chain.scoring)
        summary_key = f"{chain_key}.executive_summary_provider"
        yield summary_key, chain.executive_summary_provider, "", None


def validate_references(
    config: TarsyConfig,
    *,
    provider_names: set[str],
    has_default_provider: bool,
    backend_names: list[str],
) -> list[str]:
    """Check what tarsy.yaml names outside itself: providers (admin rows) and backends.
    ``has_default_provider``: whether an enabled default provider exists
    (``config.providers.default_provider``)."""
    problems = []
    where = config.source
    for provider_key, provider, backend_key, backend in _named_providers(config):
        if provider is not None and provider not in provider_names:
            known = ", ".join(sorted(provider_names)) or "none (add one in Django admin)"
            problems.append(
                f"{where}: {provider_key}: unknown provider {provider!r}; "
                f"enabled providers: {known}"
            )
        if backend is not None and backend not in backend_names:
            problems.append(
                f"{where}: {backend_key}: unknown backend {backend!r}; "
                f"allowed: {', '.join(backend_names)}"
            )
    if config.defaults.llm_provider is None and not has_default_provider:
        problems.append(
            f"{where}: defaults.llm_provider is not set and no LLM provider is marked "
            "default in Django admin; set one of them"
        )
    return problems
