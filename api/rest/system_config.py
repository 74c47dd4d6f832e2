"""``GET /system/config`` and ``/system/default-tools``: what the running instance uses,
in TARSy's shapes (TARSY-GO-NEWER §5).

The configuration view is an allowlist: each key below is written out on purpose, so a
field added to the configuration later is not shown until someone decides it may be.
Secrets never leave the process: a token is ``bearer_token_set``, an environment or a
header map is its sorted keys, stdio arguments are ``["***"]``, a URL keeps its scheme,
host, port and path, and a command that looks like a secret is ``***``. Durations are
strings (``40m``), maps are sorted and an empty map is ``{}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings

from agents.resolver import stage_agent_settings
from config.providers import BUILT_IN, provider_rows
from config.types import (
    ChainConfig,
    FallbackProvider,
    HttpTransport,
    MCPServerConfig,
    OrchestratorConfig,
    StageConfig,
    SubAgentRef,
    TarsyConfig,
)
from llm.types import NATIVE_TOOLS
from masking.shown import HIDDEN, looks_secret, safe_url


def duration(seconds: float | None) -> str | None:
    """``2400`` → ``40m``, ``90`` → ``1m30s``, ``0.5`` → ``500ms`` (Go's way)."""
    if seconds is None:
        return None
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or hours else "")
    return text + (f"{secs}s" if secs or not text else "")


def _sorted(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: mapping[key] for key in sorted(mapping)}


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


def _fallbacks(entries: Iterable[FallbackProvider] | None) -> list[dict[str, Any]] | None:
    if entries is None:
        return None
    return [_without_none({"provider": e.provider, "backend": e.backend}) for e in entries]


def _orchestrator(config: OrchestratorConfig | None) -> dict[str, Any] | None:
    if config is None:
        return None
    return _without_none(
        {
            "max_concurrent_agents": config.max_concurrent_agents,
            "agent_timeout": duration(config.agent_timeout),
            "max_budget": duration(config.max_budget),
        }
    )


def _sub_agents(refs: Iterable[SubAgentRef] | None) -> list[dict[str, Any]] | None:
    if refs is None:
        return None
    return [
        _without_none(
            {
                "name": ref.name,
                "llm_provider": ref.llm_provider,
                "llm_backend": ref.llm_backend,
                "max_iterations": ref.max_iterations,
                "mcp_servers": list(ref.mcp_servers) if ref.mcp_servers is not None else None,
                "skills": list(ref.skills) if ref.skills is not None else None,
                "required_skills": list(ref.required_skills) or None,
            }
        )
        for ref in refs
    ]


def _list(values: Iterable[str] | None) -> list[str] | None:
    return list(values) if values is not None else None


def _transport(server: MCPServerConfig) -> dict[str, Any]:
    transport = server.transport
    if isinstance(transport, HttpTransport):
        return _without_none(
            {
                "type": transport.type,
                "url": safe_url(transport.url),
                "bearer_token_set": bool(transport.bearer_token or transport.bearer_token_env),
                "verify_ssl": transport.verify_ssl,
                "timeout": transport.timeout,
                "custom_header_keys": sorted(transport.headers) or None,
                "session_cleanup_url": safe_url(transport.session_cleanup_url) or None,
            }
        )
    return _without_none(
        {
            "type": transport.type,
            "command": HIDDEN if looks_secret(transport.command) else transport.command,
            "args": [HIDDEN] if transport.args else None,
            "env_keys": sorted(transport.env) or None,
            "bearer_token_set": False,
        }
    )


def _server(server: MCPServerConfig) -> dict[str, Any]:
    masking = server.data_masking
    summarization = server.summarization
    return _without_none(
        {
            "transport": _transport(server),
            "instructions": server.instructions or None,
            "data_masking": None
            if masking is None
            else {
                "enabled": masking.enabled,
                "pattern_groups": list(masking.pattern_groups),
                "patterns": list(masking.patterns),
                # Custom patterns are the operator's own regexes: shown by description.
                "custom_patterns": [
                    {"description": p.description, "replacement": p.replacement}
                    for p in masking.custom_patterns
                ],
            },
            "summarization": _without_none(
                {
                    "enabled": summarization.enabled,
                    "size_threshold_tokens": summarization.size_threshold_tokens,
                    "summary_max_token_limit": summarization.summary_max_token_limit,
                    "llm_provider": summarization.llm_provider,
                    "llm_backend": summarization.llm_backend,
                }
            ),
        }
    )


