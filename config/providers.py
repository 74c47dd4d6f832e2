"""The LLM providers TARSy knows, and which one is "the default provider": one rule each,
for every part of TARSy that needs to know (the resolver, ``manage.py check``, the System
page, the demo banner, admin).

Providers come from three places, later ones replacing earlier ones of the same name:
TARSy's built-in providers (``google-default``…), ``llm-providers.yaml`` next to
tarsy.yaml, and the rows of Django admin, except that a name in llm-providers.yaml stays
the file's (``manage.py check`` reports the clash). Only admin rows are in the database.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Protocol, TypeVar

from config.builtin import BUILTIN_PROVIDERS
from config.types import FileProvider, TarsyConfig
from llm.models import LLMProvider

BUILT_IN = "built-in"


class ProviderRow(Protocol):
    """What the rule reads of a provider (an ``llm.models.LLMProvider`` row)."""

    @property
    def name(self) -> str: ...
    @property
    def is_default(self) -> bool: ...


P = TypeVar("P", bound=ProviderRow)


def default_provider(named: str | None, providers: Iterable[P]) -> P | None:
    """The provider tarsy.yaml names, else the one marked default in Django admin.

    ``named`` is tarsy.yaml's ``defaults.llm_provider`` (for one agent: its
    ``llm_provider`` after the hierarchy, which ends at ``defaults.llm_provider``). The
    provider is returned enabled or not (what a disabled one means is for the caller to
    say); None when ``providers`` has no such row."""
    if named:
        return next((provider for provider in providers if provider.name == named), None)
    return next((provider for provider in providers if provider.is_default), None)


def builtin_providers() -> dict[str, FileProvider]:
    return {
        name: FileProvider(
            name=name,
            type=spec["type"],
            model=spec["model"],
            api_key_env=spec.get("api_key_env", ""),
            project_env=spec.get("project_env", ""),
            location_env=spec.get("location_env", ""),
            native_tools=tuple(spec.get("tools", ())),
            source=BUILT_IN,
        )
        for name, spec in BUILTIN_PROVIDERS.items()
    }


# The variable an SDK reads its key from when a provider of llm-providers.yaml names none
# (TARSy passes no key then, and the SDK looks there).
SDK_KEY_ENV = {
    "google": "GOOGLE_API_KEY",
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "xai": "XAI_API_KEY",
}


def base_url_variable(provider_type: str) -> str:
    """``TARSY_GOOGLE_BASE_URL``…: where every provider of that type in the
    configuration is reached, whatever its ``base_url`` (an egress gateway, a recording
    proxy, a test's fake)."""
    return f"TARSY_{provider_type.upper()}_BASE_URL"


def file_row(provider: FileProvider) -> LLMProvider:
    """A provider of the configuration as an (unsaved) admin row, read like one."""
    base_url = os.environ.get(base_url_variable(provider.type)) or provider.base_url
    key_env = provider.api_key_env
    if not key_env and not (provider.type == "openai" and provider.base_url):
        key_env = SDK_KEY_ENV.get(provider.type, "")
    row = LLMProvider(
        name=provider.name,
        type=provider.type,
        model=provider.model,
        api_key_env=key_env,
        base_url=base_url,
        project_env=provider.project_env,
        location_env=provider.location_env,
        native_tools=list(provider.native_tools),
        options={},
        enabled=True,
        is_default=False,
    )
    row.source = provider.source
    return row


def provider_rows(config: TarsyConfig, *, builtins: bool = True) -> list[LLMProvider]:
    """Every provider by name: built-in < admin < llm-providers.yaml. ``builtins=False``
    leaves out the built-in ones nothing replaced (for lists people read)."""
    rows: dict[str, LLMProvider] = {}
    if builtins:
        rows.update((name, file_row(p)) for name, p in builtin_providers().items())
    rows.update((row.name, row) for row in LLMProvider.objects.all())
    rows.update((name, file_row(p)) for name, p in config.llm_providers.items())
    return sorted(rows.values(), key=lambda row: row.name)


def file_provider_clashes(config: TarsyConfig, admin_names: Iterable[str]) -> list[str]:
    """Names defined both in llm-providers.yaml and in Django admin."""
    return sorted(set(config.llm_providers) & set(admin_names))
