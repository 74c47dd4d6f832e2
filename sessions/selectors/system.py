"""What the System page reports: the LLM providers and their key variables, the warnings an
operator should act on, and the loaded tarsy.yaml with its secrets masked.

Each part is a function of what it is handed (configuration, provider rows, clusters, MCP
health), so a test can build any situation without a deployment; ``system_status()``
gathers the real inputs for the view.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from config.providers import BUILT_IN, default_provider, provider_rows
from config.types import (
    AgentConfig,
    ChainConfig,
    Defaults,
    StageAgentConfig,
    TarsyConfig,
)
from llm.models import LLMProvider, ProviderType
from masking import mask_text
from sessions import selectors
from sessions.selectors import cluster_silence_limit

MASKED = "***MASKED***"
ADMIN_PROVIDERS = "Admin → LLM providers"

# A key whose last word is one of these holds a secret ("bearer_token", "X-Api-Key",
# "clientSecret", "Authorization"); the last word decides, as in the masking patterns, so
# "summary_max_token_limit" and "size_threshold_tokens" stay readable.
_SECRET_WORDS = frozenset(
    {
        "apikey",
        "auth",
        "authorization",
        "bearer",
        "cookie",
        "credential",
        "credentials",
        "key",
        "passphrase",
        "passwd",
        "password",
        "private",
        "pwd",
        "secret",
        "token",
    }
)
# Every value of these mappings is masked, whatever its name: an MCP server's headers and
# environment are where its credentials go, and "DSN" or "X-Org" say nothing about that.
_SECRET_MAPPINGS = frozenset({"headers", "env"})
_WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_URL_PASSWORD_RE = re.compile(r"(?P<user>://[^/\s:@]*):[^/\s@]+@")


@dataclass(frozen=True)
class ProviderStatus:
    name: str
    type: str
    model: str
    enabled: bool
    is_default: bool
    key_env: str  # the variable's *name*; "" when the provider reads no key
    key_set: bool  # in this web process's environment
    source: str = "admin"  # admin, llm-providers.yaml or built-in

    @classmethod
    def from_row(cls, provider: LLMProvider) -> ProviderStatus:
        return cls(
            name=provider.name,
            type=provider.get_type_display(),
            model=provider.model,
            enabled=provider.enabled,
            is_default=provider.is_default,
            key_env=provider.api_key_env,
            key_set=provider.key_is_set,
            source=provider.source,
        )


@dataclass(frozen=True)
class SystemWarning:
    category: str  # demo, llm_provider, worker, mcp_server
    message: str


@dataclass(frozen=True)
class SystemStatus:
    providers: list[ProviderStatus]
    warnings: list[SystemWarning]
    servers: list[dict[str, Any]]
    effective_config: str


def system_status(config: TarsyConfig) -> SystemStatus:
    providers = listed_providers(config)
    servers = selectors.mcp_servers_health(list(config.mcp_servers))
    # The same limit /health uses, so the page and the probe agree on "no worker".
    silence_limit = cluster_silence_limit()
    clusters = selectors.live_worker_clusters(within_seconds=silence_limit)
    return SystemStatus(
        providers=[ProviderStatus.from_row(provider) for provider in providers],
        warnings=system_warnings(
            config=config,
            providers=providers,
            live_cluster_count=len(clusters),
            cluster_silence_limit=silence_limit,
            servers=servers,
        ),
        servers=servers,
        effective_config=effective_config_yaml(config),
    )


def listed_providers(config: TarsyConfig) -> list[LLMProvider]:
    """Admin's and llm-providers.yaml's providers, and the built-in ones tarsy.yaml names."""
    named = {name for _, name in provider_references(config)}
    return [row for row in provider_rows(config) if row.source != BUILT_IN or row.name in named]


def system_warnings(
    *,
    config: TarsyConfig,
    providers: Sequence[LLMProvider],
    live_cluster_count: int,
    cluster_silence_limit: float,
    servers: Sequence[dict[str, Any]],
) -> list[SystemWarning]:
    warnings = default_provider_warnings(config, providers)
    warnings += provider_reference_warnings(config, providers)
    warnings += [SystemWarning("config", message) for message in config.warnings]
    warnings += [
        SystemWarning(
            "llm_provider",
            f"LLM provider {provider.name!r} reads its API key from {provider.api_key_env}, "
            "which is not set in this web process; set it in the environment of the web "
            "and worker processes and restart them.",
        )
        for provider in providers
        if provider.enabled and not provider.key_is_set
    ]
    if live_cluster_count == 0:
        warnings.append(
            SystemWarning(
                "worker",
                f"No worker cluster has reported in the last {cluster_silence_limit:g} s, so "
                "new alerts wait in the queue; start one with 'manage.py qcluster'.",
            )
        )
    for server in servers:
        if server["healthy"]:
            continue
        if server["last_check"] is None:
            message = (
                f"MCP server {server['id']!r} has not been checked yet: no worker has started it."
            )
        else:
            message = f"MCP server {server['id']!r} is unhealthy: {server['error'] or 'no error'}."
        warnings.append(SystemWarning("mcp_server", message))
    return warnings


def default_provider_warnings(
    config: TarsyConfig, providers: Sequence[LLMProvider]
) -> list[SystemWarning]:
    """The provider an agent gets when nothing in tarsy.yaml names one (the rule of
    config/providers.py, which the resolver follows too)."""
    named = config.defaults.llm_provider
    default = default_provider(named, providers)
    if named:
        # A missing or disabled named default is a reference problem, reported with them.
        default = default if default is not None and default.enabled else None
    else:
        if default is None:
            return [
                SystemWarning(
                    "llm_provider",
                    "No default LLM provider: tarsy.yaml sets no defaults.llm_provider and no "
                    f"provider is marked default; mark one default in {ADMIN_PROVIDERS}.",
                )
            ]
        if not default.enabled:
            return [
                SystemWarning(
                    "llm_provider",
                    f"The default LLM provider {default.name!r} is disabled: enable it, or "
                    f"mark another provider default, in {ADMIN_PROVIDERS}.",
                )
            ]
    if default is not None and default.type == ProviderType.SCRIPTED:
        return [
            SystemWarning(
                "demo",
                f"Demo mode: the default LLM provider {default.name!r} is the scripted demo "
                "provider, so investigations do not use a real model; add a real provider in "
                f"{ADMIN_PROVIDERS} and make it the default.",
            )
        ]
    return []


def provider_reference_warnings(
    config: TarsyConfig, providers: Sequence[LLMProvider]
) -> list[SystemWarning]:
    rows = {provider.name: provider for provider in providers}
    places: dict[str, list[str]] = {}
    for key, name in provider_references(config):
        places.setdefault(name, []).append(key)
    warnings = []
    for name, keys in places.items():
        row = rows.get(name)
        if row is not None and row.enabled:
            continue
        problem = (
            f"does not exist; add it in {ADMIN_PROVIDERS} or llm-providers.yaml"
            if row is None
            else f"is disabled; enable it in {ADMIN_PROVIDERS}"
        )
        warnings.append(
            SystemWarning(
                "llm_provider",
                f"tarsy.yaml names LLM provider {name!r} ({', '.join(keys)}), which {problem} "
                "or change tarsy.yaml.",
            )
        )
    return warnings


def provider_references(config: TarsyConfig) -> Iterator[tuple[str, str]]:
    """Every place tarsy.yaml names an LLM provider, as (key, provider name)."""

    def level(
        key: str, node: Defaults | AgentConfig | ChainConfig | StageAgentConfig
    ) -> Iterator[tuple[str, str]]:
        if node.llm_provider:
            yield f"{key}.llm_provider", node.llm_provider
        for index, fallback in enumerate(node.fallback_providers or ()):
            yield f"{key}.fallback_providers[{index}]", fallback.provider

    yield from level("defaults", config.defaults)
    if config.defaults.summarization_provider:
        yield "defaults.summarization.llm_provider", config.defaults.summarization_provider
    for server in config.mcp_servers.values():
        if server.summarization.llm_provider:
            key = f"mcp_servers.{server.id}.summarization.llm_provider"
            yield key, server.summarization.llm_provider
    for agent in config.agents.values():
        yield from level(f"agents.{agent.name}", agent)
    for chain in config.chains.values():
        chain_key = f"agent_chains.{chain.id}"
        yield from level(chain_key, chain)
        if chain.executive_summary_provider:
            yield f"{chain_key}.executive_summary_provider", chain.executive_summary_provider
        for stage_index, stage in enumerate(chain.stages):
            stage_key = f"{chain_key}.stages[{stage_index}]"
            for agent_index, stage_agent in enumerate(stage.agents):
                yield from level(f"{stage_key}.agents[{agent_index}]", stage_agent)
            if stage.synthesis is not None and stage.synthesis.llm_provider:
                yield f"{stage_key}.synthesis.llm_provider", stage.synthesis.llm_provider


def effective_config_yaml(config: TarsyConfig) -> str:
    """The configuration as loaded (templates expanded, built-in agents added), as YAML.

    Secrets go twice: by name here (a header, an environment value, anything under a key
    that says secret), then the whole text through the masking every tool result gets,
    for what a name does not reveal (a token pasted into an argument or an instruction).
    """
    data = _sanitized(dataclasses.asdict(config))
    text = yaml.dump(data, Dumper=_ConfigDumper, sort_keys=False, allow_unicode=True, width=100)
    return mask_text(text)


def looks_secret(key: str) -> bool:
    """Whether a value under ``key`` is a secret; ``*_env`` keys hold a variable's name."""
    if key.lower().endswith("_env"):
        return False
    words = _WORD_RE.findall(key)
    return bool(words) and words[-1].lower() in _SECRET_WORDS


def _sanitized(value: Any, name: str = "") -> Any:
    if isinstance(value, dict):
        hide_all = name in _SECRET_MAPPINGS
        return {
            key: MASKED
            if item is not None and (hide_all or looks_secret(str(key)))
            else _sanitized(item, str(key))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_sanitized(item, name) for item in value]
    if isinstance(value, str):
        return _URL_PASSWORD_RE.sub(rf"\g<user>:{MASKED}@", value)
    return value


class _ConfigDumper(yaml.SafeDumper):
    """Multi-line text (instructions) as readable ``|`` blocks."""


def _represent_text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_ConfigDumper.add_representer(str, _represent_text)
