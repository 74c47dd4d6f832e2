"""Wire-format fake of the Gemini API's streaming endpoint, for the ``google-native`` backend.

``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` — the path google-genai
2.34 builds from a custom ``base_url`` (key in the ``x-goog-api-key`` header) — answers
``data: {GenerateContentResponse JSON}`` server-sent events in the API's camelCase
shape: ``candidates[0].content.parts[]`` with ``text``, ``thought``,
``thoughtSignature`` (base64), ``functionCall{id,name,args}``, ``executableCode``,
``codeExecutionResult``; ``groundingMetadata`` on the candidate; cumulative
``usageMetadata``. Errors are Google's ``{"error": {"code", "message", "status"}}``.

Every request is recorded; replies are replayed from a queue (see ``ScriptedServer``
in ``scripted_http``: per-event delays, cuts without the terminating chunk,
disconnect detection). Builders below make the replies.

Standalone, for a deployment test::

    python tests/llm/fakes/gemini.py --port 8765 --script script.json [--record requests.jsonl]

where ``script.json`` is ``{"replies": [...]}`` (or a bare list) of
``{"chunks": [<GenerateContentResponse>...], "delay": 0.05, "cut_after": 2}``,
``{"status": 429, "message": "…", "retry_after": 7}`` or ``{"empty": true}``.
Point the provider's ``base_url`` at ``http://127.0.0.1:8765``.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the repository root importable for ``tests.llm.fakes``.
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.llm.fakes.scripted_http import (
    ErrorReply,
    Reply,
    ScriptedServer,
    SSEEvent,
    StreamReply,
    _Handler,
    _Server,
)

STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_STREAM_PATH = re.compile(r"^/v1beta/models/[^/:]+:streamGenerateContent$")


class FakeGemini(ScriptedServer):
    """The streaming endpoint; ``base_url`` is what the provider config points at."""

    def __init__(self, *, record_path: Path | None = None) -> None:
        super().__init__()
        self._record_path = record_path
        self._recorded = 0
        self._record_lock = threading.Lock()

    def start(self, port: int = 0) -> None:
        """Like ``ScriptedServer.start``, but on a chosen port for the CLI."""
        if port == 0:
            super().start()
            return
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the requests made so far, in order."""
        return [request.body for request in self.requests]

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and bool(_STREAM_PATH.match(path))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return error_body(status, message)

    def handle(self, handler: Any) -> None:
        super().handle(handler)
        if self._record_path is not None:
            self._append_records()

    def _append_records(self) -> None:
        assert self._record_path is not None
        with self._record_lock:
            new = self.requests[self._recorded :]
            self._recorded += len(new)
            with self._record_path.open("a") as file:
                for request in new:
                    record = {"path": request.path, "query": request.query, "body": request.body}
                    # The API key header is left out: the file may end up in CI artefacts.
                    record["headers"] = {
                        k: v for k, v in request.headers.items() if k != "x-goog-api-key"
                    }
                    file.write(json.dumps(record) + "\n")


# -- signatures -----------------------------------------------------------------------


def encode_signature(raw: bytes) -> str:
    """How Gemini sends a thought signature: standard base64."""
    return base64.b64encode(raw).decode("ascii")


def decode_signature(text: str) -> bytes:
    """Either base64 alphabet (the SDK sends base64url), padding optional."""
    text = text.replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4))


# -- parts ------------------------------------------------------------------------------


def _signed(part: dict[str, Any], signature: bytes | None) -> dict[str, Any]:
    if signature is not None:
        part["thoughtSignature"] = encode_signature(signature)
    return part


def text(content: str, *, signature: bytes | None = None) -> dict[str, Any]:
    return _signed({"text": content}, signature)


def thought(content: str, *, signature: bytes | None = None) -> dict[str, Any]:
    return _signed({"text": content, "thought": True}, signature)


def signature_only(signature: bytes) -> dict[str, Any]:
    """The empty trailing text part Gemini uses to carry a text turn's signature."""
    return _signed({"text": ""}, signature)


def function_call(
    name: str,
    args: dict[str, Any] | None = None,
    *,
    call_id: str | None = None,
    signature: bytes | None = None,
) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args or {}}
    if call_id is not None:
        call["id"] = call_id
    return _signed({"functionCall": call}, signature)


def executable_code(code: str, language: str = "PYTHON") -> dict[str, Any]:
    return {"executableCode": {"language": language, "code": code}}


def code_execution_result(output: str, outcome: str = "OUTCOME_OK") -> dict[str, Any]:
    return {"codeExecutionResult": {"outcome": outcome, "output": output}}


