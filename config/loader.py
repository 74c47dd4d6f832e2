"""Load and validate tarsy.yaml.

Every mistake stops start-up with a message naming the file, the key and what is
allowed, e.g. ``tarsy.yaml: agents.KubernetesAgent.mcp_servers[0]: unknown MCP server
'k8s'; defined: kubernetes``.
"""

from __future__ import annotations

import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from config.builtin import (
    CHAT_INSTRUCTIONS,
    EXEC_SUMMARY_INSTRUCTIONS,
    SCORING_INSTRUCTIONS,
    SYNTHESIS_INSTRUCTIONS,
)
from config.types import (
    ACTION,
    EXEC_SUMMARY,
    INVESTIGATION,
    ITERATING_TYPES,
    SCORING,
    SESSION_ID_PLACEHOLDER,
    SUCCESS_POLICIES,
    SYNTHESIS,
    AgentConfig,
    ChainConfig,
    ChatConfig,
    CostEstimation,
    CustomPattern,
    DataMasking,
    Defaults,
    FallbackProvider,
    HttpTransport,
    MCPServerConfig,
    ModelRate,
    OrchestratorConfig,
    RunbooksConfig,
    ScoringConfig,
    SlackConfig,
    StageAgentConfig,
    StageConfig,
    StdioTransport,
    SubAgentRef,
    Summarization,
    SynthesisConfig,
    SystemConfig,
    TarsyConfig,
)
from llm.types import NATIVE_TOOLS
from masking.bounded import UnsafeInput, load_yaml
from masking.patterns import KNOWN_PATTERNS, PATTERN_GROUPS

AGENT_TYPES = {
    INVESTIGATION: "iterating investigation agent with tools (the default)",
    ACTION: "iterating agent that may change things, with a safety preamble",
    SYNTHESIS: "one call, no tools: merges a parallel stage's findings",
    EXEC_SUMMARY: "one call, no tools: the session's executive summary",
    SCORING: "one call, no tools: rates an investigation",
}
# Agents every configuration has; a tarsy.yaml entry of the same name replaces one.
BUILTIN_AGENTS = {
    "SynthesisAgent": AgentConfig(
        name="SynthesisAgent",
        type=SYNTHESIS,
        description="Merges the findings of agents that investigated in parallel.",
        custom_instructions=SYNTHESIS_INSTRUCTIONS,
    ),
    "ExecSummaryAgent": AgentConfig(
        name="ExecSummaryAgent",
        type=EXEC_SUMMARY,
        description="Writes the executive summary of an investigation.",
        custom_instructions=EXEC_SUMMARY_INSTRUCTIONS,
    ),
    "ChatAgent": AgentConfig(
        name="ChatAgent",
        description="Answers follow-up questions about an ended investigation, with its tools.",
        custom_instructions=CHAT_INSTRUCTIONS,
    ),
    "ScoringAgent": AgentConfig(
        name="ScoringAgent",
        type=SCORING,
        description="Scores the quality of a completed investigation.",
        custom_instructions=SCORING_INSTRUCTIONS,
    ),
}
# The tool namespace of sub-agent dispatch (orchestrator.dispatch_agent, …).
ORCHESTRATOR_SERVER = "orchestrator"
TOP_LEVEL_KEYS = {"defaults", "mcp_servers", "agents", "agent_chains", "system"}
DEFAULTS_KEYS = {
    "alert_type",
    "max_iterations",
    "llm_provider",
    "llm_backend",
    "fallback_providers",
    "success_policy",
    "orchestrator",
    "summarization",
    "runbook",
}
DEFAULT_SUMMARIZATION_KEYS = {"llm_provider", "llm_backend"}
ORCHESTRATOR_KEYS = {"max_concurrent_agents", "agent_timeout", "max_budget"}
SYNTHESIS_KEYS = {"agent", "llm_provider", "llm_backend"}
SUB_AGENT_KEYS = {"name", "max_iterations"}
SYSTEM_KEYS = {"cost_estimation", "dashboard_url", "github", "runbooks", "slack"}
GITHUB_KEYS = {"token_env"}
RUNBOOKS_KEYS = {"repo_url", "cache_ttl", "allowed_domains", "max_bytes"}
SLACK_KEYS = {"enabled", "token_env", "channel", "api_url"}
CHAT_KEYS = {
    "enabled",
    "agent",
    "llm_provider",
    "llm_backend",
    "mcp_servers",
    "max_iterations",
    "sub_agents",
}
SCORING_KEYS = {"enabled", "agent", "llm_provider", "llm_backend"}
COST_KEYS = {"enabled", "model_rates"}
RATE_KEYS = {"input_per_million", "output_per_million"}
FALLBACK_KEYS = {"provider", "backend"}
MCP_SERVER_KEYS = {
    "transport",
    "instructions",
    "init_timeout",
    "call_timeout",
    "data_masking",
    "summarization",
}
STDIO_KEYS = {"type", "command", "args", "env"}
HTTP_KEYS = {"type", "url", "bearer_token_env", "headers", "verify_ssl", "timeout"}
TRANSPORT_TYPES = ("stdio", "http", "sse")
MASKING_KEYS = {"enabled", "pattern_groups", "patterns", "custom_patterns"}
CUSTOM_PATTERN_KEYS = {"pattern", "replacement", "description"}
SUMMARIZATION_KEYS = {
    "enabled",
    "size_threshold_tokens",
    "summary_max_token_limit",
    "llm_provider",
    "llm_backend",
}
AGENT_KEYS = {
    "type",
    "description",
    "mcp_servers",
    "custom_instructions",
    "max_iterations",
    "llm_backend",
    "llm_provider",
    "fallback_providers",
    "native_tools",
    "orchestrator",
}
CHAIN_KEYS = {
    "alert_types",
    "description",
    "stages",
    "llm_provider",
    "llm_backend",
    "max_iterations",
    "mcp_servers",
    "fallback_providers",
    "executive_summary_provider",
    "sub_agents",
    "chat",
    "scoring",
}
STAGE_KEYS = {
    "name",
    "agents",
    "agent",
    "max_iterations",
    "replicas",
    "success_policy",
    "synthesis",
    "sub_agents",
}
STAGE_AGENT_KEYS = {
    "name",
    "llm_provider",
    "llm_backend",
    "max_iterations",
    "mcp_servers",
    "fallback_providers",
    "sub_agents",
}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

