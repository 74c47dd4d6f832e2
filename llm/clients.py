"""What every SDK backend needs to build its clients: secrets from the environment, and
one cached client per event loop.

Keys live in environment variables named by the provider's configuration; a missing
one is reported by name, never by value. SDK clients hold connection pools bound to the
event loop that opened them, and a worker runs every session in its own
``asyncio.run``: a client from a finished loop fails with "Event loop is closed", so
the cache keeps one client per key *for the running loop* and replaces it otherwise.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from llm.errors import AUTH, INVALID_REQUEST
from llm.types import ErrorInfo, ProviderConfig

Client = TypeVar("Client")


class MissingEnvironmentVariable(LookupError):
    """A variable named in the provider config is unset or empty."""

    def __init__(self, config: ProviderConfig, field: str, variable: str) -> None:
        if variable:
            message = (
                f"LLM provider {config.name!r}: environment variable {variable} "
                f"(named by {field}) is not set; export it in the worker's environment"
            )
        else:
            message = (
                f"LLM provider {config.name!r} ({config.type}) has no {field}; set it to the "
                "name of the environment variable that holds the value"
            )
        super().__init__(message)
        self.variable = variable


def env_value(config: ProviderConfig, field: str) -> str:
    """The value of the variable that ``config.<field>`` names (e.g. ``api_key_env``)."""
    variable = getattr(config, field)
    value = os.environ.get(variable, "") if variable else ""
    if not value:
        raise MissingEnvironmentVariable(config, field, variable)
    return value


def creation_error(config: ProviderConfig, exc: Exception, what: str) -> ErrorInfo:
    """A client that cannot be built is a configuration problem, reported, never raised."""
    if isinstance(exc, MissingEnvironmentVariable):
        return ErrorInfo(AUTH, str(exc), retryable=False)
    # SDK constructors' messages never contain the key.
    return ErrorInfo(
        INVALID_REQUEST,
        f"LLM provider {config.name!r}: cannot create the {what}: {exc}",
        retryable=False,
    )


class PerLoopCache(Generic[Client]):
    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[weakref.ref[asyncio.AbstractEventLoop], Client]] = {}

    def get(self, key: Hashable, create: Callable[[], Client]) -> Client:
        loop = asyncio.get_running_loop()
        cached = self._entries.get(key)
        if cached is not None and cached[0]() is loop:
            return cached[1]
        client = create()  # a failure is not cached: the next call tries again
        self._entries[key] = (weakref.ref(loop), client)
        return client
