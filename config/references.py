"""What tarsy.yaml names of itself (agents, MCP servers, alert types), checked when the
file loads by ``TarsyFile``'s validator; and what loads but may not do what was meant
(warnings). What it names outside itself (LLM providers) is checked by ``manage.py
check`` (agents/checks.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from config.fields import Loc, Problem
from config.types import ITERATING_TYPES, QUEUE_NOT_APPLIED, SCORING, SYNTHESIS

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
        if chain.scoring is not None:
            check_servers((*at, "scoring", "mcp_servers"), chain.scoring.mcp_servers)
        for stage_index, stage in enumerate(chain.stages):
            check_servers((*at, "stages", stage_index, "mcp_servers"), stage.mcp_servers)
            for entry_loc, entry in stage.entries:
                loc = (*at, "stages", stage_index, *entry_loc)
                if entry.name not in agents:
                    defined = ", ".join(agents) or "none"
                    problems.append(
                        ((*loc, "name"), f"unknown agent {entry.name!r}; defined: {defined}")
                    )
                elif entry.type is not None and entry.type != agents[entry.name].type:
                    kind = agents[entry.name].type or "investigation"
                    message = f"agent {entry.name!r} is of type {kind!r}"
                    problems.append(((*loc, "type"), message))
                check_servers((*loc, "mcp_servers"), entry.mcp_servers)
        problems += _agent_kinds(at, chain, agents, servers)
    scoring_agent = file.defaults.scoring.agent
    if scoring_agent and agents.get(scoring_agent, None) is None:
        message = f"unknown agent {scoring_agent!r}; defined: {', '.join(agents)}"
        problems.append((("defaults", "scoring", "agent"), message))
    check_servers(("defaults", "scoring", "mcp_servers"), file.defaults.scoring.mcp_servers)
    alert_type = file.defaults.alert_type
    if alert_type not in handled_by:
        known = ", ".join(sorted(handled_by))
        message = f"no chain handles alert type {alert_type!r}; chains handle: {known}"
        problems.append((("defaults", "alert_type"), message))
    return problems


def _agent_kinds(
    at: Loc, chain: ChainSchema, agents: Mapping[str, AgentSchema], servers: Mapping[str, object]
) -> list[Problem]:
    """The agents a chain names for a role are of the kind the role needs."""
    problems: list[Problem] = []

    def check_role(loc: Loc, name: str, kinds: tuple[str, ...], kind: str, role: str) -> None:
        agent = agents.get(name)
        if agent is None or agent.type not in kinds:
            known = ", ".join(sorted(n for n, a in agents.items() if a.type in kinds))
            problems.append((loc, f"{name!r} is not {kind} agent; {role} agents: {known}"))

    chat = chain.chat
    check_role((*at, "chat", "agent"), chat.agent, ITERATING_TYPES, "an iterating", "chat")
    if chain.scoring is not None and chain.scoring.agent:
        agent = chain.scoring.agent
        check_role((*at, "scoring", "agent"), agent, (SCORING,), "a scoring", "scoring")
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
            for server_index, server in enumerate(ref.mcp_servers or ()):
                if server not in servers:
                    defined = ", ".join(servers) or "none"
                    message = f"unknown MCP server {server!r}; defined: {defined}"
                    problems.append(((*loc, index, "mcp_servers", server_index), message))
    return problems


def _sub_agent_problem(name: str, agents: Mapping[str, AgentSchema]) -> str | None:
    agent = agents.get(name)
    if agent is None:
        return f"unknown agent {name!r}; defined: {', '.join(agents)}"
    if agent.type not in ITERATING_TYPES:
        return f"{name!r} is a {agent.type} agent; sub-agents iterate with tools"
    return None


def skill_problems(file: TarsyFile, skills: Collection[str]) -> list[Problem]:
    """Skills named that the config directory's skills/ does not define (with none
    defined at all, a warning instead: file_warnings)."""
    if not skills:
        return []
    defined = ", ".join(sorted(skills))
    return [
        ((*loc, index), f"unknown skill {name!r}; defined: {defined}")
        for loc, names in _skill_refs(file)
        for index, name in enumerate(names)
        if name not in skills
    ]


def _skill_refs(file: TarsyFile) -> Iterator[tuple[Loc, tuple[str, ...]]]:
    """Every list of skill names: agents', stage agents' and sub-agent references'."""
    for name, agent in file.agents.items():
        yield ("agents", name, "skills"), agent.skills or ()
        yield ("agents", name, "required_skills"), agent.required_skills
    for chain_id, chain in file.agent_chains.items():
        for index, stage in enumerate(chain.stages):
            for loc, entry in stage.entries:
                at: Loc = ("agent_chains", chain_id, "stages", index, *loc)
                yield (*at, "skills"), entry.skills or ()
                yield (*at, "required_skills"), entry.required_skills
    for loc, refs in _sub_agent_refs(file):
        for index, ref in enumerate(refs):
            yield (*loc, index, "skills"), ref.skills or ()
            yield (*loc, index, "required_skills"), ref.required_skills


