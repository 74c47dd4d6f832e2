"""The ``scripted`` backend: replays turns of thinking, text, tool calls and errors.

It is a real provider — it streams through the same interface as the SDK backends —
used for the demo and for tests. A provider row of type ``scripted`` selects the
script with ``options``: ``{"script": "demo"}`` (the default: a built-in investigation
that reads the demo cluster's tool results) or ``{"script": "/path/to/script.yaml"}``.

Script files look like::

    chunk_delay: 0.02            # seconds between streamed words (default 0.02)
    turns:                       # turn N answers the request with N assistant messages
      - thinking: "Let me look at the pods."
        tool_calls: [{name: kubernetes.get_pods, arguments: {namespace: payments}}]
      - code_executions: [{code: "print(2 ** 10)", result: "1024"}]   # optional
        text: "The pod crashes because …"
        error: {code: rate_limit, message: "slow down", retryable: true}   # optional
    agents:                      # optional: an agent's own turns, by agent name
      EventsAgent:
        turns: [...]

An agent with no turns of its own uses ``turns``, except the synthesis and executive
summary steps, which then answer like the demo does (a merge of the findings they are
given, a short summary), so a script for a parallel chain needs to say only what its
investigating agents do.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm.types import (
    CodeExecutionDelta,
    Delta,
    ErrorInfo,
    GenerateRequest,
    Role,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageInfo,
)
from masking.bounded import load_yaml

DEFAULT_CHUNK_DELAY = 0.02
_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class ScriptTurn:
    thinking: str = ""
    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    error: ErrorInfo | None = None
    chunk_delay: float | None = None
    # (code, output) pairs, as Gemini's code_execution native tool reports them.
    code_executions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Script:
    turns: tuple[ScriptTurn, ...]
    chunk_delay: float = DEFAULT_CHUNK_DELAY
    extras: dict[str, Any] = field(default_factory=dict)
    agents: dict[str, tuple[ScriptTurn, ...]] = field(default_factory=dict)

    def turn_for(self, request: GenerateRequest) -> ScriptTurn:
        turns = self.agents.get(request.agent_name)
        if turns is None:
            from llm.demo_script import single_shot_turn

            if (built_in := single_shot_turn(request)) is not None:
                return built_in
            turns = self.turns
        index = sum(1 for m in request.messages if m.role == Role.ASSISTANT)
        if index >= len(turns):
            return ScriptTurn(
                error=ErrorInfo(
                    "script_exhausted",
                    f"the script has {len(turns)} turns for {request.agent_name or 'agents'}; "
                    f"turn {index + 1} was requested",
                )
            )
        return turns[index]


class ScriptError(ValueError):
    pass


SCRIPT_CHARS = 16 * 1024 * 1024  # a test's script may carry large tool results


def load_script(path: str | Path) -> Script:
    path = Path(path)
    try:
        raw = load_yaml(path.read_text(), what=f"script {path}", max_chars=SCRIPT_CHARS)
    except (OSError, ValueError, yaml.YAMLError) as exc:  # bounded.UnsafeInput: ValueError
        raise ScriptError(f"cannot read script {path}: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("turns"), list):
        raise ScriptError(f"{path}: a script is a mapping with a list of 'turns'")
    agents_raw = raw.get("agents") or {}
    if not isinstance(agents_raw, dict):
        raise ScriptError(f"{path}: 'agents' must map agent names to {{turns: [...]}}")
    agents = {}
    for name, body in agents_raw.items():
        if not isinstance(body, dict) or not isinstance(body.get("turns"), list):
            raise ScriptError(f"{path}: agents.{name} must be a mapping with a list of 'turns'")
        agents[str(name)] = _turns(path, body["turns"], f"agents.{name}.turns")
    return Script(
        _turns(path, raw["turns"], "turns"),
        float(raw.get("chunk_delay", DEFAULT_CHUNK_DELAY)),
        agents=agents,
    )


def _turns(path: Path, raw_turns: list[Any], key: str) -> tuple[ScriptTurn, ...]:
    turns = []
    for index, turn in enumerate(raw_turns):
        if not isinstance(turn, dict):
            raise ScriptError(f"{path}: {key}[{index}] must be a mapping")
        error = turn.get("error")
        turns.append(
            ScriptTurn(
                thinking=str(turn.get("thinking", "")),
                text=str(turn.get("text", "")),
                tool_calls=tuple(
                    (call["name"], dict(call.get("arguments") or {}))
                    for call in turn.get("tool_calls") or ()
                ),
                error=ErrorInfo(
                    str(error.get("code", "scripted_error")),
                    str(error.get("message", "scripted error")),
                    bool(error.get("retryable", False)),
                )
                if error
                else None,
                chunk_delay=turn.get("chunk_delay"),
                code_executions=tuple(
                    (str(run.get("code", "")), str(run.get("result", "")))
                    for run in turn.get("code_executions") or ()
                ),
            )
        )
    return tuple(turns)


class ScriptedProvider:
    def __init__(self) -> None:
        self._scripts: dict[str, Script] = {}

    def _turn(self, request: GenerateRequest) -> tuple[ScriptTurn, float]:
        source = str(request.config.options.get("script", "demo"))
        if source == "demo":
            from llm.demo_script import demo_turn

            turn = demo_turn(request)
            return turn, float(request.config.options.get("chunk_delay", DEFAULT_CHUNK_DELAY))
        if source not in self._scripts:
            self._scripts[source] = load_script(source)
        script = self._scripts[source]
        turn = script.turn_for(request)
        return turn, turn.chunk_delay if turn.chunk_delay is not None else script.chunk_delay

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[Delta, None]:
        try:
            turn, delay = self._turn(request)
        except ScriptError as exc:
            yield ErrorInfo("invalid_request", str(exc))
            return
        output_words = 0
        for text, kind in ((turn.thinking, ThinkingDelta), (turn.text, TextDelta)):
            for word in _WORDS.findall(text):
                if delay:
                    await asyncio.sleep(delay)
                output_words += 1
                yield kind(word)
        for code, result in turn.code_executions:
            yield CodeExecutionDelta(code=code)
            yield CodeExecutionDelta(result=result)
        offered = {tool.name for tool in request.tools}
        for name, arguments in turn.tool_calls:
            if name in offered:
                yield ToolCallDelta(f"call_{uuid.uuid4().hex[:12]}", name, arguments)
        input_words = sum(len(m.content.split()) for m in request.messages)
        yield UsageInfo(
            input_tokens=input_words,
            output_tokens=output_words,
            total_tokens=input_words + output_words,
        )
        if turn.error:
            yield turn.error