_TEMPLATE_RE = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class ConfigError(ValueError):
    pass


# A tarsy.yaml is a few KiB; a file far larger (or deeper) is not one.
CONFIG_CHARS = 4 * 1024 * 1024


def load_config(path: str | Path) -> TarsyConfig:
    path = Path(path)
    try:
        raw = load_yaml(path.read_text(), what=str(path), max_chars=CONFIG_CHARS)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found (set TARSY_CONFIG to a tarsy.yaml)") from None
    except UnsafeInput as exc:
        raise ConfigError(f"{exc}: is this the right file?") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return _Parser(path.name).parse(raw or {})


@cache
def get_config() -> TarsyConfig:
    return load_config(settings.TARSY_CONFIG)


def validate_references(
    config: TarsyConfig,
    *,
    provider_names: set[str],
    has_default_provider: bool,
    backend_names: list[str],
) -> list[str]:
    """Check what tarsy.yaml names outside itself: providers (admin rows) and backends."""
    problems = []
    where = config.source

    def check(provider_key: str, provider: str | None, backend_key: str, backend: str | None):
        if provider is not None and provider not in provider_names:
            known = ", ".join(sorted(provider_names)) or "none (add one in Django admin)"
            problems.append(
                f"{where}: {provider_key}: unknown provider {provider!r}; enabled providers: {known}"
            )
        if backend is not None and backend not in backend_names:
            problems.append(
                f"{where}: {backend_key}: unknown backend {backend!r}; "
                f"allowed: {', '.join(backend_names)}"
            )

    def check_level(key: str, level) -> None:
        check(f"{key}.llm_provider", level.llm_provider, f"{key}.llm_backend", level.llm_backend)
        for index, fallback in enumerate(level.fallback_providers or ()):
            item = f"{key}.fallback_providers[{index}]"
            check(f"{item}.provider", fallback.provider, f"{item}.backend", fallback.backend)

    check_level("defaults", config.defaults)
    check(
        "defaults.summarization.llm_provider",
        config.defaults.summarization_provider,
        "defaults.summarization.llm_backend",
        config.defaults.summarization_backend,
    )
    for server in config.mcp_servers.values():
        key = f"mcp_servers.{server.id}.summarization"
        summarization = server.summarization
        check(
            f"{key}.llm_provider",
            summarization.llm_provider,
            f"{key}.llm_backend",
            summarization.llm_backend,
        )
    for agent in config.agents.values():
        check_level(f"agents.{agent.name}", agent)
    for chain in config.chains.values():
        check_level(f"agent_chains.{chain.id}", chain)
        for stage_index, stage in enumerate(chain.stages):
            stage_key = f"agent_chains.{chain.id}.stages[{stage_index}]"
            for agent_index, agent in enumerate(stage.agents):
                check_level(f"{stage_key}.agents[{agent_index}]", agent)
            if stage.synthesis is not None:
                check(
                    f"{stage_key}.synthesis.llm_provider",
                    stage.synthesis.llm_provider,
                    f"{stage_key}.synthesis.llm_backend",
                    stage.synthesis.llm_backend,
                )
        for part in ("chat", "scoring"):
            level, key = getattr(chain, part), f"agent_chains.{chain.id}.{part}"
            check(
                f"{key}.llm_provider", level.llm_provider, f"{key}.llm_backend", level.llm_backend
            )
        if chain.executive_summary_provider is not None:
            check(
                f"agent_chains.{chain.id}.executive_summary_provider",
                chain.executive_summary_provider,
                "",
                None,
            )
    if config.defaults.llm_provider is None and not has_default_provider:
        problems.append(
            f"{where}: defaults.llm_provider is not set and no LLM provider is marked "
            "default in Django admin; set one of them"
        )
    return problems


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {message}")

    def mapping(self, value: Any, key: str, allowed: set[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping, got {type(value).__name__}")
        for name in value:
            if name not in allowed:
                raise self.error(
                    f"{key}.{name}" if key else str(name),
                    f"unknown key; allowed: {', '.join(sorted(allowed))}",
                )
        return value

    def string(self, value: Any, key: str, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                raise self.error(key, "is required")
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {type(value).__name__}")
        return self.expand(value, key)

    def expand(self, value: str, key: str, *, keep_session_id: bool = False) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "PYTHON":
                return sys.executable
            if name == "SESSION_ID" and keep_session_id:
                return SESSION_ID_PLACEHOLDER  # filled in per agent execution
            if name not in os.environ:
                raise self.error(key, f"environment variable {name} is not set")
            return os.environ[name]

        return _TEMPLATE_RE.sub(replace, value)

    def positive_int(self, value: Any, key: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(key, f"expected a whole number of at least 1, got {value!r}")
        return value

    def string_list(self, value: Any, key: str) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected a list of strings")
        return tuple(self.expand(v, f"{key}[{i}]") for i, v in enumerate(value))

    def parse(self, raw: Any) -> TarsyConfig:
        root = self.mapping(raw, "", TOP_LEVEL_KEYS)
        mcp_servers = self.parse_mcp_servers(root.get("mcp_servers"))
        agents = {**BUILTIN_AGENTS, **self.parse_agents(root.get("agents"), mcp_servers)}
        chains = self.parse_chains(root.get("agent_chains"), agents, mcp_servers)
        for chain in chains.values():
            self.check_chain_agents(chain, agents)
        defaults = self.parse_defaults(root.get("defaults"), chains)
        system = self.mapping(root.get("system"), "system", SYSTEM_KEYS)
        cost = self.parse_cost_estimation(system.get("cost_estimation"))
        return TarsyConfig(
            self.source, defaults, mcp_servers, agents, chains, cost, self.parse_system(system)
        )

    def boolean(self, value: Any, key: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def parse_system(self, system: dict[str, Any]) -> SystemConfig:
        github = self.mapping(system.get("github"), "system.github", GITHUB_KEYS)
        runbooks = self.mapping(system.get("runbooks"), "system.runbooks", RUNBOOKS_KEYS)
        slack = self.mapping(system.get("slack"), "system.slack", SLACK_KEYS)
        defaults = RunbooksConfig()
        domains = self.string_list(
            runbooks.get("allowed_domains"), "system.runbooks.allowed_domains"
        )
        ttl = self.duration(runbooks.get("cache_ttl"), "system.runbooks.cache_ttl")
        slack_config = SlackConfig(
            enabled=self.boolean(slack.get("enabled"), "system.slack.enabled", False),
            token_env=self.string(slack.get("token_env"), "system.slack.token_env")
            or SlackConfig.token_env,
            channel=self.string(slack.get("channel"), "system.slack.channel") or "",
            api_url=self.string(slack.get("api_url"), "system.slack.api_url") or "",
        )
        if slack_config.enabled and not slack_config.channel:
            raise self.error("system.slack.channel", "is required when Slack is enabled")
        return SystemConfig(
            dashboard_url=(
                self.string(system.get("dashboard_url"), "system.dashboard_url") or ""
            ).rstrip("/"),
            github_token_env=self.string(github.get("token_env"), "system.github.token_env") or "",
            runbooks=RunbooksConfig(
                repo_url=self.string(runbooks.get("repo_url"), "system.runbooks.repo_url") or "",
                cache_ttl=defaults.cache_ttl if ttl is None else ttl,
                allowed_domains=tuple(d.lower() for d in domains)
                if domains is not None
                else defaults.allowed_domains,
                max_bytes=self.positive_int(runbooks.get("max_bytes"), "system.runbooks.max_bytes")
                or defaults.max_bytes,
            ),
            slack=slack_config,
        )

    def parse_chat(self, raw: Any, key: str, servers: dict[str, MCPServerConfig]) -> ChatConfig:
        body = self.mapping(raw, key, CHAT_KEYS)
        mcp = self.string_list(body.get("mcp_servers"), f"{key}.mcp_servers")
        self.check_servers(mcp, f"{key}.mcp_servers", servers)
        return ChatConfig(
            enabled=self.boolean(body.get("enabled"), f"{key}.enabled", True),
            agent=self.string(body.get("agent"), f"{key}.agent") or ChatConfig.agent,
            llm_provider=self.string(body.get("llm_provider"), f"{key}.llm_provider"),
            llm_backend=self.string(body.get("llm_backend"), f"{key}.llm_backend"),
            mcp_servers=mcp,
            max_iterations=self.positive_int(body.get("max_iterations"), f"{key}.max_iterations"),
            sub_agents=self.sub_agents(body.get("sub_agents"), f"{key}.sub_agents"),
        )

    def parse_scoring(self, raw: Any, key: str) -> ScoringConfig:
        body = self.mapping(raw, key, SCORING_KEYS)
        return ScoringConfig(
            enabled=self.boolean(body.get("enabled"), f"{key}.enabled", False),
            agent=self.string(body.get("agent"), f"{key}.agent") or ScoringConfig.agent,
            llm_provider=self.string(body.get("llm_provider"), f"{key}.llm_provider"),
            llm_backend=self.string(body.get("llm_backend"), f"{key}.llm_backend"),
        )

    def fallbacks(self, value: Any, key: str) -> tuple[FallbackProvider, ...] | None:
        """``[gemini, {provider: claude, backend: langchain}]``"""
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(key, "expected a list of providers")
        result = []
        for index, entry in enumerate(value):
            item = f"{key}[{index}]"
            if isinstance(entry, str):
                entry = {"provider": entry}
            entry = self.mapping(entry, item, FALLBACK_KEYS)
            result.append(
                FallbackProvider(
                    provider=self.string(entry.get("provider"), f"{item}.provider", required=True),
                    backend=self.string(entry.get("backend"), f"{item}.backend"),
                )
            )
        return tuple(result)

    def number(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self.error(key, f"expected a number of at least 0, got {value!r}")
        return float(value)

    def parse_cost_estimation(self, raw: Any) -> CostEstimation:
        body = self.mapping(raw, "system.cost_estimation", COST_KEYS)
        enabled = body.get("enabled", True)
        if not isinstance(enabled, bool):
            raise self.error("system.cost_estimation.enabled", "expected true or false")
        rates_raw = body.get("model_rates") or {}
        rates = {}
        for model, rate in self.mapping(
            rates_raw, "system.cost_estimation.model_rates", set(rates_raw)
        ).items():
            key = f"system.cost_estimation.model_rates.{model}"
            rate = self.mapping(rate, key, RATE_KEYS)
            missing = RATE_KEYS - set(rate)
            if missing:
                raise self.error(key, f"missing {', '.join(sorted(missing))}")
            rates[str(model)] = ModelRate(
                input_per_million=self.number(
                    rate["input_per_million"], f"{key}.input_per_million"
                ),
                output_per_million=self.number(
                    rate["output_per_million"], f"{key}.output_per_million"
                ),
            )
        return CostEstimation(enabled=enabled, model_rates=rates)

    def parse_mcp_servers(self, raw: Any) -> dict[str, MCPServerConfig]:
        servers = {}
        for server_id, body in self.mapping(raw, "mcp_servers", set(raw or {})).items():
            key = f"mcp_servers.{server_id}"
            if "." in server_id or "__" in server_id:
                raise self.error(key, "server ids may not contain '.' or '__'")
            if server_id == ORCHESTRATOR_SERVER:
                raise self.error(key, f"{server_id!r} is reserved for sub-agent dispatch tools")
            body = self.mapping(body, key, MCP_SERVER_KEYS)
            servers[server_id] = MCPServerConfig(
                id=server_id,
                transport=self.transport(body.get("transport"), f"{key}.transport"),
                instructions=self.string(body.get("instructions"), f"{key}.instructions") or "",
                init_timeout=self.duration(body.get("init_timeout"), f"{key}.init_timeout") or 30.0,
                call_timeout=self.duration(body.get("call_timeout"), f"{key}.call_timeout") or 90.0,
                data_masking=self.data_masking(body.get("data_masking"), f"{key}.data_masking"),
                summarization=self.summarization(body.get("summarization"), f"{key}.summarization"),
            )
        return servers

    def transport(self, raw: Any, key: str) -> StdioTransport | HttpTransport:
        kind = raw.get("type", "stdio") if isinstance(raw, dict) else "stdio"
        if kind not in TRANSPORT_TYPES:
            raise self.error(
                f"{key}.type",
                f"unsupported transport {kind!r}; allowed: {', '.join(TRANSPORT_TYPES)}",
            )
        if kind == "stdio":
            body = self.mapping(raw, key, STDIO_KEYS)
            env = body.get("env") or {}
            if not isinstance(env, dict):
                raise self.error(f"{key}.env", "expected a mapping of names to values")
            return StdioTransport(
                command=self.string(body.get("command"), f"{key}.command", required=True),
                args=self.string_list(body.get("args"), f"{key}.args") or (),
                env={
                    str(name): self.expand(str(value), f"{key}.env.{name}")
                    for name, value in env.items()
                },
            )
        body = self.mapping(raw, key, HTTP_KEYS)
        url = self.string(body.get("url"), f"{key}.url", required=True)
        if not url.startswith(("http://", "https://")):
            raise self.error(f"{key}.url", f"expected an http:// or https:// URL, got {url!r}")
        headers = body.get("headers") or {}
        if not isinstance(headers, dict):
            raise self.error(f"{key}.headers", "expected a mapping of header names to values")
        verify = body.get("verify_ssl", True)
        if not isinstance(verify, bool):
            raise self.error(f"{key}.verify_ssl", "expected true or false")
        return HttpTransport(
            type=kind,
            url=url,
            bearer_token_env=self.string(body.get("bearer_token_env"), f"{key}.bearer_token_env")
            or "",
            headers={
                str(name): self.expand(str(value), f"{key}.headers.{name}", keep_session_id=True)
                for name, value in headers.items()
            },
            verify_ssl=verify,
            timeout=self.duration(body.get("timeout"), f"{key}.timeout") or 30.0,
        )

    def data_masking(self, raw: Any, key: str) -> DataMasking | None:
        if raw is None:
            return None
        body = self.mapping(raw, key, MASKING_KEYS)
        groups = self.string_list(body.get("pattern_groups"), f"{key}.pattern_groups") or ()
        for index, group in enumerate(groups):
            if group not in PATTERN_GROUPS:
                raise self.error(
                    f"{key}.pattern_groups[{index}]",
                    f"unknown pattern group {group!r}; allowed: {', '.join(PATTERN_GROUPS)}",
                )
        patterns = self.string_list(body.get("patterns"), f"{key}.patterns") or ()
        for index, name in enumerate(patterns):
            if name not in KNOWN_PATTERNS:
                raise self.error(
                    f"{key}.patterns[{index}]",
                    f"unknown pattern {name!r}; allowed: {', '.join(KNOWN_PATTERNS)}",
                )
        custom = []
        for index, entry in enumerate(body.get("custom_patterns") or []):
            item = f"{key}.custom_patterns[{index}]"
            entry = self.mapping(entry, item, CUSTOM_PATTERN_KEYS)
            pattern = self.string(entry.get("pattern"), f"{item}.pattern", required=True)
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.error(
                    f"{item}.pattern", f"not a valid regular expression: {exc}"
                ) from None
            custom.append(
                CustomPattern(
                    pattern=pattern,
                    replacement=self.string(entry.get("replacement"), f"{item}.replacement")
                    or "[MASKED_CUSTOM]",
                    description=self.string(entry.get("description"), f"{item}.description") or "",
                )
            )
        enabled = body.get("enabled", True)
        if not isinstance(enabled, bool):
            raise self.error(f"{key}.enabled", "expected true or false")
        return DataMasking(enabled, groups, patterns, tuple(custom))

    def summarization(self, raw: Any, key: str) -> Summarization:
        body = self.mapping(raw, key, SUMMARIZATION_KEYS)
        enabled = body.get("enabled", True)
        if not isinstance(enabled, bool):
            raise self.error(f"{key}.enabled", "expected true or false")
        defaults = Summarization()
        return Summarization(
            enabled=enabled,
            size_threshold_tokens=self.positive_int(
                body.get("size_threshold_tokens"), f"{key}.size_threshold_tokens"
            )
            or defaults.size_threshold_tokens,
            summary_max_token_limit=self.positive_int(
                body.get("summary_max_token_limit"), f"{key}.summary_max_token_limit"
            )
            or defaults.summary_max_token_limit,
            llm_provider=self.string(body.get("llm_provider"), f"{key}.llm_provider"),
            llm_backend=self.string(body.get("llm_backend"), f"{key}.llm_backend"),
        )

    def check_servers(
        self, names: tuple[str, ...] | None, key: str, servers: dict[str, MCPServerConfig]
    ) -> None:
        for index, name in enumerate(names or ()):
            if name not in servers:
                raise self.error(
                    f"{key}[{index}]",
                    f"unknown MCP server {name!r}; defined: {', '.join(servers) or 'none'}",
                )

    def parse_agents(self, raw: Any, servers: dict[str, MCPServerConfig]) -> dict[str, AgentConfig]:
        agents = {}
        for name, body in self.mapping(raw, "agents", set(raw or {})).items():
            key = f"agents.{name}"
            body = self.mapping(body, key, AGENT_KEYS)
            agent_type = body.get("type") or ""
            if agent_type not in AGENT_TYPES:
                allowed = ", ".join(f"{t!r} ({d})" for t, d in AGENT_TYPES.items())
                raise self.error(
                    f"{key}.type", f"unknown agent type {agent_type!r}; allowed: {allowed}"
                )
            mcp = self.string_list(body.get("mcp_servers"), f"{key}.mcp_servers")
            self.check_servers(mcp, f"{key}.mcp_servers", servers)
            agents[name] = AgentConfig(
                name=name,
                type=agent_type,
                description=self.string(body.get("description"), f"{key}.description") or "",
                mcp_servers=mcp or (),
                custom_instructions=self.string(
                    body.get("custom_instructions"), f"{key}.custom_instructions"
                )
                or "",
                max_iterations=self.positive_int(
                    body.get("max_iterations"), f"{key}.max_iterations"
                ),
                llm_backend=self.string(body.get("llm_backend"), f"{key}.llm_backend"),
                llm_provider=self.string(body.get("llm_provider"), f"{key}.llm_provider"),
                fallback_providers=self.fallbacks(
                    body.get("fallback_providers"), f"{key}.fallback_providers"
                ),
                native_tools=self.native_tools(body.get("native_tools"), f"{key}.native_tools"),
                orchestrator=self.orchestrator(body.get("orchestrator"), f"{key}.orchestrator"),
            )
        return agents

    def orchestrator(self, raw: Any, key: str) -> OrchestratorConfig | None:
        if raw is None:
            return None
        body = self.mapping(raw, key, ORCHESTRATOR_KEYS)
        return OrchestratorConfig(
            max_concurrent_agents=self.positive_int(
                body.get("max_concurrent_agents"), f"{key}.max_concurrent_agents"
            ),
            agent_timeout=self.duration(body.get("agent_timeout"), f"{key}.agent_timeout"),
            max_budget=self.duration(body.get("max_budget"), f"{key}.max_budget"),
        )

    def duration(self, value: Any, key: str) -> float | None:
        """Seconds, from a number or text such as ``90s``, ``10m``, ``1h``."""
        if value is None:
            return None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
        match = _DURATION_RE.match(value) if isinstance(value, str) else None
        if match is None or float(match.group(1)) <= 0:
            raise self.error(key, f"expected a duration such as 90s, 10m or 1h, got {value!r}")
        return float(match.group(1)) * _DURATION_UNITS[match.group(2)]

    def sub_agents(self, value: Any, key: str) -> tuple[SubAgentRef, ...] | None:
        """``[LogAnalyzer, {name: KubernetesAgent, max_iterations: 12}]``"""
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(key, "expected a list of agent names")
        refs = []
        for index, entry in enumerate(value):
            item = f"{key}[{index}]"
            if isinstance(entry, str):
                entry = {"name": entry}
            entry = self.mapping(entry, item, SUB_AGENT_KEYS)
            refs.append(
                SubAgentRef(
                    name=self.string(entry.get("name"), f"{item}.name", required=True),
                    max_iterations=self.positive_int(
                        entry.get("max_iterations"), f"{item}.max_iterations"
                    ),
                )
            )
        return tuple(refs)

    def check_chain_agents(self, chain: ChainConfig, agents: dict[str, AgentConfig]) -> None:
        """What a chain's stages name must exist, and be the right kind of agent."""
        key = f"agent_chains.{chain.id}"
        refs = [
            (f"{key}.sub_agents", chain.sub_agents),
            (f"{key}.chat.sub_agents", chain.chat.sub_agents),
        ]
        chat_agent = agents.get(chain.chat.agent)
        if chat_agent is None or chat_agent.type not in ITERATING_TYPES:
            known = sorted(a.name for a in agents.values() if a.type in ITERATING_TYPES)
            raise self.error(
                f"{key}.chat.agent",
                f"{chain.chat.agent!r} is not an iterating agent; chat agents: {', '.join(known)}",
            )
        scoring_agent = agents.get(chain.scoring.agent)
        if scoring_agent is None or scoring_agent.type != SCORING:
            known = sorted(a.name for a in agents.values() if a.type == SCORING)
            raise self.error(
                f"{key}.scoring.agent",
                f"{chain.scoring.agent!r} is not a scoring agent; scoring agents: {', '.join(known)}",
            )
        for index, stage in enumerate(chain.stages):
            stage_key = f"{key}.stages[{index}]"
            refs.append((f"{stage_key}.sub_agents", stage.sub_agents))
            refs += [
                (f"{stage_key}.agents[{n}].sub_agents", agent.sub_agents)
                for n, agent in enumerate(stage.agents)
            ]
            if stage.synthesis is not None:
                name = stage.synthesis.agent
                agent = agents.get(name)
                if agent is None or agent.type != SYNTHESIS:
                    known = sorted(a.name for a in agents.values() if a.type == SYNTHESIS)
                    raise self.error(
                        f"{stage_key}.synthesis.agent",
                        f"{name!r} is not a synthesis agent; synthesis agents: {', '.join(known)}",
                    )
        for ref_key, ref_list in refs:
            for index, ref in enumerate(ref_list or ()):
                agent = agents.get(ref.name)
                where = f"{ref_key}[{index}]"
                if agent is None:
                    raise self.error(
                        where, f"unknown agent {ref.name!r}; defined: {', '.join(agents)}"
                    )
                if agent.type not in ITERATING_TYPES:
                    raise self.error(
                        where,
                        f"{ref.name!r} is a {agent.type} agent; sub-agents iterate with tools",
                    )
                if not agent.description:
                    raise self.error(
                        where,
                        f"agent {ref.name!r} has no description; the dispatching agent chooses "
                        "sub-agents by their description, so give it one",
                    )

    def native_tools(self, value: Any, key: str) -> tuple[str, ...] | None:
        tools = self.string_list(value, key)
        for index, tool in enumerate(tools or ()):
            if tool not in NATIVE_TOOLS:
                raise self.error(
                    f"{key}[{index}]",
                    f"unknown native tool {tool!r}; allowed: {', '.join(NATIVE_TOOLS)}",
                )
        return tools

    def parse_chains(
        self, raw: Any, agents: dict[str, AgentConfig], servers: dict[str, MCPServerConfig]
    ) -> dict[str, ChainConfig]:
        chains: dict[str, ChainConfig] = {}
        seen_types: dict[str, str] = {}
        for chain_id, body in self.mapping(raw, "agent_chains", set(raw or {})).items():
            key = f"agent_chains.{chain_id}"
            body = self.mapping(body, key, CHAIN_KEYS)
            alert_types = self.string_list(body.get("alert_types"), f"{key}.alert_types")
            if not alert_types:
                raise self.error(f"{key}.alert_types", "is required (a list of alert types)")
            for alert_type in alert_types:
                if alert_type in seen_types:
                    raise self.error(
                        f"{key}.alert_types",
                        f"alert type {alert_type!r} is already handled by chain "
                        f"{seen_types[alert_type]!r}",
                    )
                seen_types[alert_type] = chain_id
            stages_raw = body.get("stages")
            if not isinstance(stages_raw, list) or not stages_raw:
                raise self.error(f"{key}.stages", "is required (a list of stages)")
            stages = tuple(
                self.parse_stage(stage, f"{key}.stages[{i}]", agents, servers)
                for i, stage in enumerate(stages_raw)
            )
            mcp = self.string_list(body.get("mcp_servers"), f"{key}.mcp_servers")
            self.check_servers(mcp, f"{key}.mcp_servers", servers)
            chains[chain_id] = ChainConfig(
                id=chain_id,
                alert_types=alert_types,
                stages=stages,
                description=self.string(body.get("description"), f"{key}.description") or "",
                llm_provider=self.string(body.get("llm_provider"), f"{key}.llm_provider"),
                llm_backend=self.string(body.get("llm_backend"), f"{key}.llm_backend"),
                max_iterations=self.positive_int(
                    body.get("max_iterations"), f"{key}.max_iterations"
                ),
                mcp_servers=mcp,
                fallback_providers=self.fallbacks(
                    body.get("fallback_providers"), f"{key}.fallback_providers"
                ),
                executive_summary_provider=self.string(
                    body.get("executive_summary_provider"), f"{key}.executive_summary_provider"
                ),
                sub_agents=self.sub_agents(body.get("sub_agents"), f"{key}.sub_agents"),
                chat=self.parse_chat(body.get("chat"), f"{key}.chat", servers),
                scoring=self.parse_scoring(body.get("scoring"), f"{key}.scoring"),
            )
        if not chains:
            raise self.error("agent_chains", "at least one chain is required")
        return chains

    def parse_stage(
        self,
        raw: Any,
        key: str,
        agents: dict[str, AgentConfig],
        servers: dict[str, MCPServerConfig],
    ) -> StageConfig:
        body = self.mapping(raw, key, STAGE_KEYS)
        name = self.string(body.get("name"), f"{key}.name", required=True)
        entries = body.get("agents")
        if entries is None and "agent" in body:
            entries = [body["agent"]]
        if not isinstance(entries, list) or not entries:
            raise self.error(f"{key}.agents", "is required (a list of agents)")
        replicas = self.positive_int(body.get("replicas"), f"{key}.replicas") or 1
        if replicas > 1 and len(entries) > 1:
            raise self.error(
                f"{key}.replicas",
                "replicas run copies of one agent; this stage lists several agents",
            )
        stage_agents = []
        for index, entry in enumerate(entries):
            agent_key = f"{key}.agents[{index}]"
            if isinstance(entry, str):
                entry = {"name": entry}
            entry = self.mapping(entry, agent_key, STAGE_AGENT_KEYS)
            agent_name = self.string(entry.get("name"), f"{agent_key}.name", required=True)
            if agent_name not in agents:
                raise self.error(
                    f"{agent_key}.name",
                    f"unknown agent {agent_name!r}; defined: {', '.join(agents) or 'none'}",
                )
            mcp = self.string_list(entry.get("mcp_servers"), f"{agent_key}.mcp_servers")
            self.check_servers(mcp, f"{agent_key}.mcp_servers", servers)
            stage_agents.append(
                StageAgentConfig(
                    name=agent_name,
                    llm_provider=self.string(
                        entry.get("llm_provider"), f"{agent_key}.llm_provider"
                    ),
                    llm_backend=self.string(entry.get("llm_backend"), f"{agent_key}.llm_backend"),
                    max_iterations=self.positive_int(
                        entry.get("max_iterations"), f"{agent_key}.max_iterations"
                    ),
                    mcp_servers=mcp,
                    fallback_providers=self.fallbacks(
                        entry.get("fallback_providers"), f"{agent_key}.fallback_providers"
                    ),
                    sub_agents=self.sub_agents(entry.get("sub_agents"), f"{agent_key}.sub_agents"),
                )
            )
        synthesis = None
        if body.get("synthesis") is not None:
            raw_synthesis = self.mapping(body["synthesis"], f"{key}.synthesis", SYNTHESIS_KEYS)
            synthesis = SynthesisConfig(
                agent=self.string(raw_synthesis.get("agent"), f"{key}.synthesis.agent")
                or "SynthesisAgent",
                llm_provider=self.string(
                    raw_synthesis.get("llm_provider"), f"{key}.synthesis.llm_provider"
                ),
                llm_backend=self.string(
                    raw_synthesis.get("llm_backend"), f"{key}.synthesis.llm_backend"
                ),
            )
        return StageConfig(
            name=name,
            agents=tuple(stage_agents),
            max_iterations=self.positive_int(body.get("max_iterations"), f"{key}.max_iterations"),
            replicas=replicas,
            success_policy=self.success_policy(body.get("success_policy"), f"{key}.success_policy"),
            synthesis=synthesis,
            sub_agents=self.sub_agents(body.get("sub_agents"), f"{key}.sub_agents"),
        )

    def success_policy(self, value: Any, key: str) -> str | None:
        policy = self.string(value, key)
        if policy is not None and policy not in SUCCESS_POLICIES:
            raise self.error(
                key, f"unknown success policy {policy!r}; allowed: {', '.join(SUCCESS_POLICIES)}"
            )
        return policy

    def parse_defaults(self, raw: Any, chains: dict[str, ChainConfig]) -> Defaults:
        body = self.mapping(raw, "defaults", DEFAULTS_KEYS)
        alert_type = self.string(body.get("alert_type"), "defaults.alert_type", required=True)
        known = sorted(t for chain in chains.values() for t in chain.alert_types)
        if alert_type not in known:
            raise self.error(
                "defaults.alert_type",
                f"no chain handles alert type {alert_type!r}; chains handle: {', '.join(known)}",
            )
        return Defaults(
            alert_type=alert_type,
            max_iterations=self.positive_int(body.get("max_iterations"), "defaults.max_iterations")
            or 20,
            llm_provider=self.string(body.get("llm_provider"), "defaults.llm_provider"),
            llm_backend=self.string(body.get("llm_backend"), "defaults.llm_backend"),
            fallback_providers=self.fallbacks(
                body.get("fallback_providers"), "defaults.fallback_providers"
            )
            or (),
            success_policy=self.success_policy(
                body.get("success_policy"), "defaults.success_policy"
            )
            or "any",
            orchestrator=self.default_orchestrator(body.get("orchestrator")),
            **self.default_summarization(body.get("summarization")),
            runbook=self.string(body.get("runbook"), "defaults.runbook") or "",
        )

    def default_summarization(self, raw: Any) -> dict[str, str | None]:
        key = "defaults.summarization"
        body = self.mapping(raw, key, DEFAULT_SUMMARIZATION_KEYS)
        return {
            "summarization_provider": self.string(body.get("llm_provider"), f"{key}.llm_provider"),
            "summarization_backend": self.string(body.get("llm_backend"), f"{key}.llm_backend"),
        }

    def default_orchestrator(self, raw: Any) -> OrchestratorConfig:
        parsed = self.orchestrator(raw, "defaults.orchestrator") or OrchestratorConfig()
        # Five at once unless configured, as TARSy users know it.
        return OrchestratorConfig(
            max_concurrent_agents=parsed.max_concurrent_agents or 5,
            agent_timeout=parsed.agent_timeout,
            max_budget=parsed.max_budget,
        )