def file_warnings(file: TarsyFile, skills: Collection[str] = ()) -> list[Problem]:
    """What loads but may not do what was meant: said by ``manage.py check`` and the
    System page, never a reason to refuse the file (TARSy accepts all of it)."""
    warnings: list[Problem] = []
    for loc, refs in _sub_agent_refs(file):
        for index, ref in enumerate(refs):
            agent = file.agents.get(ref.name)
            if agent is not None and not agent.description:
                message = (
                    f"agent {ref.name!r} has no description, so it is left out of the "
                    "sub-agents offered (the dispatching agent chooses by description); "
                    "give it one"
                )
                warnings.append(((*loc, index), message))
    if not skills:
        message = "no skills are defined (no skill file under skills/), so this names none"
        warnings += [(loc, message) for loc, names in _skill_refs(file) if names]
    if file.system.holidays:
        warnings.append((("system", "holidays"), UNBUILT.format(what="the calendar context")))
    for key, why in QUEUE_NOT_APPLIED.items():
        if getattr(file.queue, key) is not None:
            warnings.append((("queue", key), f"accepted, not applied: {why}"))
    cost = file.system.cost_estimation
    if not (cost.enabled and cost.model_rates):
        message = (
            "a cost limit needs the models' rates (system.cost_estimation.model_rates); "
            "without them calls cost nothing and this limit is never reached"
        )
        warnings += [(loc, message) for loc in _cost_limits(file)]
    return warnings


def _cost_limits(file: TarsyFile) -> Iterator[Loc]:
    budget = file.defaults.budget
    if budget.cost_usd is not None:
        yield ("defaults", "budget", "cost_usd")
    for alert_type, own in budget.alert_types.items():
        if own.cost_usd is not None:
            yield ("defaults", "budget", "alert_types", alert_type, "cost_usd")
    for chain_id, chain in file.agent_chains.items():
        if chain.budget.cost_usd is not None:
            yield ("agent_chains", chain_id, "budget", "cost_usd")


UNBUILT = "accepted; {what} is not built in this version yet, so this has no effect"


def _sub_agent_refs(file: TarsyFile) -> Iterator[tuple[Loc, tuple[SubAgentSchema, ...]]]:
    for chain_id, chain in file.agent_chains.items():
        at: Loc = ("agent_chains", chain_id)
        yield (*at, "sub_agents"), chain.sub_agents or ()
        yield (*at, "chat", "sub_agents"), chain.chat.sub_agents or ()
        for index, stage in enumerate(chain.stages):
            yield (*at, "stages", index, "sub_agents"), stage.sub_agents or ()
            for loc, entry in stage.entries:
                yield (*at, "stages", index, *loc, "sub_agents"), entry.sub_agents or ()