def _stage(stage: StageConfig) -> dict[str, Any]:
    synthesis = stage.synthesis
    return _without_none(
        {
            "name": stage.name,
            "agents": [
                _without_none(
                    {
                        "name": agent.name,
                        "type": agent.type,
                        "llm_provider": agent.llm_provider,
                        "llm_backend": agent.llm_backend,
                        "max_iterations": agent.max_iterations,
                        "mcp_servers": _list(agent.mcp_servers),
                        "sub_agents": _sub_agents(agent.sub_agents),
                        "fallback_providers": _fallbacks(agent.fallback_providers),
                        "required_skills": list(agent.required_skills) or None,
                        "skills": _list(agent.skills),
                    }
                )
                for agent in stage.agents
            ],
            "replicas": stage.replicas,
            "success_policy": stage.success_policy,
            "max_iterations": stage.max_iterations,
            "mcp_servers": _list(stage.mcp_servers),
            "fallback_providers": _fallbacks(stage.fallback_providers),
            "sub_agents": _sub_agents(stage.sub_agents),
            "synthesis": None
            if synthesis is None
            else _without_none(
                {
                    "agent": synthesis.agent,
                    "llm_provider": synthesis.llm_provider,
                    "llm_backend": synthesis.llm_backend,
                }
            ),
        }
    )


def _chain(chain: ChainConfig) -> dict[str, Any]:
    chat, scoring = chain.chat, chain.scoring
    return _without_none(
        {
            "alert_types": list(chain.alert_types),
            "description": chain.description,
            "stages": [_stage(stage) for stage in chain.stages],
            "chat": _without_none(
                {
                    "enabled": chat.enabled,
                    "agent": chat.agent,
                    "llm_provider": chat.llm_provider,
                    "llm_backend": chat.llm_backend,
                    "mcp_servers": _list(chat.mcp_servers),
                    "max_iterations": chat.max_iterations,
                    "sub_agents": _sub_agents(chat.sub_agents),
                }
            ),
            "scoring": _without_none(
                {
                    "enabled": scoring.enabled,
                    "agent": scoring.agent,
                    "llm_provider": scoring.llm_provider,
                    "llm_backend": scoring.llm_backend,
                    "mcp_servers": _list(scoring.mcp_servers),
                    "max_iterations": scoring.max_iterations,
                }
            ),
            "llm_provider": chain.llm_provider,
            "executive_summary_provider": chain.executive_summary_provider,
            "llm_backend": chain.llm_backend,
            "fallback_providers": _fallbacks(chain.fallback_providers),
            "max_iterations": chain.max_iterations,
            "mcp_servers": _list(chain.mcp_servers),
            "sub_agents": _sub_agents(chain.sub_agents),
        }
    )


def _native_tool_map(tools: Iterable[str]) -> dict[str, bool]:
    enabled = set(tools)
    return {tool: tool in enabled for tool in NATIVE_TOOLS}


