"""The one interface every LLM backend implements."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from llm.types import Delta, GenerateRequest


class Provider(Protocol):
    """Streams one model turn.

    Transient failures are retried inside the provider; what is left is yielded as a
    final ``ErrorInfo`` (never raised), so callers handle one shape of failure.
    Cancelling the consuming task must close the underlying stream promptly.
    """

    def generate(self, request: GenerateRequest) -> AsyncGenerator[Delta, None]: ...