# -- responses --------------------------------------------------------------------------


def usage(prompt: int, candidates: int, *, thoughts: int = 0) -> dict[str, int]:
    counts = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
    }
    if thoughts:
        counts["thoughtsTokenCount"] = thoughts
    return counts


def grounding(queries: Sequence[str], sources: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``groundingMetadata`` as google_search returns it: queries, web chunks, entry point."""
    return {
        "webSearchQueries": list(queries),
        "groundingChunks": [{"web": {"uri": uri, "title": title}} for uri, title in sources],
        "searchEntryPoint": {"renderedContent": "<div>search</div>"},
    }


def response(
    *parts: dict[str, Any],
    finish_reason: str | None = None,
    usage_metadata: dict[str, int] | None = None,
    grounding_metadata: dict[str, Any] | None = None,
    model: str = "gemini-fake",
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` chunk."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish_reason:
        candidate["finishReason"] = finish_reason
    if grounding_metadata:
        candidate["groundingMetadata"] = grounding_metadata
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": "r1"}
    if usage_metadata:
        chunk["usageMetadata"] = usage_metadata
    return chunk


def blocked(reason: str = "SAFETY") -> dict[str, Any]:
    """The prompt itself was blocked: no candidates, only ``promptFeedback``."""
    return {"promptFeedback": {"blockReason": reason}, "usageMetadata": usage(5, 0)}


def stream(
    *chunks: dict[str, Any],
    delay: float | Sequence[float] = 0.0,
    cut_after: int | None = None,
) -> StreamReply:
    """SSE events, one per chunk; ``delay`` before each (or per chunk); ``cut_after`` N
    chunks the connection is closed without finishing the body."""
    delays = [delay] * len(chunks) if isinstance(delay, int | float) else list(delay)
    if len(delays) != len(chunks):
        raise ValueError("one delay per chunk")
    events = tuple(
        SSEEvent(data=json.dumps(chunk), delay=float(wait))
        for chunk, wait in zip(chunks, delays, strict=True)
    )
    return StreamReply(events, cut_after=cut_after)


def text_reply(content: str = "All good.", **kwargs: Any) -> StreamReply:
    """A complete one-chunk answer."""
    return stream(
        response(text(content), finish_reason="STOP", usage_metadata=usage(10, 5), **kwargs)
    )


def empty() -> StreamReply:
    """A 200 stream whose only chunk has no parts — what Gemini sends for an empty turn."""
    return stream(
        {
            "candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage(10, 0),
            "modelVersion": "gemini-fake",
        }
    )


def error_body(status: int, message: str, *, retry_delay: float | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if retry_delay is not None:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_delay:g}s"}
        ]
    return {"error": error}


def error(
    status: int,
    message: str,
    *,
    retry_after: float | None = None,
    retry_delay: float | None = None,
) -> ErrorReply:
    """An HTTP error; ``retry_after`` as a header, ``retry_delay`` as Gemini's RetryInfo."""
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return ErrorReply(status, error_body(status, message, retry_delay=retry_delay), headers)


def reply_from_json(spec: dict[str, Any]) -> Reply:
    """One scripted reply from the CLI's JSON script."""
    if spec.get("empty"):
        return empty()
    if "status" in spec:
        status = int(spec["status"])
        if "body" in spec:
            headers = {"Retry-After": f"{spec['retry_after']:g}"} if "retry_after" in spec else {}
            return ErrorReply(status, spec["body"], headers)
        return error(
            status,
            spec.get("message", "scripted error"),
            retry_after=spec.get("retry_after"),
            retry_delay=spec.get("retry_delay"),
        )
    chunks = spec.get("chunks")
    if not isinstance(chunks, list):
        raise ValueError(f"a reply needs 'chunks', 'status' or 'empty': {spec!r}")
    return stream(*chunks, delay=spec.get("delay", 0.0), cut_after=spec.get("cut_after"))


def load_script(path: Path) -> list[Reply]:
    raw = json.loads(path.read_text())
    replies = raw.get("replies") if isinstance(raw, dict) else raw
    if not isinstance(replies, list):
        raise ValueError(f"{path}: expected a list of replies or {{'replies': [...]}}")
    return [reply_from_json(spec) for spec in replies]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake Gemini streaming API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, required=True, help="JSON script of replies")
    parser.add_argument("--record", type=Path, help="append each request as a JSON line")
    args = parser.parse_args(argv)
    server = FakeGemini(record_path=args.record)
    server.enqueue(*load_script(args.script))
    server.start(args.port)
    # The chosen URL on stdout, for a parent process that passed --port 0.
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