def system_config(config: TarsyConfig) -> dict[str, Any]:
    defaults, system = config.defaults, config.system
    queue = config.queue
    agents = {
        name: _without_none(
            {
                "type": agent.type or None,
                "description": agent.description,
                "mcp_servers": list(agent.mcp_servers),
                "custom_instructions": agent.custom_instructions,
                "llm_backend": agent.llm_backend,
                "max_iterations": agent.max_iterations,
                "native_tools": agent.native_tool_switches
                or (_native_tool_map(agent.native_tools) if agent.native_tools else None),
                "orchestrator": _orchestrator(agent.orchestrator),
                "skills": _list(agent.skills),
                "required_skills": list(agent.required_skills) or None,
            }
        )
        for name, agent in config.agents.items()
    }
    providers = {
        row.name: _without_none(
            {
                "type": row.type,
                "model": row.model,
                "api_key_env": row.api_key_env or None,
                "project_env": row.project_env or None,
                "location_env": row.location_env or None,
                "base_url": safe_url(row.base_url) or None,
                "native_tools": _native_tool_map(row.native_tools or ())
                if row.native_tools
                else None,
                "source": row.source,
            }
        )
        for row in provider_rows(config)
        if row.source != BUILT_IN or row.name in _named_providers(config)
    }
    return {
        "defaults": _without_none(
            {
                "llm_provider": defaults.llm_provider,
                "max_iterations": defaults.max_iterations,
                "llm_backend": defaults.llm_backend,
                "fallback_providers": _fallbacks(defaults.fallback_providers),
                "scoring": _without_none(
                    {
                        "enabled": defaults.scoring.enabled,
                        "agent": defaults.scoring.agent,
                        "llm_provider": defaults.scoring.llm_provider,
                        "llm_backend": defaults.scoring.llm_backend,
                    }
                ),
                "summarization": _without_none(
                    {
                        "llm_provider": defaults.summarization_provider,
                        "llm_backend": defaults.summarization_backend,
                    }
                ),
                "success_policy": defaults.success_policy,
                "alert_type": defaults.alert_type,
                "runbook": defaults.runbook or None,
                "alert_masking": {
                    "enabled": defaults.alert_masking.enabled,
                    "pattern_group": defaults.alert_masking.pattern_group,
                },
                "orchestrator": _orchestrator(defaults.orchestrator),
            }
        ),
        # What runs here (the TARSY_* settings), under TARSy's names.
        "queue": {
            "worker_count": settings.Q_CLUSTER["workers"],
            "max_concurrent_sessions": settings.TARSY_MAX_CONCURRENT_SESSIONS,
            "poll_interval": duration(settings.Q_CLUSTER["poll"]),
            "poll_interval_jitter": duration(queue.poll_interval_jitter) or "0s",
            "session_timeout": duration(settings.TARSY_SESSION_TIMEOUT),
            "graceful_shutdown_timeout": duration(settings.TARSY_SHUTDOWN_GRACE),
            "scoring_shutdown_timeout": duration(settings.TARSY_SHUTDOWN_GRACE),
            "orphan_detection_interval": duration(settings.TARSY_RECOVERY_INTERVAL),
            "orphan_threshold": duration(settings.TARSY_ORPHAN_THRESHOLD),
            "heartbeat_interval": duration(settings.TARSY_HEARTBEAT_INTERVAL),
        },
        "system": _without_none(
            {
                "github": {"token_env": system.github_token_env}
                if system.github_token_env
                else None,
                "slack": {
                    "enabled": system.slack.enabled,
                    "token_env": system.slack.token_env,
                    "channel": system.slack.channel,
                },
                "runbooks": {
                    "repo_url": safe_url(system.runbooks.repo_url),
                    "cache_ttl": duration(system.runbooks.cache_ttl),
                    "allowed_domains": list(system.runbooks.allowed_domains),
                },
                "retention": _without_none(
                    {
                        "session_retention_days": system.retention.session_retention_days,
                        "event_ttl": duration(system.retention.event_ttl),
                        "cleanup_interval": duration(system.retention.cleanup_interval),
                    }
                ),
                "dashboard_url": safe_url(system.dashboard_url) or None,
                "allowed_ws_origins": [
                    *system.allowed_ws_origins,
                    *settings.ALLOWED_WS_ORIGINS,
                ],
                "cost_estimation": {
                    "enabled": config.cost_estimation.enabled,
                    "model_rates": _sorted(
                        {
                            model: {
                                "input_per_million": rate.input_per_million,
                                "output_per_million": rate.output_per_million,
                            }
                            for model, rate in config.cost_estimation.model_rates.items()
                        }
                    ),
                },
            }
        ),
        "agents": _sorted(agents),
        "chains": _sorted({chain_id: _chain(c) for chain_id, c in config.chains.items()}),
        "mcp_servers": _sorted({sid: _server(s) for sid, s in config.mcp_servers.items()}),
        "llm_providers": _sorted(providers),
        # Each skill's name and description; its text is /system/config/skills/{name}.
        "skills": {
            name: {"name": skill.name, "description": skill.description}
            for name, skill in sorted(config.skills.items())
        },
    }


def skill_detail(config: TarsyConfig, name: str) -> dict[str, Any] | None:
    skill = config.skills.get(name)
    if skill is None:
        return None
    return {"name": skill.name, "description": skill.description, "body": skill.body}


def _named_providers(config: TarsyConfig) -> set[str]:
    from sessions.selectors.system import provider_references

    return {name for _, name in provider_references(config)}


def default_tools(config: TarsyConfig, alert_type: str | None) -> dict[str, Any]:
    """What the submit form pre-fills: the chain's MCP servers (else those its agents
    use; else every server) and the default provider's Gemini native tools."""
    rows = provider_rows(config)
    named = config.defaults.llm_provider
    provider = next((row for row in rows if named and row.name == named), None)
    if provider is None:
        provider = next((row for row in rows if row.type == "google"), None)
    native = _native_tool_map(provider.native_tools if provider is not None else ())
    servers: set[str] = set()
    chain = config.chain_for_alert_type(alert_type) if alert_type else None
    if chain is not None:
        servers = set(chain.mcp_servers or ())
        if not servers:
            for stage in chain.stages:
                for step in stage.agents:
                    servers |= set(stage_agent_settings(config, chain, stage, step).mcp_servers)
    if not servers:
        servers = set(config.mcp_servers)
    data: dict[str, Any] = {"mcp_servers": sorted(servers), "native_tools": native}
    if alert_type:
        data = {"alert_type": alert_type, **data}
    return data
