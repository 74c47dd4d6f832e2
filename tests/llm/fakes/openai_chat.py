"""Wire-format fake of OpenAI Chat Completions streaming (and compatible servers).

``POST /v1/chat/completions`` with ``stream: true`` answers ``chat.completion.chunk``
server-sent events ending in ``data: [DONE]``, shaped as OpenAI sends them: every
chunk carries ``usage: null`` until a final choice-less usage chunk (requested with
``stream_options.include_usage``); tool calls arrive as ``delta.tool_calls`` whose
first fragment has ``index``/``id``/``function.name`` and later ones only argument
text. ``delta.reasoning_content`` is what vLLM, DeepSeek and xAI send for reasoning.
"""

from __future__ import annotations

import json
from typing import Any, Self

from tests.llm.fakes.scripted_http import ErrorReply, ScriptedServer, SSEEvent, StreamReply

# OpenAI's error ``type``/``code`` per status, as its API answers them.
_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


class FakeOpenAIChat(ScriptedServer):
    @property
    def base_url(self) -> str:
        """What an OpenAI SDK ``base_url`` should be set to."""
        return f"{self.url}/v1"

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/v1/chat/completions"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error_body(status, message)


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    error_type, code = _ERROR_KINDS.get(status, ("server_error", None))
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def openai_error(status: int, message: str, *, retry_after: float | None = None) -> ErrorReply:
    headers = {"x-request-id": "req_fake"}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    return ErrorReply(status, openai_error_body(status, message), headers)


class ChatCompletionStream:
    """Builds one streamed completion chunk by chunk.

    >>> ChatCompletionStream().text("Hello").finish("stop").usage(5, 1).reply()
    """

    def __init__(self, *, model: str = "gpt-fake", completion_id: str = "chatcmpl-fake") -> None:
        self._model = model
        self._id = completion_id
        self._events: list[SSEEvent] = []
        self._next_delay = 0.0
        self._role_sent = False

    def delay(self, seconds: float) -> Self:
        """Wait this long before sending the next chunk."""
        self._next_delay = seconds
        return self

    def reasoning(self, *fragments: str) -> Self:
        for fragment in fragments:
            self._delta({"content": None, "reasoning_content": fragment})
        return self

    def text(self, *fragments: str) -> Self:
        for fragment in fragments:
            self._delta({"content": fragment})
        return self

    def tool_call(self, index: int, call_id: str, name: str, *argument_fragments: str) -> Self:
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        self._delta({"content": None, "tool_calls": [first]})
        for fragment in argument_fragments:
            self._delta({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        return self

    def finish(self, reason: str = "stop") -> Self:
        self._chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}])
        return self

    def usage(self, prompt: int, completion: int, *, reasoning: int = 0) -> Self:
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        self._chunk([], usage=usage)
        return self

    def reply(self, *, cut_after: int | None = None, done: bool = True) -> StreamReply:
        events = list(self._events)
        if done:
            events.append(SSEEvent(data="[DONE]", delay=self._next_delay))
        return StreamReply(tuple(events), cut_after=cut_after)

    def _delta(self, delta: dict[str, Any]) -> None:
        if not self._role_sent:
            # The first chunk of a real stream names the role.
            delta = {"role": "assistant", **delta}
            self._role_sent = True
        self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def _chunk(self, choices: list[dict[str, Any]], *, usage: dict[str, Any] | None = None) -> None:
        payload = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": 1_760_000_000,
            "model": self._model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
            "usage": usage,
        }
        self._events.append(SSEEvent(data=json.dumps(payload), delay=self._next_delay))
        self._next_delay = 0.0


def empty_completion(*, model: str = "gpt-fake") -> StreamReply:
    """A stream that ends normally with no content at all (only a stop and usage)."""
    return ChatCompletionStream(model=model).text("").finish("stop").usage(12, 0).reply()
