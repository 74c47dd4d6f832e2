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
            self._swap_script()
            agent, entry = self._next(system)
        if self.record is not None:
            with self.script_lock, self.record.open("a") as file:
                file.write(
                    json.dumps(
                        {
                            "api": "openai" if openai else "gemini",
                            "agent": agent,
                            # Which provider was asked: Gemini's model is in the path.
                            "model": body.get("model") if openai else _gemini_model(path),
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
            headers = {}
            if (delay := entry["error"].get("retry_after")) is not None:
                # When to come back, as each API says it: Gemini's RetryInfo detail,
                # OpenAI's Retry-After header.
                if openai:
                    headers["retry-after"] = f"{delay:g}"
                else:
                    body = gemini.error_body(status, message, retry_delay=delay)
            self._send_error(handler, ErrorReply(status, body, headers))
            return
        if entry.get("block"):
            # TARSy's BlockUntilCancelled: a stream that says nothing until the caller
            # hangs up (a cancelled session closes it).
            self._send_stream(handler, StreamReply((SSEEvent(data="{}", delay=600.0),)))
            return
        if entry.get("hold") and self.record is not None:
            # TARSy's WaitCh: answer only once the test releases the held calls
            # (``"hold": "<gate>"``: once it releases that gate, <record stem>.<gate>.release).
            release = self.record.with_suffix(".release")
            if isinstance(entry["hold"], str):
                release = self.record.with_name(f"{self.record.stem}.{entry['hold']}.release")
            deadline = time.monotonic() + 120
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if any("tool_call" in chunk for chunk in entry.get("chunks") or []):
            entry = _rewrite(entry, body, openai=openai)
        reply = _openai_reply(entry) if openai else _gemini_reply(entry)
        self._send_stream(handler, reply)

    def _swap_script(self) -> None:
        """A test that replays several of TARSy's tests on one deployment puts the next
        one's script at <record stem>.script.json: it replaces what is left of this one."""
        if self.record is None:
            return
        swap = self.record.with_name(f"{self.record.stem}.script.json")
        if swap.exists():
            script = json.loads(swap.read_text())
            swap.unlink()
            self.sequential = deque(script.get("sequential", []))
            self.routed = defaultdict(deque)
            for agent, entries in script.get("routed", {}).items():
                self.routed[agent].extend(entries)

    def _next(self, system: str) -> tuple[str, dict[str, Any] | None]:
        for agent, entries in self.routed.items():
            if entries and re.search(rf"\bYou are {re.escape(agent)}\b", system):
                return agent, entries.popleft()
        return "", self.sequential.popleft() if self.sequential else None


def _gemini_model(path: str) -> str:
    return path.removeprefix("/v1beta/models/").split(":", 1)[0]


def _system_text(body: dict[str, Any], *, openai: bool) -> str:
    if openai:
        return "\n".join(
            str(m.get("content") or "")
            for m in body.get("messages", [])
            if m.get("role") == "system"
        )
    parts = (body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts", [])
    return "\n".join(str(part.get("text", "")) for part in parts)


# TARSy's RewriteChunks (orchestrator_test.go, cancelAgentRewriter): a tool call's arguments
# may name an id the run created, ``{{execution_id:<Agent>}}``: the execution id that the
# dispatch of <Agent> returned, found in the conversation the model is sent.
_DISPATCHED = re.compile(r"\{\{execution_id:([^}]+)\}\}")


def _rewrite(entry: dict[str, Any], body: dict[str, Any], *, openai: bool) -> dict[str, Any]:
    chunks = []
    for chunk in entry["chunks"]:
        if "tool_call" in chunk and _DISPATCHED.search(chunk["tool_call"].get("arguments", "")):
            call = dict(chunk["tool_call"])
            call["arguments"] = _DISPATCHED.sub(
                lambda m: json.dumps(_dispatched_id(body, m.group(1), openai=openai)),
                call["arguments"],
            )
            chunk = {"tool_call": call}
        chunks.append(chunk)
    return {**entry, "chunks": chunks}


def _dispatched_id(body: dict[str, Any], agent: str, *, openai: bool) -> Any:
    """The ``execution_id`` in the result of the dispatch_agent call that named ``agent``."""
    calls: dict[str, Any] = {}  # call id → dispatched agent
    results: list[tuple[str, str]] = []  # (call id, result text)
    if openai:
        for message in body.get("messages", []):
            for call in message.get("tool_calls") or []:
                if call["function"]["name"].endswith("dispatch_agent"):
                    args = json.loads(call["function"].get("arguments") or "{}")
                    calls[call["id"]] = args.get("name")
            if message.get("role") == "tool":
                results.append((message.get("tool_call_id"), str(message.get("content") or "")))
    else:
        for content in body.get("contents", []):
            for part in content.get("parts", []):
                call = part.get("functionCall")
                if call and call.get("name", "").endswith("dispatch_agent"):
                    calls[call.get("id")] = (call.get("args") or {}).get("name")
                response = part.get("functionResponse")
                if response:
                    text = (response.get("response") or {}).get("result", "")
                    results.append((response.get("id"), str(text)))
    for call_id, text in results:
        if calls.get(call_id) == agent:
            # TARSy's result may be JSON then words; the JSON is its first line.
            for candidate in (text, text.split("\n", 1)[0]):
                try:
                    return json.loads(candidate)["execution_id"]
                except (ValueError, KeyError, TypeError):
                    continue
    return None


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
