"""``stream_with_retries`` with scripted attempts and an injected sleep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import httpx
import pytest

from llm.retry import RetryPolicy, stream_with_retries
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
from tests.llm.conftest import Sleeps

USAGE = UsageInfo(input_tokens=3, output_tokens=2, total_tokens=5)


class RateLimited(Exception):
    """Carries a response with a Retry-After header, like SDK status errors."""

    status_code = 429

    def __init__(self, retry_after: str | None = None) -> None:
        super().__init__("429 Too Many Requests")
        headers = {"retry-after": retry_after} if retry_after else {}
        self.response = httpx.Response(429, headers=headers)


class ServerError(Exception):
    status_code = 503


class AuthError(Exception):
    status_code = 401


Step = Delta | BaseException


class Script:
    """Attempt factory: attempt N yields the deltas of script N, raising exceptions in it."""

    def __init__(self, *attempts: Sequence[Step]) -> None:
        self._attempts = list(attempts)
        self.started = 0
        self.closed = 0

    def __call__(self) -> AsyncIterator[Delta]:
        steps = self._attempts[self.started]
        self.started += 1
        return self._run(steps)

    async def _run(self, steps: Sequence[Step]) -> AsyncIterator[Delta]:
        try:
            for step in steps:
                if isinstance(step, BaseException):
                    raise step
                yield step
        finally:
            self.closed += 1


async def run(
    script: Callable[[], AsyncIterator[Delta]], sleeps: Sleeps, policy: RetryPolicy | None = None
) -> list[Delta]:
    stream = stream_with_retries(script, policy=policy or RetryPolicy(), sleep=sleeps)
    return [delta async for delta in stream]


async def test_a_clean_stream_passes_through(sleeps: Sleeps) -> None:
    deltas = [ThinkingDelta("hmm"), TextDelta("hi"), ToolCallDelta("c1", "a.b", {}), USAGE]
    script = Script(deltas)
    assert await run(script, sleeps) == deltas
    assert script.started == 1
    assert sleeps.delays == []


async def test_usage_and_grounding_are_held_until_content_arrives(sleeps: Sleeps) -> None:
    grounding = GroundingInfo({"web_search_queries": ["q"]})
    script = Script([USAGE, grounding, TextDelta("hi")])
    assert await run(script, sleeps) == [USAGE, grounding, TextDelta("hi")]


async def test_retryable_errors_back_off_then_give_up(sleeps: Sleeps) -> None:
    script = Script(*([ServerError("unavailable")] for _ in range(4)))
    [error] = await run(script, sleeps)
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("server_error", True)
    assert script.started == 4
    assert sleeps.delays == [1.0, 2.0, 4.0]


async def test_backoff_is_capped(sleeps: Sleeps) -> None:
    policy = RetryPolicy(max_retries=4, base_delay=10.0, max_delay=25.0)
    script = Script(*([ServerError()] for _ in range(5)))
    await run(script, sleeps, policy)
    assert sleeps.delays == [10.0, 20.0, 25.0, 25.0]


async def test_rate_limit_honours_retry_after(sleeps: Sleeps) -> None:
    script = Script([RateLimited("7")], [RateLimited()], [TextDelta("ok")])
    assert await run(script, sleeps) == [TextDelta("ok")]
    # Retry-After when the server sent one, the policy's backoff otherwise.
    assert sleeps.delays == [7.0, 2.0]


async def test_each_kind_of_failure_has_its_own_budget(sleeps: Sleeps) -> None:
    failures: list[Sequence[Step]] = [[ServerError()], [RateLimited()]] * 3
    script = Script(*failures, [], [TextDelta("finally")])
    assert await run(script, sleeps) == [TextDelta("finally")]
    assert script.started == 8


async def test_non_retryable_errors_end_at_once(sleeps: Sleeps) -> None:
    script = Script([AuthError("bad key")], [TextDelta("never")])
    [error] = await run(script, sleeps)
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("auth_error", False)
    assert script.started == 1
    assert sleeps.delays == []


async def test_an_error_yielded_by_the_attempt_ends_the_stream(sleeps: Sleeps) -> None:
    error = ErrorInfo("prompt_blocked", "no", retryable=False)
    script = Script([error, TextDelta("never")], [TextDelta("never")])
    assert await run(script, sleeps) == [error]
    assert script.started == 1
    assert script.closed == 1


async def test_a_break_after_content_is_not_replayed(sleeps: Sleeps) -> None:
    script = Script([TextDelta("half"), httpx.RemoteProtocolError("cut")], [TextDelta("again")])
    deltas = await run(script, sleeps)
    assert deltas[0] == TextDelta("half")
    assert isinstance(deltas[1], ErrorInfo)
    assert (deltas[1].code, deltas[1].retryable) == ("stream_interrupted", True)
    assert script.started == 1


async def test_code_execution_counts_as_content(sleeps: Sleeps) -> None:
    script = Script(
        [CodeExecutionDelta(code="print(1)"), httpx.RemoteProtocolError("cut")],
        [CodeExecutionDelta(code="print(1)"), TextDelta("1")],
    )
    deltas = await run(script, sleeps)
    # Retrying would have shown the same code twice.
    assert deltas[0] == CodeExecutionDelta(code="print(1)")
    assert isinstance(deltas[1], ErrorInfo)
    assert deltas[1].code == "stream_interrupted"
    assert script.started == 1


async def test_empty_responses_are_retried_then_reported(sleeps: Sleeps) -> None:
    script = Script([USAGE], [], [USAGE], [], [TextDelta("never")])
    [error] = await run(script, sleeps)
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("empty_response", True)
    assert script.started == 4
    assert sleeps.delays == [3.0, 3.0, 3.0]


async def test_an_empty_attempts_usage_is_dropped(sleeps: Sleeps) -> None:
    later = UsageInfo(input_tokens=9, output_tokens=1, total_tokens=10)
    script = Script([USAGE], [TextDelta("ok"), later])
    assert await run(script, sleeps) == [TextDelta("ok"), later]


async def test_stopping_early_closes_the_attempt_at_once(sleeps: Sleeps) -> None:
    script = Script([TextDelta("one"), TextDelta("two"), TextDelta("three")])
    stream = stream_with_retries(script, sleep=sleeps)
    assert await anext(stream) == TextDelta("one")
    await stream.aclose()  # type: ignore[attr-defined]
    # Closed by the retry layer itself, not later by the garbage collector.
    assert script.closed == 1


async def test_cancellation_during_a_retry_sleep_propagates_at_once() -> None:
    sleeping = asyncio.Event()

    async def sleep(delay: float) -> None:
        sleeping.set()
        await asyncio.Event().wait()  # forever, unless cancelled

    script = Script([ServerError()], [TextDelta("never")])

    async def consume() -> list[Delta]:
        return [d async for d in stream_with_retries(script, sleep=sleep)]

    task = asyncio.create_task(consume())
    await asyncio.wait_for(sleeping.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert script.started == 1


async def test_cancellation_is_never_treated_as_a_failure(sleeps: Sleeps) -> None:
    script = Script([asyncio.CancelledError()], [TextDelta("never")])
    with pytest.raises(asyncio.CancelledError):
        await run(script, sleeps)
    assert script.started == 1
    assert sleeps.delays == []
