"""Which LLM provider is "the default provider": the one rule, for every part of TARSy
that needs to know (the resolver, ``manage.py check``, the System page, the demo banner).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


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
