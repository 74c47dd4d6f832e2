"""Shared fixtures for the LLM backend tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm.fakes.gemini import FakeGemini


class Sleeps:
    """Stands in for ``asyncio.sleep`` in providers: records delays, never waits."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    """A fake Gemini streaming API on 127.0.0.1 (ephemeral port), stopped after the test."""
    server = FakeGemini()
    server.start()
    try:
        yield server
    finally:
        server.stop()
