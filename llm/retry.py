"""Transient-failure retries inside a provider.

A backend hands ``stream_with_retries`` a function that opens one attempt's delta
stream. Failures before anything was yielded are retried by policy; a stream that
breaks after content reached the caller cannot be replayed, so it ends with a
retryable ``ErrorInfo`` and the agent decides. Sleeping goes through an injectable
function so tests never really wait, and cancellation interrupts it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from llm.errors import (
    EMPTY_RESPONSE,
    RATE_LIMIT,
    STREAM_INTERRUPTED,
    classify_error,
    retry_after_seconds,
)
from llm.types import (
    CodeExecutionDelta,
    Delta,
    ErrorInfo,
    GroundingInfo,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageInfo,
)

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3  # per kind of failure, after the first attempt
    base_delay: float = 1.0
    max_delay: float = 30.0
    empty_response_delay: float = 3.0

    def backoff(self, attempt: int) -> float:
        return min(self.max_delay, self.base_delay * (2**attempt))


DEFAULT_POLICY = RetryPolicy()

# What reaches the caller and cannot be taken back. Code execution counts: a retry
# after it would show the model's code and output twice.
_CONTENT = (TextDelta, ThinkingDelta, ToolCallDelta, CodeExecutionDelta)


async def stream_with_retries(
    attempt: Callable[[], AsyncIterator[Delta]],
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    sleep: Sleep = asyncio.sleep,
    label: str = "llm",
) -> AsyncGenerator[Delta, None]:
    failures: dict[str, int] = {}
    while True:
        yielded_content = False
        held: list[Delta] = []  # usage/grounding held back until we know the attempt counted
        try:
            stream = attempt()
            try:
                async for delta in stream:
                    if isinstance(delta, ErrorInfo):
                        yield delta
                        return
                    if isinstance(delta, _CONTENT):
                        yielded_content = True
                        for item in held:
                            yield item
                        held.clear()
                        yield delta
                    elif isinstance(delta, UsageInfo | GroundingInfo) and not yielded_content:
                        held.append(delta)
                    else:
                        yield delta
            finally:
                # When the caller stops early (or an ErrorInfo ends the turn) the attempt's
                # HTTP stream is closed now, not whenever the generator is collected.
                await _aclose(stream)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            classified = classify_error(exc)
            if yielded_content:
                yield ErrorInfo(
                    STREAM_INTERRUPTED,
                    f"the response stream broke off: {classified.message}",
                    retryable=True,
                )
                return
            count = failures.get(classified.code, 0)
            if not classified.retryable or count >= policy.max_retries:
                yield ErrorInfo(classified.code, classified.message, classified.retryable)
                return
            failures[classified.code] = count + 1
            delay = policy.backoff(count)
            if classified.code == RATE_LIMIT:
                # Honour the server, but never past max_delay: a longer wait belongs to
                # the agent's timeouts and fallback, not to a silent sleep here.
                delay = min(retry_after_seconds(exc) or delay, policy.max_delay)
            logger.warning(
                "%s: %s (attempt %d), retrying in %.1fs", label, classified.code, count + 1, delay
            )
            await sleep(delay)
            continue
        if yielded_content:
            for item in held:
                yield item
            return
        count = failures.get(EMPTY_RESPONSE, 0)
        if count >= policy.max_retries:
            yield ErrorInfo(EMPTY_RESPONSE, "the model returned an empty response", retryable=True)
            return
        failures[EMPTY_RESPONSE] = count + 1
        logger.warning("%s: empty response (attempt %d), retrying", label, count + 1)
        await sleep(policy.empty_response_delay)


async def _aclose(stream: AsyncIterator[Delta]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
