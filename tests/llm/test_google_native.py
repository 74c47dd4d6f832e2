"""The google-native backend against a fake Gemini API speaking the real wire format.

Assertions are on what google-genai actually put on the wire and on the deltas the
provider made of the bytes it got back; nothing in the SDK is patched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm.google_native import GoogleNativeProvider
from llm.retry import RetryPolicy
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
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    UsageInfo,
)
from tests.llm.conftest import Sleeps
from tests.llm.fakes import gemini as g
from tests.llm.fakes.gemini import FakeGemini

KEY_ENV = "TARSY_TEST_GEMINI_KEY"
KEY = "test-key-not-a-secret-123"
SKIP_SENTINEL = "skip_thought_signature_validator"

PODS = ToolDefinition(
    "kubernetes.get_pods",
    "List pods in a namespace.",
    {"type": "object", "properties": {"namespace": {"type": "string"}}, "required": ["namespace"]},
)
LOGS = ToolDefinition("kubernetes.get_logs", "Read a pod's logs.", {"type": "object"})


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def provider(sleeps: Sleeps, clock: Clock) -> GoogleNativeProvider:
    return GoogleNativeProvider(sleep=sleeps, clock=clock)


def config(server: FakeGemini, **overrides: Any) -> ProviderConfig:
    values: dict[str, Any] = {
        "name": "gemini-test",
        "type": "google",
        "model": "gemini-2.5-pro",
        "api_key_env": KEY_ENV,
        "base_url": server.base_url,
    }
    values.update(overrides)
    return ProviderConfig(**values)


def request(
    server: FakeGemini,
    *messages: ConversationMessage,
    tools: tuple[ToolDefinition, ...] = (PODS, LOGS),
    execution_id: str = "exec-1",
    **config_overrides: Any,
) -> GenerateRequest:
    if not messages:
        messages = (
            ConversationMessage(Role.SYSTEM, "You are an SRE."),
            ConversationMessage(Role.USER, "Pod payments-1 is crash-looping."),
        )
    return GenerateRequest(
        messages=messages,
        config=config(server, **config_overrides),
        tools=tools,
        execution_id=execution_id,
    )


async def collect(provider: GoogleNativeProvider, req: GenerateRequest) -> list[Delta]:
    return [delta async for delta in provider.generate(req)]


def field(mapping: dict[str, Any], camel: str) -> Any:
    """A request field under either spelling: the SDK sends some nested keys snake_case."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return mapping.get(camel, mapping.get(snake))


def signatures_in(body: dict[str, Any]) -> list[tuple[int, str, bytes | str]]:
    """(content index, part kind, signature) for every signed part of a request."""
    found: list[tuple[int, str, bytes | str]] = []
    for index, content in enumerate(body["contents"]):
        for part in content["parts"]:
            if signature := part.get("thoughtSignature"):
                kind = "call" if "functionCall" in part else "text"
                value = signature if signature == SKIP_SENTINEL else g.decode_signature(signature)
                found.append((index, kind, value))
    return found


# -- request shape ------------------------------------------------------------------------


