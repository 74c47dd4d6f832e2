"""A tool's result on its way from the MCP server to the model.

1. Masked: made storable (NUL and lone surrogates become U+FFFD), then the default
   masking, then the server's ``data_masking``; fail-closed.
2. Recorded: the trace (MCP interaction) keeps the whole masked result; the timeline
   item keeps at most ``TARSY_TOOL_RESULT_STORAGE_TOKENS``, with a marker saying so.
3. Above the server's ``summarization.size_threshold_tokens``, an LLM summarises it
   with the investigation's context, streamed live as an ``mcp_tool_summary`` item, and
   the model gets the summary. When every summariser fails, the model gets the result
   truncated to the threshold, and the summary item says so.
4. Never more than ``TARSY_TOOL_RESULT_MAX_TOKENS`` reaches the model (summarisation
   off, or a summary that ran long), so one tool call cannot overflow its context.

Tokens are estimated as characters / 4: no tokenizer download, no network.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass

from django.conf import settings

from agents.prompts import tool_summary_messages
from agents.recorder import message_to_json
from config.types import MCPServerConfig, Summarization
from llm.tool_names import tool_parts
from llm.types import ErrorInfo, GenerateRequest, Role, TextDelta, ToolCall, UsageInfo
from masking import ExtraMasking, mask_text, mask_tool_result
from masking.bounded import storable
from sessions.models import TimelineEventStatus, TimelineEventType

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
# What of the alert goes into a summarisation request: context, not the whole alert.
ALERT_CONTEXT_CHARS = 4000


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def truncate(text: str, max_tokens: int, why: str) -> tuple[str, bool]:
    """``text`` cut to about ``max_tokens`` at a line end, with a marker naming ``why``."""
    if estimate_tokens(text) <= max_tokens:
        return text, False
    keep = max_tokens * CHARS_PER_TOKEN
    cut = text.rfind("\n", 0, keep)
    if cut < keep // 2:
        cut = keep
    marker = (
        f"\n\n[TRUNCATED {why}: the first ~{estimate_tokens(text[:cut]):,} of "
        f"~{estimate_tokens(text):,} tokens are shown]"
    )
    return text[:cut] + marker, True


@dataclass(frozen=True)
class Outcome:
    stored: str  # for the tool call's timeline item
    for_model: str  # the tool message the model gets


def mask(content: str, server: MCPServerConfig | None) -> str:
    extra = ExtraMasking.from_config(server.data_masking) if server is not None else None
    # A result cannot be refused, but PostgreSQL cannot store NUL (JSON's "\u0000") in
    # text: it, and any lone surrogate, becomes U+FFFD before anything keeps it.
    return mask_tool_result(storable(content), extra)


def stored(content: str) -> str:
    return truncate(content, settings.TARSY_TOOL_RESULT_STORAGE_TOKENS, "for storage")[0]


def hard_limit(content: str) -> str:
    return truncate(content, settings.TARSY_TOOL_RESULT_MAX_TOKENS, "to fit the model's context")[0]


async def for_model(run, call: ToolCall, server: MCPServerConfig | None, content: str) -> str:
    """What the model reads of a masked result (``run`` is the controller's AgentRun)."""
    policy = server.summarization if server is not None else Summarization(enabled=False)
    tokens = estimate_tokens(content)
    if not policy.enabled or tokens <= policy.size_threshold_tokens:
        return hard_limit(content)
    server_id, tool = tool_parts(call.name)
    await run.recorder.progress("distilling", f"Summarizing {server_id}.{tool} ({tokens} tokens)")
    summary = await _summarize(run, call, policy, content, tokens)
    if summary is None:
        return truncate(
            content,
            policy.size_threshold_tokens,
            "because it could not be summarized",
        )[0]
    return hard_limit(
        f"[The output of {call.name} was ~{tokens:,} tokens; this is a summary of it. The "
        f"whole output is in the tool call's record.]\n\n{summary}"
    )


async def _summarize(
    run, call: ToolCall, policy: Summarization, content: str, tokens: int
) -> str | None:
    """Stream a summary into an ``mcp_tool_summary`` item; None when every provider failed
    (the item then says the model got the result truncated)."""
    server_id = tool_parts(call.name)[0]
    primary = run.summarizers.get(server_id) or run.choice
    # The agent's fallbacks, in order, past the one that failed (ADR-0024); never the
    # investigating agent's own state.
    candidates = [primary, *(c for c in run.fallbacks if c.config.name != primary.config.name)]
    session = run.recorder.session
    reasoning = next(
        (m.content for m in reversed(run.messages) if m.role == Role.ASSISTANT and m.content), ""
    )
    messages = tool_summary_messages(
        alert_type=session.alert_type,
        alert_data=session.alert_data[:ALERT_CONTEXT_CHARS],
        reasoning=reasoning,
        tool_name=call.name,
        arguments=call.arguments,
        output=truncate(content, settings.TARSY_SUMMARIZATION_INPUT_TOKENS, "for the summarizer")[
            0
        ],
        max_tokens=policy.summary_max_token_limit,
    )
    errors: list[str] = []
    for choice in candidates:
        metadata = {
            "server_name": server_id,
            "tool_name": tool_parts(call.name)[1],
            "call_id": call.id,
            "original_tokens": tokens,
            "summarization_provider": choice.config.name,
            "summarization_model": choice.config.model,
        }
        if errors:
            metadata["summarization_fallback"] = True
        text, error = await _one_summary(run, choice, messages, metadata)
        if error is None and text.strip():
            return text
        errors.append(f"{choice.describe()}: {error.message if error else 'an empty summary'}")
    logger.warning("summarizing %s failed: %s", call.name, "; ".join(errors))
    await run.recorder.add_item(
        TimelineEventType.MCP_TOOL_SUMMARY,
        mask_text(
            f"The result of {call.name} (~{tokens:,} tokens) could not be summarized "
            f"({'; '.join(errors)}). The model received it truncated to "
            f"~{policy.size_threshold_tokens:,} tokens."
        ),
        metadata={
            "server_name": server_id,
            "tool_name": tool_parts(call.name)[1],
            "call_id": call.id,
            "original_tokens": tokens,
            "truncated_for_model": True,
        },
        status=TimelineEventStatus.FAILED,
    )
    return None


async def _one_summary(run, choice, messages, metadata) -> tuple[str, ErrorInfo | None]:
    # Text in, text out: no MCP tools, no Gemini native tools (a summariser must not go
    # searching the web), and its own conversation key (google-native caches per id).
    config = dataclasses.replace(choice.config, native_tools=())
    request = GenerateRequest(
        messages=tuple(messages),
        config=config,
        execution_id=f"{run.recorder.execution.id}:summarization",
        session_id=str(run.recorder.session.id),
        agent_name="ToolSummarizer",
    )
    await run.recorder.check_lease()
    item = await run.recorder.start_item(TimelineEventType.MCP_TOOL_SUMMARY, metadata=metadata)
    text, error, usage = "", None, UsageInfo()
    started = time.monotonic()
    limit = settings.TARSY_LLM_CALL_TIMEOUT
    try:
        async with asyncio.timeout(limit):
            async for delta in choice.provider.generate(request):
                if isinstance(delta, TextDelta) and delta.content:
                    chunk = storable(delta.content)  # as the controller's model calls
                    text += chunk
                    await run.recorder.chunk(item, chunk)
                elif isinstance(delta, UsageInfo):
                    usage = delta
                elif isinstance(delta, ErrorInfo):
                    error = delta
    except TimeoutError:
        error = ErrorInfo("timeout", f"no summary within {limit:g} s", retryable=True)
    except Exception as exc:  # a backend bug must not end the investigation
        logger.exception("summarization by %s raised", choice.describe())
        error = ErrorInfo("summarization_failed", type(exc).__name__)
    failed = error is not None or not text.strip()
    await run.recorder.complete_item(
        item,
        text if not failed else text or "(no summary)",
        status=TimelineEventStatus.FAILED if failed else TimelineEventStatus.COMPLETED,
    )
    cost = run.cost.estimate(choice.config.model, usage.input_tokens, usage.output_tokens)
    await run.recorder.llm_interaction(
        interaction_type="summarization",
        provider=choice.config.name,
        backend=choice.backend,
        model_name=choice.config.model,
        estimated_cost_usd=None if cost is None else round(cost, 6),
        # The whole output is in the tool call's MCP interaction already.
        request_messages=[{**message_to_json(m), "content": stored(m.content)} for m in messages],
        tools=[],
        response_text=text,
        thinking="",
        tool_calls=[],
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        thinking_tokens=usage.thinking_tokens,
        total_tokens=usage.total_tokens,
        duration_ms=int((time.monotonic() - started) * 1000),
        error_code=error.code if error else "",
        error_message=mask_text(error.message) if error else "",
    )
    return text, error
