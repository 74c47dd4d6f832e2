"""TARSy's scripted LLM (``test/e2e/mock_llm.go``) at the wire of each provider.

One HTTP server answers both APIs the scenarios' providers use: Gemini's streaming
endpoint (``google`` providers, either backend) and OpenAI's chat completions
(``openai`` providers). A scenario's script is TARSy's: entries of chunks (thinking,
text, tool calls, usage, grounding) or a plain text, consumed in order
(``sequential``) or per agent (``routed``: parallel agents, matched by the
``You are <Agent>`` of their instructions, as TARSy's mock matches them). Each entry is
rendered in the wire format of the API it is asked through.

Run standalone by the scenario tests (its own process, so the worker's calls reach it):

    python tests/compat/scenarios/fake_llm.py PORT SCRIPT.json RECORD.jsonl
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.llm.fakes import gemini
from tests.llm.fakes.openai_chat import ChatCompletionStream, openai_error_body
from tests.llm.fakes.scripted_http import (
    ErrorReply,
    ScriptedServer,
    SSEEvent,
    StreamReply,
    _Handler,
    _Server,
)

_GEMINI = re.compile(r"^/v1beta/models/[^/:]+:streamGenerateContent$")
_OPENAI = "/v1/chat/completions"


class ScenarioLLM(ScriptedServer):
    """Replies from a TARSy script: ``{"sequential": [entry…], "routed": {agent: [entry…]}}``."""

    def __init__(self, script: dict[str, Any], record: Path | None = None) -> None:
        super().__init__()
        self.sequential: deque[dict[str, Any]] = deque(script.get("sequential", []))
        self.routed: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        for agent, entries in script.get("routed", {}).items():
            self.routed[agent].extend(entries)
        self.record = record
        self.script_lock = threading.Lock()

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and (bool(_GEMINI.match(path)) or path == _OPENAI)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return gemini.error_body(status, message)

    def handle(self, handler: _Handler) -> None:
        # Replies are chosen per request (by agent), not queued ahead.
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length) or b"{}")
        path = handler.path.split("?")[0]
        openai = path == _OPENAI
        system = _system_text(body, openai=openai)
        with self.script_lock:
            agent, entry = self._next(system)
        if self.record is not None:
            with self.script_lock, self.record.open("a") as file:
                file.write(
                    json.dumps(
                        {
                            "api": "openai" if openai else "gemini",
                            "agent": agent,
                            "answered": entry is not None and "error" not in entry,
                            "blocked": bool(entry and (entry.get("block") or entry.get("hold"))),
                            "body": body,
                        }
                    )
                    + "\n"
                )
        if entry is None:
            entry = {"error": {"status": 500, "message": "scenario: no scripted entry left"}}
        if "error" in entry:
            # TARSy's ``Error`` entries: the provider answers with an error status.
            status, message = entry["error"]["status"], entry["error"]["message"]
            body = (
                openai_error_body(status, message) if openai else self.error_body(status, message)
            )
            self._send_error(handler, ErrorReply(status, body))
            return
        if entry.get("block"):
            # TARSy's BlockUntilCancelled: a stream that says nothing until the caller
            # hangs up (a cancelled session closes it).
            self._send_stream(handler, StreamReply((SSEEvent(data="{}", delay=600.0),)))
            return
        if entry.get("hold") and self.record is not None:
            # TARSy's WaitCh: answer only once the test releases the held calls.
            release = self.record.with_suffix(".release")
            deadline = time.monotonic() + 120
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        reply = _openai_reply(entry) if openai else _gemini_reply(entry)
        self._send_stream(handler, reply)

    def _next(self, system: str) -> tuple[str, dict[str, Any] | None]:
        for agent, entries in self.routed.items():
            if entries and re.search(rf"\bYou are {re.escape(agent)}\b", system):
                return agent, entries.popleft()
        return "", self.sequential.popleft() if self.sequential else None


def _system_text(body: dict[str, Any], *, openai: bool) -> str:
    if openai:
        return "\n".join(
            str(m.get("content") or "")
            for m in body.get("messages", [])
            if m.get("role") == "system"
        )
    parts = (body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts", [])
    return "\n".join(str(part.get("text", "")) for part in parts)


def _chunks(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return entry.get("chunks") or [{"text": entry.get("text", "")}, {"usage": [10, 5]}]


def _gemini_reply(entry: dict[str, Any]) -> StreamReply:
    """One GenerateContentResponse per chunk, as Gemini streams them; usage last."""
    responses: list[dict[str, Any]] = []
    usage = gemini.usage(10, 5)
    grounding = None
    for chunk in _chunks(entry):
        if "thinking" in chunk:
            responses.append(gemini.response(gemini.thought(chunk["thinking"])))
        elif "text" in chunk:
            responses.append(gemini.response(gemini.text(chunk["text"])))
        elif "tool_call" in chunk:
            call = chunk["tool_call"]
            args = json.loads(call.get("arguments") or "{}")
            responses.append(
                gemini.response(gemini.function_call(call["name"], args, call_id=call["id"]))
            )
        elif "usage" in chunk:
            usage = gemini.usage(*chunk["usage"])
        elif "grounding" in chunk:
            grounding = gemini.grounding(
                chunk["grounding"]["queries"],
                [(s["uri"], s["title"]) for s in chunk["grounding"]["sources"]],
            )
    responses.append(
        gemini.response(finish_reason="STOP", usage_metadata=usage, grounding_metadata=grounding)
    )
    return gemini.stream(*responses)


def _openai_reply(entry: dict[str, Any]) -> StreamReply:
    stream = ChatCompletionStream(model="test-model-fast")
    usage = (10, 5)
    calls = 0
    for chunk in _chunks(entry):
        if "thinking" in chunk:
            stream.reasoning(chunk["thinking"])
        elif "text" in chunk:
            stream.text(chunk["text"])
        elif "tool_call" in chunk:
            call = chunk["tool_call"]
            stream.tool_call(calls, call["id"], call["name"], call.get("arguments") or "{}")
            calls += 1
        elif "usage" in chunk:
            usage = tuple(chunk["usage"])
    stream.finish("tool_calls" if calls else "stop")
    return stream.usage(*usage).reply()


def main() -> None:
    port, script, record = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    server = ScenarioLLM(json.loads(script.read_text()), record)
    server._server = _Server(("127.0.0.1", port), _Handler)
    server._server.owner = server
    print("ready", flush=True)
    server._server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
