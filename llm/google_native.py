"""The ``google-native`` backend: Gemini through the google-genai SDK directly, for
what only the SDK exposes: thought summaries, thought signatures, native tools
(``google_search``, ``code_execution``, ``url_context``) and code-execution parts.

Wire (google-genai 2.34, Gemini Developer API): ``POST {base_url}/v1beta/models/
{model}:streamGenerateContent?alt=sse``, key in the ``x-goog-api-key`` header, answered
by ``data: {GenerateContentResponse}`` events. Retries belong to
``llm.retry.stream_with_retries``; the SDK's own are off.

Thought signatures (docs/design/seeds.md, seed 000 Q3): Gemini wants each signature back
on the same part in later turns, and Gemini 3 rejects function calls that lost theirs. They
are kept in memory per ``execution_id`` (one agent conversation) until an hour after last use:

* on a ``functionCall`` part: keyed by the call id (what the agent keeps in
  ``ToolCall.id``), sent back on that call's part;
* on any other part (text, thought, or the empty trailing part Gemini uses for it):
  keyed by turn — the number of assistant messages before the call — with the turn's
  text, sent back on that assistant message's text part only if its text is unchanged
  (an edited conversation gets no signature rather than a wrong one). Thought parts are
  not in the conversation, so their signature rides on the text.

An unknown signature on Gemini 3 (restart, expiry, foreign history) is replaced by
Google's documented ``skip_thought_signature_validator`` sentinel.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from google import genai
from google.genai import types

from llm.clients import PerLoopCache, creation_error, env_value
from llm.errors import INVALID_REQUEST, INVALID_TOOL_CALL
from llm.retry import DEFAULT_POLICY, RetryPolicy, Sleep, stream_with_retries
from llm.tool_names import tool_name_from_api, tool_name_to_api
from llm.types import (
    CodeExecutionDelta,
    ConversationMessage,
    Delta,
    ErrorInfo,
    GenerateRequest,
    GroundingInfo,
    ProviderConfig,
    Role,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageInfo,
)
from masking.bounded import json_problem

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
# Thought signatures, function-call ids and thinking levels are v1beta features; pinned
# so that an SDK upgrade cannot move the backend to another API version silently.
API_VERSION = "v1beta"
SIGNATURE_TTL_SECONDS = 3600.0
# Gemini blocked the prompt itself (promptFeedback.blockReason): asking again is futile.
PROMPT_BLOCKED = "prompt_blocked"
# https://cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures — the SDK
# base64url-encodes bytes, so these bytes go on the wire as exactly that string.
SKIP_SIGNATURE_VALIDATOR = base64.urlsafe_b64decode("skip_thought_signature_validator")

_NATIVE_TOOLS: dict[str, Callable[[], types.Tool]] = {
    "google_search": lambda: types.Tool(google_search=types.GoogleSearch()),
    "code_execution": lambda: types.Tool(code_execution=types.ToolCodeExecution()),
    "url_context": lambda: types.Tool(url_context=types.UrlContext()),
}

ClientKey = tuple[str, str, str]


def thinking_config(model: str) -> types.ThinkingConfig:
    """Thinking per model name (docs/design/seeds.md, seed 003); thoughts always on."""
    name = model.lower()
    if "2.5-pro" in name:
        return types.ThinkingConfig(thinking_budget=32768, include_thoughts=True)
    if "2.5-flash" in name:
        return types.ThinkingConfig(thinking_budget=24576, include_thoughts=True)
    if _is_gemini_3(name):
        # Gemini 3 replaces token budgets with levels.
        return types.ThinkingConfig(thinking_level=types.ThinkingLevel.HIGH, include_thoughts=True)
    return types.ThinkingConfig(thinking_budget=24576, include_thoughts=True)


def _is_gemini_3(model: str) -> bool:
    return "gemini-3" in model.lower()


@dataclass
class _ExecutionSignatures:
    touched: float
    calls: dict[str, bytes] = field(default_factory=dict)  # function call id → signature
    turns: dict[int, tuple[str, bytes]] = field(default_factory=dict)  # turn → (text, sig)


class ThoughtSignatureCache:
    """Signatures per execution, dropped ``ttl`` seconds after the execution's last use."""

    def __init__(self, clock: Callable[[], float], ttl: float = SIGNATURE_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = ttl
        self._entries: dict[str, _ExecutionSignatures] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def purge(self) -> None:
        cutoff = self._clock() - self._ttl
        for execution_id in [k for k, v in self._entries.items() if v.touched < cutoff]:
            del self._entries[execution_id]

    def remember_call(self, execution_id: str, call_id: str, signature: bytes) -> None:
        if execution_id:
            self._entry(execution_id).calls[call_id] = signature

    def remember_turn(self, execution_id: str, turn: int, text: str, signature: bytes) -> None:
        if execution_id:
            self._entry(execution_id).turns[turn] = (text, signature)

    def for_call(self, execution_id: str, call_id: str) -> bytes | None:
        entry = self._live(execution_id)
        return entry.calls.get(call_id) if entry else None

    def for_turn(self, execution_id: str, turn: int, text: str) -> bytes | None:
        entry = self._live(execution_id)
        stored = entry.turns.get(turn) if entry else None
        return stored[1] if stored is not None and stored[0] == text else None

    def _entry(self, execution_id: str) -> _ExecutionSignatures:
        entry = self._live(execution_id)
        if entry is None:
            entry = self._entries[execution_id] = _ExecutionSignatures(self._clock())
        return entry

    def _live(self, execution_id: str) -> _ExecutionSignatures | None:
        """The execution's entry unless expired; reading it counts as use."""
        entry = self._entries.get(execution_id) if execution_id else None
        if entry is None:
            return None
        now = self._clock()
        if entry.touched < now - self._ttl:
            del self._entries[execution_id]
            return None
        entry.touched = now
        return entry


class GoogleNativeProvider:
    """Streams one Gemini turn through google-genai; see the module docstring."""

    def __init__(
        self,
        *,
        sleep: Sleep = asyncio.sleep,
        policy: RetryPolicy = DEFAULT_POLICY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sleep = sleep
        self._policy = policy
        self.signatures = ThoughtSignatureCache(clock)
        self._clients: PerLoopCache[genai.Client] = PerLoopCache()

    def client_for(self, config: ProviderConfig) -> genai.Client:
        """The cached SDK client for ``config`` on the running loop; reads the key once."""
        key: ClientKey = (config.type, config.api_key_env, config.base_url)
        return self._clients.get(key, lambda: _create_client(config))

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[Delta, None]:
        config = request.config
        self.signatures.purge()
        try:
            client = self.client_for(config)
        except Exception as exc:
            yield creation_error(config, exc, "Gemini client")
            return
        if not config.model:
            yield ErrorInfo(INVALID_REQUEST, f"LLM provider {config.name!r} names no model")
            return
        turn = sum(1 for message in request.messages if message.role == Role.ASSISTANT)
        try:
            contents, system = build_contents(
                request.messages, self.signatures, request.execution_id
            )
            if _is_gemini_3(config.model):
                patch_missing_call_signatures(contents)
            generate_config = types.GenerateContentConfig(
                system_instruction=types.Content(parts=system) if system else None,
                tools=build_tools(request) or None,
                thinking_config=thinking_config(config.model),
                automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
                # Continuation re-requests a broken stream inside the SDK; retries are ours.
                automatic_continuation=False,
            )
        except (ValueError, TypeError) as exc:  # incl. pydantic's ValidationError
            yield ErrorInfo(INVALID_REQUEST, f"cannot build the Gemini request: {exc}")
            return

        def attempt() -> AsyncIterator[Delta]:
            return self._stream_turn(client, request, contents, generate_config, turn)

        retried = stream_with_retries(
            attempt, policy=self._policy, sleep=self._sleep, label=f"google-native {config.name}"
        )
        try:
            async for delta in retried:
                yield delta
        finally:
            # A consumer that stops early closes the HTTP stream now, not at GC.
            await retried.aclose()

    async def _stream_turn(
        self,
        client: genai.Client,
        request: GenerateRequest,
        contents: list[types.Content],
        config: types.GenerateContentConfig,
        turn: int,
    ) -> AsyncIterator[Delta]:
        """One attempt: the turn's deltas as parts arrive, then grounding and usage."""
        state = _TurnState(request.execution_id, turn)

        async def open_stream() -> AsyncIterator[types.GenerateContentResponse]:
            return await client.aio.models.generate_content_stream(
                model=request.config.model, contents=contents, config=config
            )

        chunks = iterate_in_task(open_stream)
        try:
            async for chunk in chunks:
                for delta in self._chunk_deltas(chunk, state):
                    yield delta
        finally:
            await chunks.aclose()
        if state.grounding:
            yield GroundingInfo(state.grounding)
        if state.usage is not None:
            usage = state.usage
            yield UsageInfo(
                input_tokens=usage.prompt_token_count or 0,
                # Gemini counts thoughts apart from candidates; TARSy's output includes them.
                output_tokens=(usage.candidates_token_count or 0)
                + (usage.thoughts_token_count or 0),
                total_tokens=usage.total_token_count or 0,
                thinking_tokens=usage.thoughts_token_count or 0,
            )

    def _chunk_deltas(self, chunk: types.GenerateContentResponse, state: _TurnState) -> list[Delta]:
        if chunk.usage_metadata is not None:
            # Streaming usage is cumulative; the last chunk's counts are the turn's.
            state.usage = chunk.usage_metadata
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason:
            reason = feedback.block_reason_message or str(feedback.block_reason)
            return [ErrorInfo(PROMPT_BLOCKED, f"Gemini blocked the prompt: {reason}")]
        if not chunk.candidates:
            return []
        candidate = chunk.candidates[0]
        if candidate.grounding_metadata is not None:
            state.grounding = candidate.grounding_metadata.model_dump(
                mode="json", exclude_none=True
            )
        if candidate.url_context_metadata is not None:
            state.grounding = {
                **(state.grounding or {}),
                "url_context_metadata": candidate.url_context_metadata.model_dump(
                    mode="json", exclude_none=True
                ),
            }
        parts = (candidate.content.parts if candidate.content else None) or []
        deltas: list[Delta] = []
        for part in parts:
            deltas.extend(self._part_deltas(part, state))
        if state.signature is not None:
            # Re-stored after every chunk so the text it is matched with is the whole turn's.
            self.signatures.remember_turn(
                state.execution_id, state.turn, state.text, state.signature
            )
        return deltas

    def _part_deltas(self, part: types.Part, state: _TurnState) -> list[Delta]:
        if part.function_call is not None:
            call = part.function_call
            # Gemini 3 returns call ids; 2.5 does not, and results are matched by id.
            call_id = call.id or f"call_{uuid.uuid4().hex}"
            if part.thought_signature:
                self.signatures.remember_call(state.execution_id, call_id, part.thought_signature)
            arguments = dict(call.args or {})
            if problem := json_problem(arguments):
                return [
                    ErrorInfo(
                        INVALID_TOOL_CALL,
                        f"the model sent an unusable tool call {call.name!r}: the arguments "
                        f"JSON {problem}",
                        retryable=True,
                    )
                ]
            return [ToolCallDelta(call_id, tool_name_from_api(call.name or ""), arguments)]
        if part.thought_signature:
            state.signature = part.thought_signature
        if part.executable_code is not None:
            return [CodeExecutionDelta(code=part.executable_code.code or "")]
        if part.code_execution_result is not None:
            return [CodeExecutionDelta(result=part.code_execution_result.output or "")]
        if not part.text:
            return []  # e.g. the empty part that only carries a signature
        if part.thought:
            return [ThinkingDelta(part.text)]
        state.text += part.text
        return [TextDelta(part.text)]


_END = object()


async def iterate_in_task(
    open_stream: Callable[[], Awaitable[AsyncIterator[types.GenerateContentResponse]]],
) -> AsyncGenerator[types.GenerateContentResponse, None]:
    """The SDK's chunks, read by a task of their own that is cancelled on any early exit.

    Why not just ``aclose()`` the SDK's iterator: it is the outer end of a chain of async
    generators that do not close the ones they iterate; the inner ones (held alive by
    the SDK's ``HttpResponse``, which references them and they it) keep the HTTP
    response open — against the fake server, even after ``gc.collect()``. Cancelling
    the reading task unwinds the whole chain, whose innermost ``finally`` closes the
    response at once (google-genai 2.34).
    """
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            stream = await open_stream()
            async for chunk in stream:
                await queue.put(chunk)
        except Exception as exc:
            await queue.put(_Failure(exc))
        else:
            await queue.put(_END)

    task = asyncio.create_task(pump(), name="google-native stream")
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item  # type: ignore[misc]
    finally:
        if not task.done():
            task.cancel()
            # Wait for the unwinding (it closes the connection) without raising from it;
            # a cancellation of this task still interrupts the wait.
            await asyncio.wait({task})


@dataclass(frozen=True)
class _Failure:
    exc: Exception


@dataclass
class _TurnState:
    execution_id: str
    turn: int
    text: str = ""
    signature: bytes | None = None  # latest, from a part that is not a function call
    usage: types.GenerateContentResponseUsageMetadata | None = None
    grounding: dict[str, Any] | None = None


def _create_client(config: ProviderConfig) -> genai.Client:
    return genai.Client(
        api_key=env_value(config, "api_key_env"),
        # Explicit, so GOOGLE_GENAI_USE_VERTEXAI in the environment cannot flip it.
        vertexai=False,
        http_options=types.HttpOptions(
            base_url=config.base_url or DEFAULT_BASE_URL,
            api_version=API_VERSION,
            # 1 attempt = no SDK retries (0 would mean the SDK default of 5). Setting
            # retry_options also stops the SDK's implicit aiohttp reconnect-with-sleep.
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )


def build_tools(request: GenerateRequest) -> list[types.Tool]:
    """MCP tools as function declarations, or else the configured native tools.

    Gemini cannot combine its native tools with function calling in one request
    (docs/design/seeds.md, seed 000 Q6): MCP tools win, the native ones are dropped with a
    warning.
    """
    native = request.config.native_tools
    if request.tools:
        if native:
            logger.warning(
                "google-native %s: MCP tools present, native tools %s suppressed "
                "(Gemini cannot combine them with function calling)",
                request.config.name,
                ", ".join(native),
            )
        declarations = [
            types.FunctionDeclaration(
                name=tool_name_to_api(tool.name),
                description=tool.description,
                # JSON Schema as MCP gives it; the SDK's Schema type would drop keywords.
                parameters_json_schema=tool.parameters_schema or None,
            )
            for tool in request.tools
        ]
        return [types.Tool(function_declarations=declarations)]
    tools: list[types.Tool] = []
    for name in native:
        factory = _NATIVE_TOOLS.get(name)
        if factory is None:
            logger.warning(
                "google-native %s: unknown native tool %r ignored", request.config.name, name
            )
            continue
        tools.append(factory())
    return tools


def build_contents(
    messages: tuple[ConversationMessage, ...] | list[ConversationMessage],
    signatures: ThoughtSignatureCache,
    execution_id: str,
) -> tuple[list[types.Content], list[types.Part]]:
    """The conversation as Gemini contents, plus the system instruction's parts."""
    system: list[types.Part] = []
    contents: list[types.Content] = []
    results: list[types.Part] = []  # consecutive tool results share one user content
    call_names: dict[str, str] = {}
    turn = 0
    for message in messages:
        if message.role != Role.TOOL and results:
            contents.append(types.Content(role="user", parts=results))
            results = []
        match message.role:
            case Role.SYSTEM:
                if message.content:
                    system.append(types.Part(text=message.content))
            case Role.USER:
                # Gemini rejects empty parts; an empty user message carries nothing anyway.
                if message.content:
                    contents.append(
                        types.Content(role="user", parts=[types.Part(text=message.content)])
                    )
            case Role.ASSISTANT:
                parts: list[types.Part] = []
                if message.content:
                    signature = signatures.for_turn(execution_id, turn, message.content)
                    parts.append(types.Part(text=message.content, thought_signature=signature))
                for call in message.tool_calls:
                    call_names[call.id] = call.name
                    parts.append(
                        types.Part(
                            function_call=types.FunctionCall(
                                id=call.id or None,
                                name=tool_name_to_api(call.name),
                                args=call.arguments,
                            ),
                            thought_signature=signatures.for_call(execution_id, call.id),
                        )
                    )
                turn += 1
                if parts:
                    contents.append(types.Content(role="model", parts=parts))
            case Role.TOOL:
                name = message.tool_name or call_names.get(message.tool_call_id, "")
                results.append(
                    types.Part(
                        function_response=types.FunctionResponse(
                            id=message.tool_call_id or None,
                            name=tool_name_to_api(name),
                            response={"result": message.content},
                        )
                    )
                )
            case _:
                raise ValueError(f"unknown conversation role {message.role!r}")
    if results:
        contents.append(types.Content(role="user", parts=results))
    return contents, system


def patch_missing_call_signatures(contents: list[types.Content]) -> None:
    """Gemini 3 rejects a step's first function call without a signature.

    Only the current exchange is validated: the model contents after the last user
    content that is not only function responses. Parallel calls after the first carry
    no signature by design and stay as they are.
    """
    start = 0
    for index in range(len(contents) - 1, -1, -1):
        content = contents[index]
        parts = content.parts or []
        if content.role == "user" and not any(p.function_response for p in parts):
            start = index + 1
            break
    for content in contents[start:]:
        if content.role != "model":
            continue
        first_call = next((p for p in content.parts or [] if p.function_call), None)
        if first_call is not None and not first_call.thought_signature:
            first_call.thought_signature = SKIP_SIGNATURE_VALIDATOR
