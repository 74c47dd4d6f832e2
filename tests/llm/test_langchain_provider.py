"""The ``langchain`` backend, driven through the real SDKs against wire-format fakes.

Every test asserts on what the SDK put on the wire (recorded by the fake server) and
on the deltas the provider yields; nothing inside LangChain or the SDKs is mocked.
Retries sleep through an injected recorder, so backoff is asserted, never waited.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import google.auth
import google.auth.credentials
import google.auth.exceptions
import pytest

from llm.langchain_models import XAI_BASE_URL, ChatAnthropicOnVertex
from llm.langchain_provider import LangChainProvider
from llm.registry import get_backend
from llm.retry import RetryPolicy
from llm.types import (
    ConversationMessage,
    Delta,
    ErrorInfo,
    GenerateRequest,
    ProviderConfig,
    Role,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    UsageInfo,
)
from tests.llm.conftest import Sleeps
from tests.llm.fakes.anthropic_messages import (
    FakeAnthropicMessages,
    MessageStream,
    anthropic_error,
    empty_message,
)
from tests.llm.fakes.fixtures import (
    FakeGeminiStream,
    anthropic_server,
    gemini_error,
    gemini_response,
    gemini_server,
    gemini_stream,
    openai_server,
)
from tests.llm.fakes.openai_chat import (
    ChatCompletionStream,
    FakeOpenAIChat,
    empty_completion,
    openai_error,
)

# The fake servers' fixtures, imported by name; listing them marks them as used.
__all__ = ["anthropic_server", "gemini_server", "openai_server"]

OPENAI_KEY = "sk-test-openai-0123"
ANTHROPIC_KEY = "sk-ant-test-4567"
GEMINI_KEY = "gemini-test-89ab"

TOOLS = (
    ToolDefinition(
        name="kubernetes.get_pods",
        description="List pods in a namespace.",
        parameters_schema={
            "type": "object",
            "properties": {"namespace": {"type": "string"}},
            "required": ["namespace"],
        },
    ),
    ToolDefinition(name="kubernetes.get_logs", description="Read a pod's logs."),
)

CONVERSATION = (
    ConversationMessage(Role.SYSTEM, "You are an SRE."),
    ConversationMessage(Role.USER, "Why is checkout down?"),
    ConversationMessage(
        Role.ASSISTANT,
        "Looking at the pods.",
        tool_calls=(ToolCall("call_prev", "kubernetes.get_pods", {"namespace": "shop"}),),
    ),
    ConversationMessage(
        Role.TOOL,
        "checkout-1 CrashLoopBackOff",
        tool_call_id="call_prev",
        tool_name="kubernetes.get_pods",
    ),
)


@pytest.fixture
def provider(sleeps: Sleeps) -> LangChainProvider:
    return LangChainProvider(sleep=sleeps, policy=RetryPolicy(max_retries=3))


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", OPENAI_KEY)
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("TEST_GEMINI_KEY", GEMINI_KEY)
    # A developer's own settings must not redirect the SDKs away from the fakes.
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_GENAI_USE_VERTEXAI", raising=False)


def openai_config(server: FakeOpenAIChat, **changes: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "name": "openai-test",
        "type": "openai",
        "model": "gpt-fake",
        "api_key_env": "TEST_OPENAI_KEY",
        "base_url": server.base_url,
    }
    return ProviderConfig(**(values | changes))


def anthropic_config(server: FakeAnthropicMessages, **changes: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "name": "anthropic-test",
        "type": "anthropic",
        "model": "claude-fake",
        "api_key_env": "TEST_ANTHROPIC_KEY",
        "base_url": server.base_url,
    }
    return ProviderConfig(**(values | changes))


def request_for(
    config: ProviderConfig, *, tools: tuple[ToolDefinition, ...] = TOOLS
) -> GenerateRequest:
    return GenerateRequest(messages=CONVERSATION, config=config, tools=tools, execution_id="exec-1")


async def collect(provider: LangChainProvider, request: GenerateRequest) -> list[Delta]:
    return [delta async for delta in provider.generate(request)]


def texts(deltas: list[Delta], kind: type[TextDelta | ThinkingDelta]) -> str:
    return "".join(delta.content for delta in deltas if type(delta) is kind)


def parallel_openai_turn() -> ChatCompletionStream:
    return (
        ChatCompletionStream()
        .reasoning("The pods ", "crash-loop.")
        .text("Let me check ", "both.")
        .tool_call(0, "call_a", "kubernetes__get_pods", '{"namespace"', ': "shop"}')
        .tool_call(1, "call_b", "kubernetes__get_logs", '{"pod": "checkout-1",', ' "tail": 50}')
        .finish("tool_calls")
        .usage(120, 45, reasoning=30)
    )


# -- OpenAI and OpenAI-compatible ---------------------------------------------------------


async def test_openai_streams_reasoning_text_and_parallel_tool_calls_then_usage(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    openai_server.enqueue(parallel_openai_turn().reply())

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert deltas == [
        ThinkingDelta("The pods "),
        ThinkingDelta("crash-loop."),
        TextDelta("Let me check "),
        TextDelta("both."),
        ToolCallDelta("call_a", "kubernetes.get_pods", {"namespace": "shop"}),
        ToolCallDelta("call_b", "kubernetes.get_logs", {"pod": "checkout-1", "tail": 50}),
        UsageInfo(input_tokens=120, output_tokens=45, total_tokens=165, thinking_tokens=30),
    ]


async def test_openai_request_carries_conversation_tools_and_key_from_env(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    openai_server.enqueue(ChatCompletionStream().text("ok").finish().usage(5, 1).reply())

    await collect(provider, request_for(openai_config(openai_server)))

    [sent] = openai_server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    body = sent.body
    assert body["model"] == "gpt-fake"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert [message["role"] for message in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]
    assistant, tool_result = body["messages"][2], body["messages"][3]
    assert assistant["content"] == "Looking at the pods."
    [call] = assistant["tool_calls"]
    assert call["id"] == "call_prev"
    assert call["function"]["name"] == "kubernetes__get_pods"
    assert json.loads(call["function"]["arguments"]) == {"namespace": "shop"}
    assert tool_result == {
        "role": "tool",
        "tool_call_id": "call_prev",
        "content": "checkout-1 CrashLoopBackOff",
    }
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "kubernetes__get_pods",
                "description": "List pods in a namespace.",
                "parameters": TOOLS[0].parameters_schema,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "kubernetes__get_logs",
                "description": "Read a pod's logs.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]


async def test_openai_rate_limit_waits_for_retry_after_then_succeeds(
    provider: LangChainProvider, openai_server: FakeOpenAIChat, sleeps: Sleeps
) -> None:
    openai_server.enqueue(
        openai_error(429, "Rate limit reached for requests", retry_after=7),
        ChatCompletionStream().text("recovered").finish().usage(5, 1).reply(),
    )

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert sleeps.delays == [7.0]
    assert len(openai_server.requests) == 2
    assert texts(deltas, TextDelta) == "recovered"
    assert not any(isinstance(delta, ErrorInfo) for delta in deltas)


async def test_openai_bad_key_fails_at_once_without_retry(
    provider: LangChainProvider, openai_server: FakeOpenAIChat, sleeps: Sleeps
) -> None:
    openai_server.enqueue(openai_error(401, "Incorrect API key provided"))

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("auth_error", False)
    assert "Incorrect API key" in error.message
    assert len(openai_server.requests) == 1
    assert sleeps.delays == []


async def test_openai_server_errors_are_retried_with_backoff_until_the_budget_is_spent(
    provider: LangChainProvider, openai_server: FakeOpenAIChat, sleeps: Sleeps
) -> None:
    openai_server.enqueue(*[openai_error(503, "The server is overloaded")] * 4)

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert deltas == [ErrorInfo("server_error", deltas[0].message, retryable=True)]
    assert len(openai_server.requests) == 4
    assert sleeps.delays == [1.0, 2.0, 4.0]


async def test_openai_stream_cut_after_content_ends_with_a_retryable_error(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    turn = ChatCompletionStream().text("The checkout pods ", "are crash", "-looping", " again")
    openai_server.enqueue(turn.finish().usage(5, 4).reply(cut_after=2))

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert deltas[:-1] == [TextDelta("The checkout pods "), TextDelta("are crash")]
    assert deltas[-1].code == "stream_interrupted"
    assert deltas[-1].retryable is True
    assert len(openai_server.requests) == 1  # content reached the caller: not replayed


async def test_openai_stream_cut_before_any_content_is_retried(
    provider: LangChainProvider, openai_server: FakeOpenAIChat, sleeps: Sleeps
) -> None:
    openai_server.enqueue(
        ChatCompletionStream().text("lost").finish().reply(cut_after=0),
        ChatCompletionStream().text("second try").finish().usage(5, 2).reply(),
    )

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert texts(deltas, TextDelta) == "second try"
    assert len(openai_server.requests) == 2
    assert len(sleeps.delays) == 1


async def test_openai_empty_response_is_retried_then_succeeds(
    provider: LangChainProvider, openai_server: FakeOpenAIChat, sleeps: Sleeps
) -> None:
    openai_server.enqueue(
        empty_completion(), ChatCompletionStream().text("an answer").finish().usage(9, 2).reply()
    )

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert deltas == [
        TextDelta("an answer"),
        UsageInfo(input_tokens=9, output_tokens=2, total_tokens=11),
    ]
    assert sleeps.delays == [3.0]  # the empty-response delay, not the error backoff
    assert len(openai_server.requests) == 2


async def test_openai_malformed_tool_arguments_are_reported_not_executed(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    turn = ChatCompletionStream().tool_call(0, "call_x", "kubernetes__get_pods", '{"namespace": ')
    openai_server.enqueue(turn.finish("tool_calls").usage(5, 2).reply())

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert not any(isinstance(delta, ToolCallDelta) for delta in deltas)
    [error] = [delta for delta in deltas if isinstance(delta, ErrorInfo)]
    assert (error.code, error.retryable) == ("invalid_tool_call", True)
    assert "kubernetes__get_pods" in error.message


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"a": ' + "[" * 5_000 + "]" * 5_000 + "}", "nested more than 64 levels deep"),
        ('{"command": "ls\\u0000"}', "contains a NUL character"),
    ],
)
async def test_openai_tool_arguments_too_deep_or_unstorable_are_reported_not_executed(
    provider: LangChainProvider, openai_server: FakeOpenAIChat, arguments: str, reason: str
) -> None:
    turn = ChatCompletionStream().tool_call(0, "call_x", "kubernetes__get_pods", arguments)
    openai_server.enqueue(turn.finish("tool_calls").usage(5, 2).reply())

    deltas = await collect(provider, request_for(openai_config(openai_server)))

    assert not any(isinstance(delta, ToolCallDelta) for delta in deltas)
    [error] = [delta for delta in deltas if isinstance(delta, ErrorInfo)]
    assert (error.code, error.retryable) == ("invalid_tool_call", True)
    assert reason in error.message


async def test_vllm_server_without_key_streams_reasoning_content_as_thinking(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    vllm = openai_config(openai_server, name="vllm", model="Qwen/Qwen3-32B", api_key_env="")
    openai_server.enqueue(
        ChatCompletionStream(model="Qwen/Qwen3-32B")
        .reasoning("Think ", "first.")
        .text("Answer.")
        .finish()
        .usage(7, 5)
        .reply()
    )

    deltas = await collect(provider, GenerateRequest(messages=CONVERSATION[:2], config=vllm))

    assert deltas == [
        ThinkingDelta("Think "),
        ThinkingDelta("first."),
        TextDelta("Answer."),
        UsageInfo(input_tokens=7, output_tokens=5, total_tokens=12),
    ]
    [sent] = openai_server.requests
    assert sent.body["model"] == "Qwen/Qwen3-32B"
    assert "tools" not in sent.body
    # vLLM's convention for "no key": the SDK will not send a request without one.
    assert sent.headers["authorization"] == "Bearer EMPTY"


async def test_xai_defaults_to_the_xai_endpoint_and_honours_a_base_url(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    xai = ProviderConfig(name="grok", type="xai", model="grok-fake", api_key_env="TEST_OPENAI_KEY")
    assert provider.chat_model(xai).openai_api_base == XAI_BASE_URL

    openai_server.enqueue(ChatCompletionStream().text("from grok").finish().usage(3, 2).reply())
    proxied = ProviderConfig(**(xai.__dict__ | {"base_url": openai_server.base_url}))
    deltas = await collect(provider, request_for(proxied))

    assert texts(deltas, TextDelta) == "from grok"
    assert openai_server.requests[0].body["model"] == "grok-fake"


async def test_cancelling_the_consumer_closes_the_stream_promptly(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    turn = ChatCompletionStream().text("first").delay(30).text("never sent")
    openai_server.enqueue(turn.finish().reply())
    received: list[Delta] = []
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for delta in provider.generate(request_for(openai_config(openai_server))):
            received.append(delta)
            first_delta.set()

    task = asyncio.create_task(consume())
    await first_delta.wait()
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert received == [TextDelta("first")]
    assert await asyncio.to_thread(openai_server.wait_for_disconnect, 3.0)
    assert time.monotonic() - started < 3.0


async def test_closing_the_stream_early_closes_the_connection(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    turn = ChatCompletionStream().text("first").delay(30).text("never sent")
    openai_server.enqueue(turn.finish().reply())

    stream = provider.generate(request_for(openai_config(openai_server)))
    assert isinstance(stream, AsyncIterator)
    assert await anext(stream) == TextDelta("first")
    await stream.aclose()  # type: ignore[attr-defined]

    assert await asyncio.to_thread(openai_server.wait_for_disconnect, 3.0)


# -- Anthropic ------------------------------------------------------------------------------


def parallel_anthropic_turn() -> MessageStream:
    return (
        MessageStream(input_tokens=310)
        .thinking("The pods ", "crash-loop.")
        .text("Let me check ", "both.")
        .tool_use("toolu_a", "kubernetes__get_pods", '{"namespace"', ': "shop"}')
        .tool_use("toolu_b", "kubernetes__get_logs", '{"pod": "checkout-1",', ' "tail": 50}')
        .stop("tool_use", output_tokens=88, thinking_tokens=40)
    )


async def test_anthropic_streams_thinking_text_and_parallel_tool_calls_then_usage(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    anthropic_server.enqueue(parallel_anthropic_turn().reply())

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert deltas == [
        ThinkingDelta("The pods "),
        ThinkingDelta("crash-loop."),
        TextDelta("Let me check "),
        TextDelta("both."),
        ToolCallDelta("toolu_a", "kubernetes.get_pods", {"namespace": "shop"}),
        ToolCallDelta("toolu_b", "kubernetes.get_logs", {"pod": "checkout-1", "tail": 50}),
        UsageInfo(input_tokens=310, output_tokens=88, total_tokens=398, thinking_tokens=40),
    ]


async def test_anthropic_request_carries_max_tokens_conversation_tools_and_key(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    anthropic_server.enqueue(MessageStream().text("ok").stop().reply())

    await collect(provider, request_for(anthropic_config(anthropic_server)))

    [sent] = anthropic_server.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    body = sent.body
    assert body["model"] == "claude-fake"
    assert body["max_tokens"] == 32000
    assert body["stream"] is True
    assert body["system"] == "You are an SRE."
    assert [message["role"] for message in body["messages"]] == ["user", "assistant", "user"]
    assistant_blocks = body["messages"][1]["content"]
    assert {"type": "text", "text": "Looking at the pods."} in assistant_blocks
    [tool_use] = [block for block in assistant_blocks if block["type"] == "tool_use"]
    assert tool_use == {
        "type": "tool_use",
        "id": "call_prev",
        "name": "kubernetes__get_pods",
        "input": {"namespace": "shop"},
    }
    [tool_result] = body["messages"][2]["content"]
    assert tool_result["type"] == "tool_result"
    assert tool_result["tool_use_id"] == "call_prev"
    assert tool_result["content"] == "checkout-1 CrashLoopBackOff"
    assert [tool["name"] for tool in body["tools"]] == [
        "kubernetes__get_pods",
        "kubernetes__get_logs",
    ]
    assert body["tools"][0]["input_schema"] == TOOLS[0].parameters_schema
    assert body["tools"][0]["description"] == "List pods in a namespace."


async def test_anthropic_gets_parallel_tool_results_back_in_one_user_turn(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    # Anthropic rejects a conversation whose parallel tool results are split over turns.
    conversation = (
        *CONVERSATION[:2],
        ConversationMessage(
            Role.ASSISTANT,
            tool_calls=(
                ToolCall("toolu_a", "kubernetes.get_pods", {"namespace": "shop"}),
                ToolCall("toolu_b", "kubernetes.get_logs", {"pod": "checkout-1"}),
            ),
        ),
        ConversationMessage(
            Role.TOOL, "pods", tool_call_id="toolu_a", tool_name="kubernetes.get_pods"
        ),
        ConversationMessage(
            Role.TOOL, "logs", tool_call_id="toolu_b", tool_name="kubernetes.get_logs"
        ),
    )
    anthropic_server.enqueue(MessageStream().text("ok").stop().reply())

    await collect(
        provider,
        GenerateRequest(
            messages=conversation, config=anthropic_config(anthropic_server), tools=TOOLS
        ),
    )

    messages = anthropic_server.requests[0].body["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant", "user"]
    assert [block["id"] for block in messages[1]["content"]] == ["toolu_a", "toolu_b"]
    results = messages[2]["content"]
    assert [(block["tool_use_id"], block["content"]) for block in results] == [
        ("toolu_a", "pods"),
        ("toolu_b", "logs"),
    ]


async def test_anthropic_rate_limit_waits_for_retry_after_then_succeeds(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages, sleeps: Sleeps
) -> None:
    anthropic_server.enqueue(
        anthropic_error(
            429, "Number of request tokens has exceeded your rate limit", retry_after=12
        ),
        MessageStream().text("recovered").stop().reply(),
    )

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert sleeps.delays == [12.0]
    assert texts(deltas, TextDelta) == "recovered"
    assert len(anthropic_server.requests) == 2


async def test_anthropic_overloaded_is_retried(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages, sleeps: Sleeps
) -> None:
    anthropic_server.enqueue(
        anthropic_error(529, "Overloaded"), MessageStream().text("fine now").stop().reply()
    )

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert texts(deltas, TextDelta) == "fine now"
    assert sleeps.delays == [1.0]


async def test_anthropic_bad_key_fails_at_once_without_retry(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages, sleeps: Sleeps
) -> None:
    anthropic_server.enqueue(anthropic_error(401, "invalid x-api-key"))

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("auth_error", False)
    assert len(anthropic_server.requests) == 1
    assert sleeps.delays == []


async def test_anthropic_stream_cut_after_content_ends_with_a_retryable_error(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    turn = MessageStream().thinking("Hmm.").text("Partial ", "answer").stop()
    # message_start, ping, thinking start/delta/signature/stop, text start, first delta
    anthropic_server.enqueue(turn.reply(cut_after=8))

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert deltas[:-1] == [ThinkingDelta("Hmm."), TextDelta("Partial ")]
    assert (deltas[-1].code, deltas[-1].retryable) == ("stream_interrupted", True)
    assert len(anthropic_server.requests) == 1


async def test_anthropic_error_event_mid_stream_ends_with_a_retryable_error(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    anthropic_server.enqueue(MessageStream().text("Partial").error(529, "Overloaded").reply())

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert deltas[0] == TextDelta("Partial")
    assert (deltas[-1].code, deltas[-1].retryable) == ("stream_interrupted", True)
    assert "Overloaded" in deltas[-1].message


async def test_anthropic_empty_message_is_retried_then_succeeds(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages, sleeps: Sleeps
) -> None:
    anthropic_server.enqueue(empty_message(), MessageStream().text("an answer").stop().reply())

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert texts(deltas, TextDelta) == "an answer"
    assert sleeps.delays == [3.0]
    assert len(anthropic_server.requests) == 2


async def test_anthropic_empty_messages_give_up_with_a_retryable_error(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    anthropic_server.enqueue(*[empty_message()] * 4)

    deltas = await collect(provider, request_for(anthropic_config(anthropic_server)))

    assert deltas == [ErrorInfo("empty_response", deltas[0].message, retryable=True)]
    assert len(anthropic_server.requests) == 4


# -- Google and Vertex AI -------------------------------------------------------------------


async def test_google_streams_thoughts_text_and_whole_function_calls(
    provider: LangChainProvider, gemini_server: FakeGeminiStream
) -> None:
    gemini_server.enqueue(
        gemini_stream(
            gemini_response([{"text": "The pods crash-loop.", "thought": True}]),
            gemini_response([{"text": "Let me check both."}]),
            gemini_response(
                [
                    {
                        "functionCall": {
                            "name": "kubernetes__get_pods",
                            "args": {"namespace": "shop"},
                        }
                    },
                    {"functionCall": {"name": "kubernetes__get_logs", "args": {"pod": "c-1"}}},
                ],
                finish_reason="STOP",
                usage={
                    "promptTokenCount": 200,
                    "candidatesTokenCount": 30,
                    "thoughtsTokenCount": 12,
                    "totalTokenCount": 242,
                },
            ),
        )
    )
    deltas = await collect(provider, request_for(gemini_config(gemini_server)))

    assert deltas[:2] == [ThinkingDelta("The pods crash-loop."), TextDelta("Let me check both.")]
    calls = [delta for delta in deltas if isinstance(delta, ToolCallDelta)]
    assert [(call.name, call.arguments) for call in calls] == [
        ("kubernetes.get_pods", {"namespace": "shop"}),
        ("kubernetes.get_logs", {"pod": "c-1"}),
    ]
    assert all(call.call_id for call in calls)
    assert deltas[-1] == UsageInfo(
        input_tokens=200, output_tokens=42, total_tokens=242, thinking_tokens=12
    )
    [sent] = gemini_server.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert sent.headers["x-goog-api-key"] == GEMINI_KEY
    assert sent.body["generationConfig"]["thinkingConfig"] == {"include_thoughts": True}
    declared = sent.body["tools"][0]["functionDeclarations"]
    assert [function["name"] for function in declared] == [
        "kubernetes__get_pods",
        "kubernetes__get_logs",
    ]
    model_turn, tool_turn = sent.body["contents"][1], sent.body["contents"][2]
    assert model_turn["parts"][-1]["functionCall"]["name"] == "kubernetes__get_pods"
    assert tool_turn["parts"][0]["functionResponse"]["name"] == "kubernetes__get_pods"


def gemini_config(server: FakeGeminiStream) -> ProviderConfig:
    return ProviderConfig(
        name="gemini",
        type="google",
        model="gemini-2.5-flash",
        api_key_env="TEST_GEMINI_KEY",
        base_url=server.url,
    )


async def test_google_per_minute_limit_waits_for_the_retry_delay_in_the_body(
    provider: LangChainProvider, gemini_server: FakeGeminiStream, sleeps: Sleeps
) -> None:
    # Gemini words per-minute limits as "quota" and sends the delay in the body, not in a
    # Retry-After header; LangChain's wrapper of the SDK error carries neither.
    exhausted = gemini_error(429, "Resource has been exhausted (e.g. check quota).")
    exhausted.body["error"]["details"] = [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
    ]
    gemini_server.enqueue(
        exhausted, gemini_stream(gemini_response([{"text": "ok"}], finish_reason="STOP"))
    )

    deltas = await collect(provider, request_for(gemini_config(gemini_server)))

    assert deltas == [TextDelta("ok")]
    assert sleeps.delays == [7.0]


async def test_google_unknown_model_is_an_invalid_request(
    provider: LangChainProvider, gemini_server: FakeGeminiStream
) -> None:
    gemini_server.enqueue(gemini_error(404, "models/gemini-2.5-flash is not found"))

    [error] = await collect(provider, request_for(gemini_config(gemini_server)))

    assert (error.code, error.retryable) == ("invalid_request", False)
    assert "not found" in error.message


class _FakeAdcCredentials(google.auth.credentials.Credentials):
    """Application Default Credentials that mint a token without any network."""

    def refresh(self, request: object) -> None:
        self.token = "ya29.fake-adc-token"


@pytest.fixture
def vertex_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_VERTEX_PROJECT", "sre-project")
    monkeypatch.setenv("TEST_VERTEX_LOCATION", "us-east5")

    def default(*args: object, **kwargs: object) -> tuple[_FakeAdcCredentials, str]:
        return _FakeAdcCredentials(), "adc-project"

    monkeypatch.setattr(google.auth, "default", default)


def vertex_config(model: str, base_url: str) -> ProviderConfig:
    return ProviderConfig(
        name="vertex",
        type="vertexai",
        model=model,
        base_url=base_url,
        project_env="TEST_VERTEX_PROJECT",
        location_env="TEST_VERTEX_LOCATION",
    )


@pytest.mark.usefixtures("vertex_env")
async def test_vertex_claude_goes_through_anthropic_vertex(
    provider: LangChainProvider, anthropic_server: FakeAnthropicMessages
) -> None:
    anthropic_server.enqueue(parallel_anthropic_turn().reply())
    config = vertex_config("claude-sonnet-4-5@20250929", anthropic_server.vertex_base_url)

    deltas = await collect(provider, request_for(config))

    assert isinstance(provider.chat_model(config), ChatAnthropicOnVertex)
    assert ToolCallDelta("toolu_a", "kubernetes.get_pods", {"namespace": "shop"}) in deltas
    assert texts(deltas, ThinkingDelta) == "The pods crash-loop."
    [sent] = anthropic_server.requests
    assert sent.path == (
        "/v1/projects/sre-project/locations/us-east5/publishers/anthropic/models/"
        "claude-sonnet-4-5@20250929:streamRawPredict"
    )
    assert sent.headers["authorization"] == "Bearer ya29.fake-adc-token"
    assert sent.body["anthropic_version"]  # Vertex takes the API version in the body
    assert "model" not in sent.body
    assert sent.body["max_tokens"] == 32000


@pytest.mark.usefixtures("vertex_env")
async def test_vertex_gemini_goes_through_google_genai_in_vertex_mode(
    provider: LangChainProvider, gemini_server: FakeGeminiStream
) -> None:
    gemini_server.enqueue(
        gemini_stream(gemini_response([{"text": "hello from vertex"}], finish_reason="STOP"))
    )

    deltas = await collect(
        provider, request_for(vertex_config("gemini-2.5-pro", gemini_server.url))
    )

    assert deltas == [TextDelta("hello from vertex")]
    [sent] = gemini_server.requests
    assert sent.path == (
        "/v1beta1/projects/sre-project/locations/us-east5/publishers/google/models/"
        "gemini-2.5-pro:streamGenerateContent"
    )
    assert sent.headers["authorization"] == "Bearer ya29.fake-adc-token"


async def test_vertex_without_application_default_credentials_is_an_auth_error(
    provider: LangChainProvider,
    anthropic_server: FakeAnthropicMessages,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_VERTEX_PROJECT", "sre-project")
    monkeypatch.setenv("TEST_VERTEX_LOCATION", "us-east5")

    def no_credentials(*args: object, **kwargs: object) -> None:
        raise google.auth.exceptions.DefaultCredentialsError(
            "Your default credentials were not found."
        )

    monkeypatch.setattr(google.auth, "default", no_credentials)
    config = vertex_config("claude-sonnet-5", anthropic_server.vertex_base_url)

    [error] = await collect(provider, request_for(config))

    assert (error.code, error.retryable) == ("auth_error", False)
    assert "default credentials" in error.message
    assert anthropic_server.requests == []


# -- configuration and caching --------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "variable"),
    [
        (
            ProviderConfig("o", "openai", "gpt-fake", api_key_env="UNSET_OPENAI_KEY"),
            "UNSET_OPENAI_KEY",
        ),
        (
            ProviderConfig("a", "anthropic", "claude-x", api_key_env="UNSET_ANT_KEY"),
            "UNSET_ANT_KEY",
        ),
        (
            ProviderConfig("g", "google", "gemini-x", api_key_env="UNSET_GEMINI_KEY"),
            "UNSET_GEMINI_KEY",
        ),
        (ProviderConfig("x", "xai", "grok-x", api_key_env="UNSET_XAI_KEY"), "UNSET_XAI_KEY"),
        (
            ProviderConfig(
                "v", "vertexai", "claude-x", project_env="UNSET_PROJECT", location_env="L"
            ),
            "UNSET_PROJECT",
        ),
    ],
)
async def test_a_missing_variable_is_an_auth_error_naming_it(
    provider: LangChainProvider, config: ProviderConfig, variable: str
) -> None:
    deltas = await collect(provider, GenerateRequest(messages=CONVERSATION, config=config))

    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("auth_error", False)
    assert variable in error.message


async def test_openai_without_a_key_variable_or_base_url_is_an_auth_error(
    provider: LangChainProvider,
) -> None:
    config = ProviderConfig("openai", "openai", "gpt-fake")

    [error] = await collect(provider, GenerateRequest(messages=CONVERSATION, config=config))

    assert error.code == "auth_error"
    assert "api_key_env" in error.message


async def test_an_unknown_type_is_reported_not_raised(provider: LangChainProvider) -> None:
    config = ProviderConfig("demo", "scripted", "", api_key_env="TEST_OPENAI_KEY")

    [error] = await collect(provider, GenerateRequest(messages=CONVERSATION, config=config))

    assert (error.code, error.retryable) == ("invalid_request", False)
    assert "scripted" in error.message


async def test_models_are_cached_per_configuration(
    provider: LangChainProvider, openai_server: FakeOpenAIChat
) -> None:
    config = openai_config(openai_server)
    same = ProviderConfig(**(config.__dict__ | {"name": "another-name"}))
    elsewhere = ProviderConfig(**(config.__dict__ | {"base_url": "http://127.0.0.1:9/v1"}))
    other_model = ProviderConfig(**(config.__dict__ | {"model": "gpt-other"}))

    model = provider.chat_model(config)

    assert provider.chat_model(same) is model
    assert provider.chat_model(elsewhere) is not model
    assert provider.chat_model(other_model) is not model
    assert provider.chat_model(config) is model


def test_each_event_loop_gets_its_own_model_and_calls_keep_working(
    provider: LangChainProvider,
    openai_server: FakeOpenAIChat,
    anthropic_server: FakeAnthropicMessages,
) -> None:
    # A worker runs every session in a fresh asyncio.run; pooled connections from the
    # previous loop fail with "Event loop is closed" if a model is reused across loops.
    configs = (openai_config(openai_server), anthropic_config(anthropic_server))
    models: list[object] = []

    async def one_session() -> list[Delta]:
        models.extend(provider.chat_model(config) for config in configs)
        deltas: list[Delta] = []
        for config in configs:
            deltas += await collect(provider, request_for(config))
        return [delta for delta in deltas if not isinstance(delta, UsageInfo)]

    for index in range(2):
        openai_server.enqueue(ChatCompletionStream().text(f"o{index}").finish().reply())
        anthropic_server.enqueue(MessageStream().text(f"a{index}").stop().reply())
        assert asyncio.run(one_session()) == [TextDelta(f"o{index}"), TextDelta(f"a{index}")]

    assert models[0] is not models[2]
    assert models[1] is not models[3]


def test_the_registry_serves_this_provider() -> None:
    assert isinstance(get_backend("langchain"), LangChainProvider)
