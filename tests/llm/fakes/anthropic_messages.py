"""Wire-format fake of the Anthropic Messages streaming API.

``POST /v1/messages`` (and Vertex AI's ``…/publishers/anthropic/models/{model}:
streamRawPredict``, which carries the same body and events) answers named
server-sent events in Anthropic's order: ``message_start``, ``ping``, then per
content block ``content_block_start`` / ``content_block_delta``… /
``content_block_stop`` (thinking blocks with ``thinking_delta`` and a final
``signature_delta``, text with ``text_delta``, tool use with ``input_json_delta``
fragments), then ``message_delta`` with the stop reason and cumulative usage, and
``message_stop``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Self

from tests.llm.fakes.scripted_http import ErrorReply, ScriptedServer, SSEEvent, StreamReply

_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_VERTEX_PATH = re.compile(
    r"^/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+:streamRawPredict$"
)


class FakeAnthropicMessages(ScriptedServer):
    @property
    def base_url(self) -> str:
        """What an Anthropic SDK ``base_url`` should be set to (it appends ``/v1``)."""
        return self.url

    @property
    def vertex_base_url(self) -> str:
        """What an ``AnthropicVertex`` ``base_url`` should be set to."""
        return f"{self.url}/v1"

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and (path == "/v1/messages" or bool(_VERTEX_PATH.match(path)))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return anthropic_error_body(status, message)


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": "req_fake",
    }


def anthropic_error(status: int, message: str, *, retry_after: float | None = None) -> ErrorReply:
    headers = {"request-id": "req_fake"}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    return ErrorReply(status, anthropic_error_body(status, message), headers)


class MessageStream:
    """Builds one streamed message, block by block, with Anthropic's event framing."""

    def __init__(
        self, *, model: str = "claude-fake", message_id: str = "msg_fake", input_tokens: int = 25
    ) -> None:
        self._events: list[SSEEvent] = []
        self._index = 0
        self._next_delay = 0.0
        self._input_tokens = input_tokens
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": input_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "output_tokens": 1,
                    },
                },
            },
        )
        self._event("ping", {"type": "ping"})

    def delay(self, seconds: float) -> Self:
        """Wait this long before sending the next event."""
        self._next_delay = seconds
        return self

    def thinking(self, *fragments: str, signature: str = "EqQBCkYIARgCKkBmYWtlLXNpZw==") -> Self:
        self._start({"type": "thinking", "thinking": "", "signature": ""})
        for fragment in fragments:
            self._block_delta({"type": "thinking_delta", "thinking": fragment})
        self._block_delta({"type": "signature_delta", "signature": signature})
        return self._stop_block()

    def text(self, *fragments: str) -> Self:
        self._start({"type": "text", "text": ""})
        for fragment in fragments:
            self._block_delta({"type": "text_delta", "text": fragment})
        return self._stop_block()

    def tool_use(self, call_id: str, name: str, *json_fragments: str) -> Self:
        self._start({"type": "tool_use", "id": call_id, "name": name, "input": {}})
        # Anthropic opens every tool input with an empty fragment.
        for fragment in ("", *json_fragments):
            self._block_delta({"type": "input_json_delta", "partial_json": fragment})
        return self._stop_block()

    def stop(
        self, reason: str = "end_turn", *, output_tokens: int = 10, thinking_tokens: int = 0
    ) -> Self:
        usage: dict[str, Any] = {
            "input_tokens": self._input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        }
        if thinking_tokens:
            usage["output_tokens_details"] = {"thinking_tokens": thinking_tokens}
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": None},
                "usage": usage,
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        return self

    def error(self, status: int, message: str) -> Self:
        """An ``error`` event in the middle of the stream (e.g. overloaded)."""
        self._event("error", anthropic_error_body(status, message))
        return self

    def reply(self, *, cut_after: int | None = None) -> StreamReply:
        return StreamReply(tuple(self._events), cut_after=cut_after)

    def _start(self, block: dict[str, Any]) -> None:
        self._event(
            "content_block_start",
            {"type": "content_block_start", "index": self._index, "content_block": block},
        )

    def _block_delta(self, delta: dict[str, Any]) -> None:
        self._event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self._index, "delta": delta},
        )

    def _stop_block(self) -> Self:
        self._event("content_block_stop", {"type": "content_block_stop", "index": self._index})
        self._index += 1
        return self

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self._events.append(SSEEvent(data=json.dumps(payload), event=name, delay=self._next_delay))
        self._next_delay = 0.0


def empty_message(*, model: str = "claude-fake") -> StreamReply:
    """A message that ends normally with no content block at all."""
    return MessageStream(model=model).stop("end_turn", output_tokens=0).reply()
