"""``manage.py check`` validates the configuration (a Django system check).

The file itself (every key, every name it gives of its own parts) is checked when it
loads (config/loader.py); here that result is reported, and then every LLM use the
configuration makes — stage agents, synthesis, executive summary, chat, scoring,
sub-agents, fallbacks, summarisation — is resolved against the providers TARSy knows
(built-in, llm-providers.yaml, Django admin) the way a run would resolve it. A provider
that does not exist or a backend that cannot drive it is an error here, not an empty
executive summary at three in the morning.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DatabaseError

from agents.chat import chat_settings
from agents.resolver import (
    AgentSettings,
    ProviderMissing,
    ResolutionError,
    exec_summary_settings,
    pick_provider,
    stage_settings,
    sub_agent_settings,
    synthesis_settings,
)
from agents.scoring import chain_scoring_settings
from config.loader import ConfigError, get_config
from config.providers import file_provider_clashes, provider_rows
from config.types import TarsyConfig
from llm.models import LLMProvider

# Where the configuration could not be loaded (agents/apps.py lets ``check`` report it).
LOAD_ERROR: list[ConfigError] = []


@register()
def check_configuration(app_configs, databases=None, **kwargs) -> list[CheckMessage]:
    if LOAD_ERROR:
        return [Error(str(LOAD_ERROR[0]), id="tarsy.E010")]
    try:
        config = get_config()
    except ConfigError as error:
        return [Error(str(error), id="tarsy.E010")]
    # Whether a provider is missing depends on admin's rows: asked only where the
    # database is meant to be (``check --database default``, ``migrate``), as Django's
    # database checks are; a command's own start-up check (``tarsy_setup`` before it adds
    # the demo provider) is not refused for it.
    return configuration_messages(config, missing=bool(databases))


def configuration_messages(config: TarsyConfig, *, missing: bool = True) -> list[CheckMessage]:
    """What ``manage.py check`` says of a loaded configuration; ``missing=False``: not
    whether the providers it names exist (only whether they can run as configured)."""
    messages: list[CheckMessage] = [Warning(text, id="tarsy.W010") for text in config.warnings]
    migrated = True
    try:
        admin = list(LLMProvider.objects.all())
        rows = provider_rows(config)
    except DatabaseError:
        # Not migrated yet (``migrate`` checks first; set-up adds the demo provider
        # after it): providers admin may still add are not missing yet.
        migrated = False
        admin = []
        rows = provider_rows_without_database(config)
    for name in file_provider_clashes(config, (row.name for row in admin)):
        messages.append(
            Error(
                f"LLM provider {name!r} is defined both in llm-providers.yaml and in Django "
                "admin; the file's is used. Rename or delete one of them.",
                id="tarsy.E011",
            )
        )
    problems = llm_use_problems(config, rows, missing=missing and migrated)
    messages += [Error(problem, id="tarsy.E003") for problem in problems]
    return messages


def provider_rows_without_database(config: TarsyConfig) -> list[LLMProvider]:
    from config.providers import builtin_providers, file_row

    merged = {**builtin_providers(), **config.llm_providers}
    return [file_row(provider) for provider in merged.values()]


def llm_uses(config: TarsyConfig) -> Iterator[tuple[str, AgentSettings]]:
    """Every LLM use the configuration makes, with the key that makes it."""
    for chain in config.chains.values():
        at = f"agent_chains.{chain.id}"
        for index, stage in enumerate(chain.stages):
            stage_at = f"{at}.stages[{index}]"
            agents = stage_settings(config, chain, stage)
            for settings in agents[: len(stage.agents)]:
                yield f"{stage_at} ({settings.name})", settings
                for ref in settings.sub_agents:
                    yield (
                        f"{stage_at} ({settings.name}'s sub-agent {ref.name})",
                        sub_agent_settings(config, chain, ref),
                    )
            if stage.parallel:
                yield f"{stage_at}.synthesis", synthesis_settings(config, chain, stage)
        yield f"{at}.executive_summary_provider", exec_summary_settings(config, chain)
        if chain.chat.enabled:
            chat = chat_settings(config, chain)
            yield f"{at}.chat", chat
            for ref in chat.sub_agents:
                yield f"{at}.chat (sub-agent {ref.name})", sub_agent_settings(config, chain, ref)
        if chain.scoring.enabled:
            yield f"{at}.scoring", chain_scoring_settings(config, chain)


def llm_use_problems(
    config: TarsyConfig, rows: list[LLMProvider], *, missing: bool = True
) -> list[str]:
    """``<file>: <key>: <problem>``, once per problem; ``missing=False`` leaves out the
    providers that are not there (yet)."""
    # One line per problem, at the first use it breaks (a chain's provider breaks each
    # of its stages, its chat and its summary alike).
    problems: dict[str, str] = {}
    source = config.source

    def pick(key: str, name, backend, who: str, *, pinned: bool = True) -> None:
        try:
            pick_provider(rows, name, backend, who, pinned=pinned)
        except ProviderMissing as problem:
            if missing:
                same = str(problem).replace(f" (used by {who})", "")
                problems.setdefault(same, f"{source}: {key}: {problem}")
        except ResolutionError as problem:
            same = str(problem).replace(f" (used by {who})", "")
            problems.setdefault(same, f"{source}: {key}: {problem}")

    for key, settings in llm_uses(config):
        who = settings.name
        pick(key, settings.llm_provider, settings.llm_backend, who, pinned=settings.backend_pinned)
        for index, fallback in enumerate(settings.fallback_providers):
            fallback_key = f"{key} fallback_providers[{index}]"
            pick(fallback_key, fallback.provider, fallback.backend, who)
    defaults = config.defaults
    if defaults.summarization_provider is not None:
        key = "defaults.summarization"
        pick(key, defaults.summarization_provider, defaults.summarization_backend, key)
    for server in config.mcp_servers.values():
        summarization = server.summarization
        if summarization.llm_provider is not None:
            key = f"mcp_servers.{server.id}.summarization"
            pick(key, summarization.llm_provider, summarization.llm_backend, key)
    return list(problems.values())


@register()
def check_memory_embedder(app_configs, databases=None, **kwargs) -> list[CheckMessage]:
    """Lessons stored by another embedder than the configured one are never recalled
    (sessions/selectors/memory.py) until ``manage.py tarsy_reembed`` embeds them again.
    Asked where the database is meant to be (``check --database default``, ``migrate``)."""
    if not databases or LOAD_ERROR:
        return []
    from agents.memory import memory_embedder
    from llm.embeddings import EmbeddingFailed
    from sessions.models import InvestigationMemory

    try:
        config = get_config()
        if not config.defaults.memory.enabled:
            return []
        embedder = memory_embedder(config)
        stale = InvestigationMemory.objects.exclude(
            embedding_model=embedder.name, dimensions=embedder.dimensions
        )
        count = stale.count()
        kinds = stale.order_by().values_list("embedding_model", "dimensions").distinct()
        made_by = sorted(
            f"{name or 'no embedder'} ({size or 0} dimensions)" for name, size in kinds
        )
    except (ConfigError, EmbeddingFailed, DatabaseError):
        return []  # reported by check_configuration, or not migrated yet
    if not count:
        return []
    return [
        Warning(
            f"{count} stored lesson{'s were' if count > 1 else ' was'} embedded by "
            f"{', '.join(made_by)}, not by the configured embedder {embedder.name} "
            f"({embedder.dimensions} dimensions): they are not recalled until "
            "`manage.py tarsy_reembed` embeds them again.",
            id="tarsy.W030",
        )
    ]
