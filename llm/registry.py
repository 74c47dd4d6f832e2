"""Backends by name: ``llm_backend`` in tarsy.yaml picks one of these."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from llm.base import Provider

# Backend name → factory. Factories import lazily so that a deployment that never
# uses an SDK does not pay for importing it.
_FACTORIES: dict[str, Callable[[], Provider]] = {}


def register_backend(name: str, factory: Callable[[], Provider]) -> None:
    _FACTORIES[name] = factory
    get_backend.cache_clear()


def backend_names() -> list[str]:
    return sorted(_FACTORIES)


@cache
def get_backend(name: str) -> Provider:
    """One provider instance per backend and process: they cache SDK clients inside."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise LookupError(
            f"unknown llm_backend {name!r}; known backends: {', '.join(backend_names())}"
        ) from None
    return factory()


def _scripted() -> Provider:
    from llm.scripted import ScriptedProvider

    return ScriptedProvider()


def _google_native() -> Provider:
    from llm.google_native import GoogleNativeProvider

    return GoogleNativeProvider()


def _langchain() -> Provider:
    from llm.langchain_provider import LangChainProvider

    return LangChainProvider()


register_backend("scripted", _scripted)
register_backend("google-native", _google_native)
register_backend("langchain", _langchain)
