"""Pytest fixtures for the LangChain backend's wire-format fakes.

Import the fixtures into a test module (``from tests.llm.fakes.fixtures import
openai_server``…); each starts a real HTTP server on an ephemeral port and stops it
after the test. ``FakeGeminiStream`` is a deliberately small Gemini responder for
the one google-via-LangChain path; the native Gemini backend has its own fake.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from tests.llm.fakes.anthropic_messages import FakeAnthropicMessages
from tests.llm.fakes.openai_chat import FakeOpenAIChat
from tests.llm.fakes.scripted_http import ErrorReply, ScriptedServer, SSEEvent, StreamReply

_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# The Gemini Developer API path, and Vertex AI's for Google's own models.
_GEMINI_PATH = re.compile(
    r"^/v1beta/models/[^/:]+:streamGenerateContent$"
    r"|^/v1beta1/projects/[^/]+/locations/[^/]+/publishers/google/models/[^/:]+"
    r":streamGenerateContent$"
)

ServerT = TypeVar("ServerT", bound=ScriptedServer)


class FakeGeminiStream(ScriptedServer):
    """``POST …/models/{model}:streamGenerateContent?alt=sse`` → SSE responses."""

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and bool(_GEMINI_PATH.match(path))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": _GEMINI_STATUS.get(status)}}


def gemini_stream(*responses: dict[str, Any]) -> StreamReply:
    return StreamReply(tuple(SSEEvent(data=json.dumps(response)) for response in responses))


def gemini_response(
    parts: list[dict[str, Any]],
    *,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    model: str = "gemini-fake",
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` as the streaming endpoint sends it."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish_reason:
        candidate["finishReason"] = finish_reason
    response: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": model,
        "responseId": "resp-fake",
    }
    if usage:
        response["usageMetadata"] = usage
    return response


def gemini_error(status: int, message: str) -> ErrorReply:
    return ErrorReply(
        status,
        {"error": {"code": status, "message": message, "status": _GEMINI_STATUS.get(status)}},
    )


def _serve(server: ServerT) -> Iterator[ServerT]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIChat]:
    yield from _serve(FakeOpenAIChat())


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicMessages]:
    yield from _serve(FakeAnthropicMessages())


@pytest.fixture
def gemini_server() -> Iterator[FakeGeminiStream]:
    yield from _serve(FakeGeminiStream())
