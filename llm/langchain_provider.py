"""The ``langchain`` backend: OpenAI (and compatible servers), Anthropic, Google, xAI
and Vertex AI through LangChain chat models.

Each call converts the whole conversation to LangChain messages, binds the tools
under API-safe names and streams one turn. Text and reasoning are forwarded chunk by
chunk from LangChain's provider-neutral ``content_blocks``; tool-call fragments are
gathered per stream index and emitted whole when the stream ends (docs/design/seeds.md,
seed 001 Q11), followed by the turn's token usage. Transient failures are retried by
``llm.retry.stream_with_retries``; whatever is left ends the stream as ``ErrorInfo``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Hashable, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from google.genai import errors as genai_errors
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call
from langchain_core.runnables import Runnable
from langchain_google_genai.chat_models import ChatGoogleGenerativeAIError

from llm.clients import PerLoopCache, creation_error
from llm.errors import INVALID_TOOL_CALL
from llm.langchain_models import create_chat_model, model_key
from llm.retry import DEFAULT_POLICY, RetryPolicy, Sleep, stream_with_retries
from llm.tool_names import tool_name_from_api, tool_name_to_api
from llm.types import (
    ConversationMessage,
    Delta,
    ErrorInfo,
    GenerateRequest,
    ProviderConfig,
    Role,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolDefinition,
    UsageInfo,
)
from masking.bounded import UnsafeInput, json_problem, load_json

ARGUMENTS_LIMIT = 1024 * 1024  # characters of one tool call's arguments

# A chat model, or one with its tools bound (both stream AIMessageChunks).
ChatRunnable = Runnable[LanguageModelInput, AIMessage]


class LangChainProvider:
    """Streams one model turn through LangChain; see the module docstring."""

    def __init__(
        self, *, sleep: Sleep = asyncio.sleep, policy: RetryPolicy = DEFAULT_POLICY
    ) -> None:
        self._sleep = sleep
        self._policy = policy
        self._models: PerLoopCache[BaseChatModel] = PerLoopCache()

    def chat_model(self, config: ProviderConfig) -> BaseChatModel:
        """The cached chat model for ``config`` on the running event loop.

        Models hold connection pools bound to the loop that opened them, and a worker
        runs every session in its own ``asyncio.run``; a model from a finished loop
        fails with "Event loop is closed", so it is replaced rather than reused.
        """
        return self._models.get(model_key(config), lambda: create_chat_model(config))

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[Delta, None]:
        config = request.config
        try:
            model = self.chat_model(config)
        except Exception as exc:
            yield creation_error(config, exc, "chat model")
            return
        messages = to_langchain_messages(request.messages)
        runnable: ChatRunnable = model
        if request.tools:
            runnable = model.bind_tools([tool_schema(tool) for tool in request.tools])

        def attempt() -> AsyncIterator[Delta]:
            return stream_turn(runnable, messages)

        retried = stream_with_retries(
            attempt, policy=self._policy, sleep=self._sleep, label=f"langchain {config.name}"
        )
        # aclosing: a consumer that stops early closes the HTTP stream now, not at GC.
        async with aclosing(retried) as deltas:
            async for delta in deltas:
                yield delta


async def stream_turn(runnable: ChatRunnable, messages: list[BaseMessage]) -> AsyncIterator[Delta]:
    """One attempt: stream a turn, then its whole tool calls, then its usage."""
    calls = ToolCallBuffer()
    usage = UsageTotals()
    try:
        # astream is an async generator, though annotated as an AsyncIterator.
        async with aclosing(runnable.astream(messages)) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                for delta in chunk_deltas(chunk, calls):
                    yield delta
                usage.add(getattr(chunk, "usage_metadata", None))
    except ChatGoogleGenerativeAIError as exc:
        # langchain-google-genai re-raises google-genai's errors as its own types
        # without the status code or the error body (where Gemini puts the retry delay
        # of a per-minute limit); classify the SDK's original like google-native does.
        if isinstance(exc.__cause__, genai_errors.APIError):
            raise exc.__cause__ from None
        raise
    for item in calls.finish():
        yield item
    if usage.seen:
        yield usage.info()


def chunk_deltas(chunk: BaseMessage, calls: ToolCallBuffer) -> Iterator[Delta]:
    blocks = chunk.content_blocks
    if not any(block.get("type") == "reasoning" for block in blocks):
        # ChatOpenAI's block translator ignores the reasoning text of OpenAI-compatible
        # servers; ChatOpenAICompatible keeps it here.
        reasoning = chunk.additional_kwargs.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            yield ThinkingDelta(reasoning)
    for block in blocks:
        kind = block.get("type")
        if kind == "reasoning":
            # Anthropic's signature arrives as a reasoning block with no text.
            if isinstance(text := block.get("reasoning"), str) and text:
                yield ThinkingDelta(text)
        elif kind == "text":
            if isinstance(text := block.get("text"), str) and text:
                yield TextDelta(text)
        elif kind == "tool_call_chunk":
            calls.add_fragment(block)
        elif kind == "tool_call":
            # Gemini delivers calls whole.
            calls.add_whole(block)


@dataclass
class _PendingCall:
    call_id: str
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    arguments: dict[str, Any] | None = None  # set when the call arrived whole


class ToolCallBuffer:
    """Tool-call pieces gathered per stream index until the turn is complete."""

    def __init__(self) -> None:
        self._calls: dict[Hashable, _PendingCall] = {}
        self._current: dict[Hashable, Hashable] = {}  # stream index → key of its call

    def add_fragment(self, block: Mapping[str, Any]) -> None:
        call_id = block.get("id") or ""
        index = block.get("index")
        if index is None:
            index = call_id or (next(reversed(self._current)) if self._current else 0)
        key = self._current.get(index, index)
        pending = self._calls.get(key)
        if pending is not None and call_id and pending.call_id and call_id != pending.call_id:
            # Some OpenAI-compatible servers number every parallel call 0; a new id
            # is what tells the calls apart.
            key, pending = (index, call_id), None
        if pending is None:
            pending = self._calls[key] = _PendingCall(call_id)
        self._current[index] = key
        pending.call_id = pending.call_id or call_id
        pending.name = pending.name or block.get("name") or ""
        if arguments := block.get("args"):
            pending.fragments.append(arguments)

    def add_whole(self, block: Mapping[str, Any]) -> None:
        call_id = block.get("id") or ""
        if call_id and any(pending.call_id == call_id for pending in self._calls.values()):
            return
        arguments = block.get("args")
        self._calls[("whole", len(self._calls))] = _PendingCall(
            call_id,
            name=block.get("name") or "",
            arguments=arguments if isinstance(arguments, dict) else None,
            fragments=[] if isinstance(arguments, dict) else [json.dumps(arguments)],
        )

    def finish(self) -> list[ToolCallDelta] | list[ErrorInfo]:
        complete: list[ToolCallDelta] = []
        for pending in self._calls.values():
            arguments = pending.arguments
            problem = ""
            if arguments is None:
                text = "".join(pending.fragments).strip() or "{}"
                try:
                    arguments = load_json(text, what="the JSON", max_chars=ARGUMENTS_LIMIT)
                except UnsafeInput as exc:
                    arguments, problem = None, str(exc)
                except ValueError:
                    arguments = None
            if isinstance(arguments, dict) and (found := json_problem(arguments)):
                problem = f"the JSON {found}"
            if not pending.name or not isinstance(arguments, dict) or problem:
                shown = "".join(pending.fragments)[:200]
                return [
                    ErrorInfo(
                        INVALID_TOOL_CALL,
                        f"the model sent an unusable tool call {pending.name or '(no name)'}"
                        f" with arguments {shown!r}; {problem or 'expected a JSON object'}",
                        retryable=True,
                    )
                ]
            complete.append(
                ToolCallDelta(
                    # Some OpenAI-compatible servers omit ids; results are matched by id.
                    call_id=pending.call_id or f"call_{uuid.uuid4().hex}",
                    name=tool_name_from_api(pending.name),
                    arguments=arguments,
                )
            )
        return complete


@dataclass
class UsageTotals:
    """Sums LangChain ``usage_metadata`` over a stream's chunks.

    OpenAI and Anthropic report usage once; LangChain turns Gemini's cumulative
    counts into per-chunk increments, so adding them up is right for all three.
    """

    seen: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    thinking_tokens: int = 0

    def add(self, usage: Mapping[str, Any] | None) -> None:
        if not usage:
            return
        self.seen = True
        self.input_tokens += usage.get("input_tokens") or 0
        self.output_tokens += usage.get("output_tokens") or 0
        self.total_tokens += usage.get("total_tokens") or 0
        details = usage.get("output_token_details") or {}
        # OpenAI's priority/flex tiers report "priority_reasoning" instead.
        self.thinking_tokens += sum(
            count or 0
            for name, count in details.items()
            if name == "reasoning" or name.endswith("_reasoning")
        )

    def info(self) -> UsageInfo:
        return UsageInfo(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.total_tokens or self.input_tokens + self.output_tokens,
            thinking_tokens=self.thinking_tokens,
        )


def to_langchain_messages(messages: Sequence[ConversationMessage]) -> list[BaseMessage]:
    converted: list[BaseMessage] = []
    for message in messages:
        match message.role:
            case Role.SYSTEM:
                converted.append(SystemMessage(content=message.content))
            case Role.USER:
                converted.append(HumanMessage(content=message.content))
            case Role.ASSISTANT:
                converted.append(
                    AIMessage(
                        content=message.content,
                        tool_calls=[
                            tool_call(
                                name=tool_name_to_api(call.name), args=call.arguments, id=call.id
                            )
                            for call in message.tool_calls
                        ],
                    )
                )
            case Role.TOOL:
                converted.append(
                    ToolMessage(
                        content=message.content,
                        tool_call_id=message.tool_call_id,
                        name=tool_name_to_api(message.tool_name) if message.tool_name else None,
                    )
                )
            case _:
                raise ValueError(f"unknown conversation role {message.role!r}")
    return converted


def tool_schema(tool: ToolDefinition) -> dict[str, Any]:
    """An OpenAI-style function schema; every LangChain chat model accepts this shape."""
    return {
        "type": "function",
        "function": {
            "name": tool_name_to_api(tool.name),
            "description": tool.description,
            "parameters": tool.parameters_schema or {"type": "object", "properties": {}},
        },
    }