async def test_request_wire_format(fake_gemini: FakeGemini, provider: GoogleNativeProvider) -> None:
    fake_gemini.enqueue(g.text_reply())
    await collect(provider, request(fake_gemini))

    [sent] = fake_gemini.requests
    assert sent.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert sent.query == {"alt": ["sse"]}
    assert sent.headers["x-goog-api-key"] == KEY
    assert KEY not in sent.path
    body = sent.body
    assert body["systemInstruction"]["parts"] == [{"text": "You are an SRE."}]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Pod payments-1 is crash-looping."}]}
    ]
    [tool] = body["tools"]
    declarations = tool["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["kubernetes__get_pods", "kubernetes__get_logs"]
    assert declarations[0]["description"] == "List pods in a namespace."
    assert field(declarations[0], "parametersJsonSchema") == PODS.parameters_schema
    thinking = field(body["generationConfig"], "thinkingConfig")
    assert field(thinking, "thinkingBudget") == 32768
    assert field(thinking, "includeThoughts") is True


@pytest.mark.parametrize(
    ("model", "budget", "level"),
    [
        ("gemini-2.5-pro", 32768, None),
        ("gemini-2.5-flash", 24576, None),
        ("gemini-2.5-flash-lite", 24576, None),
        ("gemini-3-pro-preview", None, "HIGH"),
        ("gemini-2.0-flash", 24576, None),
    ],
)
async def test_thinking_config_per_model(
    fake_gemini: FakeGemini,
    provider: GoogleNativeProvider,
    model: str,
    budget: int | None,
    level: str | None,
) -> None:
    fake_gemini.enqueue(g.text_reply())
    await collect(provider, request(fake_gemini, model=model))
    thinking = field(fake_gemini.bodies[0]["generationConfig"], "thinkingConfig")
    assert field(thinking, "thinkingBudget") == budget
    assert field(thinking, "thinkingLevel") == level
    assert field(thinking, "includeThoughts") is True


async def test_history_roles_calls_and_grouped_results(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(g.text_reply())
    calls = (
        ToolCall("call-a", "kubernetes.get_pods", {"namespace": "payments"}),
        ToolCall("call-b", "kubernetes.get_logs", {"pod": "payments-1"}),
    )
    await collect(
        provider,
        request(
            fake_gemini,
            ConversationMessage(Role.SYSTEM, "You are an SRE."),
            ConversationMessage(Role.USER, "Investigate."),
            ConversationMessage(Role.ASSISTANT, "Checking.", tool_calls=calls),
            ConversationMessage(Role.TOOL, "pods: 1", tool_call_id="call-a", tool_name=PODS.name),
            # No tool_name: the name is taken from the call it answers.
            ConversationMessage(Role.TOOL, "OOMKilled", tool_call_id="call-b"),
            ConversationMessage(Role.USER, "Conclude now."),
        ),
    )
    contents = fake_gemini.bodies[0]["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "user"]
    assert contents[1]["parts"] == [
        {"text": "Checking."},
        {
            "functionCall": {
                "id": "call-a",
                "name": "kubernetes__get_pods",
                "args": {"namespace": "payments"},
            }
        },
        {
            "functionCall": {
                "id": "call-b",
                "name": "kubernetes__get_logs",
                "args": {"pod": "payments-1"},
            }
        },
    ]
    assert contents[2]["parts"] == [
        {
            "functionResponse": {
                "id": "call-a",
                "name": "kubernetes__get_pods",
                "response": {"result": "pods: 1"},
            }
        },
        {
            "functionResponse": {
                "id": "call-b",
                "name": "kubernetes__get_logs",
                "response": {"result": "OOMKilled"},
            }
        },
    ]
    assert contents[3]["parts"] == [{"text": "Conclude now."}]


async def test_native_tools_only_without_mcp_tools(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    native = ("google_search", "code_execution", "url_context")
    fake_gemini.enqueue(g.text_reply(), g.text_reply())
    await collect(provider, request(fake_gemini, tools=(), native_tools=native))
    with caplog.at_level(logging.WARNING, logger="llm.google_native"):
        await collect(provider, request(fake_gemini, native_tools=native))

    without_mcp, with_mcp = fake_gemini.bodies
    assert without_mcp["tools"] == [{"googleSearch": {}}, {"codeExecution": {}}, {"urlContext": {}}]
    assert [list(tool) for tool in with_mcp["tools"]] == [["functionDeclarations"]]
    suppressed = [r for r in caplog.records if "suppressed" in r.getMessage()]
    assert len(suppressed) == 1


# -- response deltas ------------------------------------------------------------------------


async def test_thinking_text_and_parallel_tool_calls(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(
        g.stream(
            g.response(g.thought("The pod is crash-looping; ")),
            g.response(g.thought("check pods and logs.")),
            g.response(g.text("Let me look.")),
            g.response(
                g.function_call("kubernetes__get_pods", {"namespace": "payments"}, call_id="c-1"),
                g.function_call("kubernetes__get_logs", {"pod": "payments-1"}),
                finish_reason="STOP",
                usage_metadata=g.usage(120, 40, thoughts=75),
            ),
        )
    )
    deltas = await collect(provider, request(fake_gemini))

    assert deltas[:4] == [
        ThinkingDelta("The pod is crash-looping; "),
        ThinkingDelta("check pods and logs."),
        TextDelta("Let me look."),
        ToolCallDelta("c-1", "kubernetes.get_pods", {"namespace": "payments"}),
    ]
    generated = deltas[4]
    assert isinstance(generated, ToolCallDelta)
    assert generated.name == "kubernetes.get_logs"
    assert generated.arguments == {"pod": "payments-1"}
    assert generated.call_id
    assert generated.call_id != "c-1"
    assert deltas[5:] == [
        UsageInfo(input_tokens=120, output_tokens=115, total_tokens=235, thinking_tokens=75)
    ]


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"selector": _nested(80)}, "is nested more than 64 levels deep"),
        ({"pod": "a\x00b"}, "contains a NUL character"),
    ],
)
async def test_tool_call_arguments_too_deep_or_unstorable_are_a_retryable_error(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, arguments: dict, reason: str
) -> None:
    fake_gemini.enqueue(
        g.stream(
            g.response(
                g.function_call("kubernetes__get_pods", arguments, call_id="c-1"),
                finish_reason="STOP",
            ),
        )
    )
    deltas = await collect(provider, request(fake_gemini))

    [error] = [delta for delta in deltas if isinstance(delta, ErrorInfo)]
    assert (error.code, error.retryable) == ("invalid_tool_call", True)
    assert reason in error.message
    assert not any(isinstance(delta, ToolCallDelta) for delta in deltas)


async def test_code_execution_parts(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(
        g.stream(
            g.response(g.executable_code("print(2 ** 10)")),
            g.response(g.code_execution_result("1024\n")),
            g.response(g.text("It is 1024."), finish_reason="STOP"),
        )
    )
    deltas = await collect(
        provider, request(fake_gemini, tools=(), native_tools=("code_execution",))
    )
    assert deltas == [
        CodeExecutionDelta(code="print(2 ** 10)"),
        CodeExecutionDelta(result="1024\n"),
        TextDelta("It is 1024."),
    ]


async def test_grounding_metadata(fake_gemini: FakeGemini, provider: GoogleNativeProvider) -> None:
    metadata = g.grounding(["payments outage"], [("https://status.example.com", "Status")])
    fake_gemini.enqueue(
        g.stream(
            g.response(g.text("Known outage.")),
            g.response(g.text(""), grounding_metadata=metadata, usage_metadata=g.usage(8, 3)),
        )
    )
    deltas = await collect(
        provider, request(fake_gemini, tools=(), native_tools=("google_search",))
    )
    assert deltas[0] == TextDelta("Known outage.")
    [info] = [d for d in deltas if isinstance(d, GroundingInfo)]
    assert info.metadata["web_search_queries"] == ["payments outage"]
    assert info.metadata["grounding_chunks"][0]["web"]["uri"] == "https://status.example.com"
    assert deltas[-1] == UsageInfo(input_tokens=8, output_tokens=3, total_tokens=11)


async def test_blocked_prompt_fails_at_once(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(g.stream(g.blocked("SAFETY")))
    deltas = await collect(provider, request(fake_gemini))
    assert len(deltas) == 1
    assert isinstance(deltas[0], ErrorInfo)
    assert deltas[0].code == "prompt_blocked"
    assert not deltas[0].retryable
    assert len(fake_gemini.requests) == 1
    assert sleeps.delays == []


async def test_an_unbuildable_request_is_an_error_not_an_exception(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    bogus = ConversationMessage("narrator", "Once upon a time")  # type: ignore[arg-type]
    [error] = await collect(provider, request(fake_gemini, bogus))
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("invalid_request", False)
    assert fake_gemini.requests == []


# -- thought signatures ---------------------------------------------------------------------


def first_turn_reply() -> g.StreamReply:
    return g.stream(
        g.response(g.thought("Need pods and logs.")),
        g.response(
            g.function_call(
                "kubernetes__get_pods", {"namespace": "payments"}, signature=b"sig-call"
            ),
            g.function_call("kubernetes__get_logs", {"pod": "payments-1"}),
            finish_reason="STOP",
        ),
    )


def conversation_after(
    deltas: list[Delta], *, answer: str | None = None
) -> tuple[ConversationMessage, ...]:
    """What the agent controller builds from a turn's deltas, plus tool results."""
    calls = tuple(
        ToolCall(d.call_id, d.name, d.arguments) for d in deltas if isinstance(d, ToolCallDelta)
    )
    messages = [
        ConversationMessage(Role.SYSTEM, "You are an SRE."),
        ConversationMessage(Role.USER, "Pod payments-1 is crash-looping."),
        ConversationMessage(Role.ASSISTANT, "", tool_calls=calls),
        *(ConversationMessage(Role.TOOL, "ok", tool_call_id=c.id, tool_name=c.name) for c in calls),
    ]
    if answer is not None:
        messages += [
            ConversationMessage(Role.ASSISTANT, answer),
            ConversationMessage(Role.USER, "Anything else?"),
        ]
    return tuple(messages)


async def test_thought_signatures_return_on_their_parts_next_turns(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(
        first_turn_reply(),
        g.stream(
            g.response(g.text("OOM: raise the memory limit.")),
            g.response(g.signature_only(b"sig-text"), finish_reason="STOP"),
        ),
        g.text_reply(),
    )
    first = await collect(provider, request(fake_gemini))
    history = conversation_after(first)
    await collect(provider, request(fake_gemini, *history))
    await collect(
        provider,
        request(fake_gemini, *conversation_after(first, answer="OOM: raise the memory limit.")),
    )

    second, third = fake_gemini.bodies[1:]
    # Only the first of the parallel calls was signed; the signature goes back on it.
    assert signatures_in(second) == [(1, "call", b"sig-call")]
    assert second["contents"][1]["parts"][1]["functionCall"]["name"] == "kubernetes__get_logs"
    assert signatures_in(third) == [(1, "call", b"sig-call"), (3, "text", b"sig-text")]


async def test_thought_signatures_stay_with_their_execution(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(first_turn_reply(), g.text_reply(), g.text_reply())
    first = await collect(provider, request(fake_gemini, execution_id="exec-A"))
    history = conversation_after(first)
    await collect(provider, request(fake_gemini, *history, execution_id="exec-B"))
    await collect(provider, request(fake_gemini, *history, execution_id="exec-A"))

    other_execution, same_execution = fake_gemini.bodies[1:]
    assert signatures_in(other_execution) == []
    assert signatures_in(same_execution) == [(1, "call", b"sig-call")]


async def test_text_signature_needs_the_same_text(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(
        g.stream(g.response(g.text("Answer."), g.signature_only(b"sig-text"))),
        g.text_reply(),
        g.text_reply(),
    )
    await collect(provider, request(fake_gemini, tools=()))

    def history(answer: str) -> tuple[ConversationMessage, ...]:
        return (
            ConversationMessage(Role.USER, "Pod payments-1 is crash-looping."),
            ConversationMessage(Role.ASSISTANT, answer),
            ConversationMessage(Role.USER, "More detail?"),
        )

    await collect(provider, request(fake_gemini, *history("Answer."), tools=()))
    # A controller that rewrote the answer gets no signature rather than a wrong one.
    await collect(provider, request(fake_gemini, *history("Answer, edited."), tools=()))
    assert signatures_in(fake_gemini.bodies[1]) == [(1, "text", b"sig-text")]
    assert signatures_in(fake_gemini.bodies[2]) == []


async def test_thought_signatures_expire_an_hour_after_last_use(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, clock: Clock
) -> None:
    fake_gemini.enqueue(first_turn_reply(), *(g.text_reply() for _ in range(4)))
    history = conversation_after(await collect(provider, request(fake_gemini)))
    clock.now += 3500
    await collect(provider, request(fake_gemini, *history))  # used, so kept longer
    clock.now += 3500
    await collect(provider, request(fake_gemini, *history))
    assert signatures_in(fake_gemini.bodies[1]) == [(1, "call", b"sig-call")]
    assert signatures_in(fake_gemini.bodies[2]) == [(1, "call", b"sig-call")]

    clock.now += 3601
    await collect(provider, request(fake_gemini, execution_id="exec-other"))
    assert len(provider.signatures) == 0  # purged by any execution's next call
    await collect(provider, request(fake_gemini, *history))
    assert signatures_in(fake_gemini.bodies[4]) == []


async def test_gemini_3_unknown_call_signature_gets_bypass_sentinel(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(g.text_reply())
    calls = (
        ToolCall("call-a", "kubernetes.get_pods", {"namespace": "payments"}),
        ToolCall("call-b", "kubernetes.get_logs", {"pod": "payments-1"}),
    )
    history = (
        ConversationMessage(Role.USER, "Investigate."),
        ConversationMessage(Role.ASSISTANT, "", tool_calls=calls),
        ConversationMessage(Role.TOOL, "1 pod", tool_call_id="call-a", tool_name=PODS.name),
        ConversationMessage(Role.TOOL, "OOM", tool_call_id="call-b", tool_name=LOGS.name),
    )
    await collect(provider, request(fake_gemini, *history, model="gemini-3-pro-preview"))
    # Only the step's first call; the parallel second call carries none by design.
    assert signatures_in(fake_gemini.bodies[0]) == [(1, "call", SKIP_SENTINEL)]


# -- failures and retries -------------------------------------------------------------------


async def test_429_honours_retry_after_then_succeeds(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(
        g.error(429, "Resource has been exhausted (e.g. check quota).", retry_after=7),
        g.text_reply("Recovered."),
    )
    deltas = await collect(provider, request(fake_gemini))
    assert sleeps.delays == [7.0]
    assert len(fake_gemini.requests) == 2
    assert deltas[0] == TextDelta("Recovered.")
    assert not any(isinstance(d, ErrorInfo) for d in deltas)


async def test_429_honours_gemini_retry_info_in_the_body(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(
        g.error(429, "You exceeded your current quota.", retry_delay=12.5), g.text_reply()
    )
    await collect(provider, request(fake_gemini))
    assert sleeps.delays == [12.5]


async def test_429_gives_up_after_three_retries(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(*(g.error(429, "Too many requests, rate limited.") for _ in range(4)))
    deltas = await collect(provider, request(fake_gemini))
    assert len(fake_gemini.requests) == 4
    assert sleeps.delays == [1.0, 2.0, 4.0]
    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("rate_limit", True)


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (g.error(401, "API key not valid. Please pass a valid API key."), "auth_error"),
        (g.error(403, "Permission denied."), "auth_error"),
        (g.error(400, "Invalid JSON payload received."), "invalid_request"),
        (g.error(429, "Quota exceeded; check your plan and billing details."), "quota_exceeded"),
    ],
)
async def test_hard_failures_fail_at_once(
    fake_gemini: FakeGemini,
    provider: GoogleNativeProvider,
    sleeps: Sleeps,
    reply: g.ErrorReply,
    code: str,
) -> None:
    fake_gemini.enqueue(reply, g.text_reply())
    deltas = await collect(provider, request(fake_gemini))
    assert len(fake_gemini.requests) == 1
    assert sleeps.delays == []
    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == (code, False)
    assert KEY not in error.message


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_are_retried(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps, status: int
) -> None:
    fake_gemini.enqueue(g.error(status, "Internal error."), g.text_reply("Fine now."))
    deltas = await collect(provider, request(fake_gemini))
    assert len(fake_gemini.requests) == 2
    assert sleeps.delays == [1.0]
    assert deltas[0] == TextDelta("Fine now.")


async def test_stream_cut_midway_is_a_retryable_error(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(
        g.stream(
            g.response(g.text("The pod ")),
            g.response(g.text("was OOM")),
            g.response(g.text("Killed."), finish_reason="STOP"),
            cut_after=2,
        ),
        g.text_reply(),
    )
    deltas = await collect(provider, request(fake_gemini))
    assert deltas[:2] == [TextDelta("The pod "), TextDelta("was OOM")]
    [error] = deltas[2:]
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("stream_interrupted", True)
    # Text already reached the caller: replaying the turn would duplicate it.
    assert len(fake_gemini.requests) == 1
    assert sleeps.delays == []


async def test_stream_cut_before_any_content_is_retried(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(g.stream(g.response(g.text("never sent")), cut_after=0), g.text_reply())
    deltas = await collect(provider, request(fake_gemini))
    assert len(fake_gemini.requests) == 2
    assert sleeps.delays == [1.0]
    assert deltas[0] == TextDelta("All good.")


async def test_empty_response_is_retried_then_succeeds(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(g.empty(), g.text_reply("Second time lucky."))
    deltas = await collect(provider, request(fake_gemini))
    assert len(fake_gemini.requests) == 2
    assert sleeps.delays == [3.0]
    # The empty attempt's usage is dropped; only the counted attempt's is reported.
    assert deltas == [
        TextDelta("Second time lucky."),
        UsageInfo(input_tokens=10, output_tokens=5, total_tokens=15),
    ]


async def test_empty_responses_give_up_after_three_retries(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps
) -> None:
    fake_gemini.enqueue(*(g.empty() for _ in range(4)), g.stream())
    deltas = await collect(provider, request(fake_gemini))
    assert len(fake_gemini.requests) == 4
    assert sleeps.delays == [3.0, 3.0, 3.0]
    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("empty_response", True)


async def test_missing_key_variable_is_an_auth_error(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    deltas = await collect(provider, request(fake_gemini))
    [error] = deltas
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("auth_error", False)
    assert KEY_ENV in error.message
    assert fake_gemini.requests == []
    # Not cached as a failure: once the variable is set, calls go through.
    monkeypatch.setenv(KEY_ENV, KEY)
    fake_gemini.enqueue(g.text_reply())
    assert (await collect(provider, request(fake_gemini)))[0] == TextDelta("All good.")


async def test_clients_are_cached_and_read_the_key_once(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(fake_gemini)
    client = provider.client_for(cfg)
    assert provider.client_for(config(fake_gemini, model="gemini-2.5-flash")) is client
    assert provider.client_for(config(fake_gemini, base_url=fake_gemini.url + "/")) is not client
    monkeypatch.setenv(KEY_ENV, "rotated-key")
    fake_gemini.enqueue(g.text_reply())
    await collect(provider, request(fake_gemini))
    assert fake_gemini.requests[0].headers["x-goog-api-key"] == KEY


# -- closing the stream ---------------------------------------------------------------------


def slow_reply() -> g.StreamReply:
    return g.stream(
        g.response(g.text("First words")),
        g.response(g.text("arrive much later"), finish_reason="STOP"),
        delay=[0.0, 5.0],
    )


async def test_cancelling_the_consumer_closes_the_http_stream(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(slow_reply())
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in provider.generate(request(fake_gemini)):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(fake_gemini.wait_for_disconnect, 2.0)


async def test_stopping_early_closes_the_http_stream(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider
) -> None:
    fake_gemini.enqueue(slow_reply())
    deltas = provider.generate(request(fake_gemini))
    assert await anext(deltas) == TextDelta("First words")
    await deltas.aclose()  # type: ignore[attr-defined]
    assert await asyncio.to_thread(fake_gemini.wait_for_disconnect, 2.0)


@pytest.fixture
def quiet_retry_logs() -> Iterator[None]:
    logging.getLogger("llm.retry").setLevel(logging.ERROR)
    yield
    logging.getLogger("llm.retry").setLevel(logging.NOTSET)


async def test_default_policy_is_overridable(
    fake_gemini: FakeGemini, sleeps: Sleeps, quiet_retry_logs: None
) -> None:
    provider = GoogleNativeProvider(sleep=sleeps, policy=RetryPolicy(max_retries=1))
    fake_gemini.enqueue(g.error(500, "boom"), g.error(500, "boom"), g.text_reply())
    [error] = await collect(provider, request(fake_gemini))
    assert isinstance(error, ErrorInfo)
    assert (error.code, error.retryable) == ("server_error", True)
    assert len(fake_gemini.requests) == 2


def test_a_provider_outlives_event_loops(fake_gemini: FakeGemini, sleeps: Sleeps) -> None:
    """Workers run each session in a fresh asyncio.run; a pooled connection from a
    finished loop must not be reused."""
    provider = GoogleNativeProvider(sleep=sleeps)
    fake_gemini.enqueue(g.text_reply("one"), g.text_reply("two"))
    first = asyncio.run(collect(provider, request(fake_gemini)))
    second = asyncio.run(collect(provider, request(fake_gemini)))
    assert (first[0], second[0]) == (TextDelta("one"), TextDelta("two"))


async def test_fake_runs_standalone_from_a_script(
    fake_gemini: FakeGemini, provider: GoogleNativeProvider, sleeps: Sleeps, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    record = tmp_path / "requests.jsonl"
    replies = [
        {"status": 503, "message": "The model is overloaded."},
        {"chunks": [g.response(g.text("From another process."), finish_reason="STOP")]},
    ]
    script.write_text(json.dumps({"replies": replies}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(g.__file__)),
        *("--port", "0", "--script", str(script), "--record", str(record)),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        url = (await asyncio.wait_for(process.stdout.readline(), 10)).decode().strip()
        deltas = await collect(provider, request(fake_gemini, base_url=url))
    finally:
        process.terminate()
        await process.wait()
    assert deltas[0] == TextDelta("From another process.")
    assert sleeps.delays == [1.0]
    assert fake_gemini.requests == []  # the in-process fake was not involved
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["path"] for line in lines] == [
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    ] * 2
    assert KEY not in record.read_text()
