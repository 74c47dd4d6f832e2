"""The two ways an agent talks to its model (ADR-0001):

- ``IteratingController``: call the LLM, run the tools it asks for, repeat; one forced
  conclusion without tools at ``max_iterations``, or once the session's budget is spent
  (agents/budget.py). An agent with sub-agents gets their
  results pushed into its conversation and cannot conclude while they still run.
- ``SingleShotController``: one call, no tools (synthesis, executive summary, scoring).

Where is a tool call executed? ``IteratingController._run_tool``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings

from agents.budget import SessionBudget
from agents.prompts import BUDGET_SKIPPED_TOOL, budget_conclusion, forced_conclusion
from agents.recorder import Recorder, message_to_json
from agents.resolver import AgentSettings, ProviderChoice
from agents.steering import Steering
from agents.tools import results as tool_results
from config.types import CostEstimation, MCPServerConfig
from llm.errors import CONNECTION_ERROR
from llm.tool_names import tool_parts
from llm.types import (
    CodeExecutionDelta,
    ConversationMessage,
    ErrorInfo,
    GenerateRequest,
    GroundingInfo,
    Role,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    UsageInfo,
)
from masking import mask_text
from masking.bounded import storable
from sessions.models import ExecutionStatus, TimelineEvent, TimelineEventStatus, TimelineEventType

logger = logging.getLogger(__name__)


class ToolResultLike(Protocol):
    # Read-only: a frozen dataclass qualifies.
    @property
    def content(self) -> str: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def duration_ms(self) -> int: ...


class ToolExecutor(Protocol):
    async def list_tools(self) -> list[ToolDefinition]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResultLike: ...


class NoTools:
    """The tools of a model call that is offered none (scoring, reflection)."""

    async def list_tools(self) -> list[ToolDefinition]:
        return []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResultLike:
        raise NotImplementedError(f"{name}: this call is offered no tools")


@dataclass
class LLMTurn:
    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: UsageInfo = field(default_factory=UsageInfo)
    error: ErrorInfo | None = None


@dataclass(frozen=True)
class AgentResult:
    status: ExecutionStatus
    final_analysis: str = ""
    error: str = ""
    iterations: int = 0


class SubAgents(Protocol):
    """The agents an orchestrating agent dispatched (agents/sub_agents.py)."""

    @property
    def running(self) -> int: ...

    def drain(self) -> list[ConversationMessage]: ...

    async def wait(self) -> list[ConversationMessage]: ...

    async def cancel_all(self, reason: str) -> None: ...

    def tools(self, mcp: ToolExecutor) -> ToolExecutor: ...


@dataclass
class AgentRun:
    """What one agent execution works with."""

    settings: AgentSettings
    choice: ProviderChoice
    tools: ToolExecutor
    recorder: Recorder
    messages: list[ConversationMessage]
    # Providers to continue on, in order, when the current one fails for good.
    fallbacks: list[ProviderChoice] = field(default_factory=list)
    cost: CostEstimation = field(default_factory=CostEstimation)
    sub_agents: SubAgents | None = None
    # The agent's MCP servers (masking, summarization) and who summarises their results.
    servers: Mapping[str, MCPServerConfig] = field(default_factory=dict)
    summarizers: Mapping[str, ProviderChoice] = field(default_factory=dict)
    # An SRE's notes to the running session, read before each model call (agents/steering.py).
    steering: Steering | None = None
    # The session's budget, shared by all its agents (agents/budget.py); None: no limits.
    budget: SessionBudget | None = None


class _ModelCalls:
    """What both controllers share: recording the conversation and calling the model
    (with fallback to the next provider) while its output streams onto the timeline."""

    async def _record_messages(self, run: AgentRun) -> None:
        for message in run.messages:
            await run.recorder.message(message)

    async def _append(self, run: AgentRun, messages: list[ConversationMessage]) -> None:
        for message in messages:
            run.messages.append(message)
            await run.recorder.message(message)

    async def _turn(
        self,
        run: AgentRun,
        tools: tuple[ToolDefinition, ...],
        *,
        interaction_type: str,
        answer_type: TimelineEventType = TimelineEventType.FINAL_ANALYSIS,
        item_metadata: dict[str, Any] | None = None,
    ) -> LLMTurn:
        """One model turn; a provider that fails for good hands over to the next fallback.
        ``item_metadata``: added to the turn's thinking and text items (as TARSy marks a
        forced conclusion's)."""
        call = functools.partial(
            self._call_llm,
            run,
            tools,
            interaction_type=interaction_type,
            answer_type=answer_type,
            item_metadata=item_metadata,
        )
        turn = await call()
        while turn.error is not None and await self._fall_back(run, turn.error):
            turn = await call()
        return turn

    @staticmethod
    async def _fall_back(run: AgentRun, error: ErrorInfo) -> bool:
        """Continue on the next fallback; False when none is left. As TARSy's tryFallback:
        one named like the provider that failed would fail the same way, and an agent whose
        own definition turns on Gemini native tools only continues on google-native."""
        failed = run.choice
        skipped_incompatible: list[str] = []
        while True:
            if not run.fallbacks:
                return False
            candidate = run.fallbacks.pop(0)
            if candidate.config.name == failed.config.name:
                continue
            if run.settings.requires_native_tools and candidate.backend != "google-native":
                skipped_incompatible.append(candidate.config.name)
                continue
            break
        run.choice = candidate
        await run.recorder.add_item(
            TimelineEventType.PROVIDER_FALLBACK,
            # Masked as in _describe: the provider's message may quote what it was sent.
            mask_text(
                f"LLM provider {failed.describe()} failed: {error.message} [{error.code}]. "
                f"Continuing on {run.choice.describe()}."
            ),
            metadata={
                "from_provider": failed.config.name,
                "from_backend": failed.backend,
                "to_provider": run.choice.config.name,
                "to_backend": run.choice.backend,
                "from_model": failed.config.model,
                "to_model": run.choice.config.model,
                "error_code": error.code,
                **({"skipped_incompatible": skipped_incompatible} if skipped_incompatible else {}),
            },
        )
        await run.recorder.switch_provider(run.choice.config, run.choice.backend)
        return True

    async def _call_llm(
        self,
        run: AgentRun,
        tools: tuple[ToolDefinition, ...],
        *,
        interaction_type: str,
        answer_type: TimelineEventType,
        item_metadata: dict[str, Any] | None = None,
    ) -> LLMTurn:
        """One call to the current provider: its output streams onto the timeline as it
        comes, then the turn is closed and recorded."""
        await run.recorder.check_lease()  # a worker that lost its session calls no model
        if run.steering is not None:
            await self._append(run, await run.steering.take())
        request = GenerateRequest(
            messages=tuple(run.messages),
            config=run.choice.config,
            tools=tools,
            execution_id=str(run.recorder.execution.id),
            session_id=str(run.recorder.session.id),
            agent_name=run.settings.name,
        )
        stream = _TurnStream(run, item_metadata)
        started = time.monotonic()
        # An interruption (timeout, cancellation) leaves the items streaming; the
        # executor's clean-up (services.session_close_open_work) finishes them with the
        # text written so far, so the recorder first writes what it had gathered.
        try:
            async for delta in _bounded(run.choice.provider.generate(request)):
                await stream.take(delta)
        except BaseException:
            with contextlib.suppress(Exception):
                await run.recorder.flush()
            raise
        duration_ms = int((time.monotonic() - started) * 1000)
        turn = stream.turn
        await stream.close(answer_type)
        if turn.error is not None:
            await run.recorder.add_item(
                TimelineEventType.ERROR,
                _describe(turn.error, run.choice),
                metadata={"code": turn.error.code, "retryable": turn.error.retryable},
                status=TimelineEventStatus.FAILED,
            )
        else:
            assistant = ConversationMessage(
                Role.ASSISTANT, turn.text, tool_calls=tuple(turn.tool_calls)
            )
            run.messages.append(assistant)
            await run.recorder.message(assistant)
        await _record_call(run, request, turn, interaction_type, duration_ms)
        return turn


class _TurnStream:
    """A model's output as it streams: thinking and text each grow one timeline item, code
    the model ran becomes a ``code_execution`` item, and the rest gathers in ``turn``."""

    def __init__(self, run: AgentRun, item_metadata: dict[str, Any] | None = None) -> None:
        self.run = run
        self.item_metadata = item_metadata or {}
        self.turn = LLMTurn()
        self.thinking_item: TimelineEvent | None = None
        self.text_item: TimelineEvent | None = None
        self.code_item: TimelineEvent | None = None  # code the model ran, awaiting its output
        self.grounding: list[dict[str, Any]] = []

    async def take(self, delta: Any) -> None:
        recorder, turn = self.run.recorder, self.turn
        if isinstance(delta, ThinkingDelta) and delta.content:
            if self.thinking_item is None:
                # TARSy's ``source``: Gemini's own thoughts, or a LangChain model's.
                source = "native" if self.run.choice.backend == "google-native" else "langchain"
                self.thinking_item = await recorder.start_item(
                    TimelineEventType.LLM_THINKING,
                    metadata={"source": source, **self.item_metadata},
                )
            turn.thinking += delta.content
            await recorder.chunk(self.thinking_item, delta.content)
        elif isinstance(delta, TextDelta) and delta.content:
            if self.text_item is None:
                self.text_item = await recorder.start_item(
                    TimelineEventType.LLM_RESPONSE, metadata=self.item_metadata or None
                )
            turn.text += delta.content
            await recorder.chunk(self.text_item, delta.content)
        elif isinstance(delta, ToolCallDelta):
            turn.tool_calls.append(ToolCall(delta.call_id, delta.name, delta.arguments))
        elif isinstance(delta, CodeExecutionDelta):
            await self._code_execution(delta)
        elif isinstance(delta, UsageInfo):
            turn.usage = delta
        elif isinstance(delta, GroundingInfo):
            self.grounding.append(delta.metadata)
        elif isinstance(delta, ErrorInfo):
            turn.error = delta

    async def close(self, answer_type: TimelineEventType) -> None:
        """Complete the items the stream left open."""
        recorder, turn = self.run.recorder, self.turn
        if self.code_item is not None:  # code whose output never came
            await recorder.complete_item(self.code_item, self.code_item.metadata["code"])
        if self.thinking_item is not None:
            await recorder.complete_item(self.thinking_item, turn.thinking)
        if self.text_item is not None:
            # Text without tool calls is the answer, unless sub-agents still run: then the
            # agent has to wait for them, and it was only an interim word.
            final = not turn.tool_calls and turn.error is None and not _waiting(self.run)
            await recorder.complete_item(
                self.text_item,
                turn.text,
                event_type=answer_type if final else None,
                metadata={"grounding": self.grounding} if self.grounding else None,
            )

    async def _code_execution(self, delta: CodeExecutionDelta) -> None:
        """Gemini sends the code it runs and then its output as separate parts; the two
        make one ``code_execution`` item."""
        recorder, pending = self.run.recorder, self.code_item
        self.code_item = None
        if delta.code:
            if pending is not None:
                await recorder.complete_item(pending, pending.metadata["code"])
            self.code_item = await recorder.start_item(
                TimelineEventType.CODE_EXECUTION, metadata={"code": delta.code, "result": ""}
            )
        elif pending is not None:
            await recorder.complete_item(pending, delta.result, metadata={"result": delta.result})
        else:
            await recorder.add_item(
                TimelineEventType.CODE_EXECUTION,
                delta.result,
                metadata={"code": "", "result": delta.result},
            )


async def _record_call(
    run: AgentRun,
    request: GenerateRequest,
    turn: LLMTurn,
    interaction_type: str,
    duration_ms: int,
) -> None:
    """The trace's record of one model call: what it was sent and what it answered."""
    cost = run.cost.estimate(
        run.choice.config.model, turn.usage.input_tokens, turn.usage.output_tokens
    )
    await run.recorder.llm_interaction(
        interaction_type=interaction_type,
        provider=run.choice.config.name,
        backend=run.choice.backend,
        model_name=run.choice.config.model,
        estimated_cost_usd=None if cost is None else round(cost, 6),
        request_messages=[message_to_json(m) for m in request.messages],
        tools=[tool.name for tool in request.tools],
        response_text=turn.text,
        thinking=turn.thinking,
        tool_calls=[
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls
        ],
        input_tokens=turn.usage.input_tokens,
        output_tokens=turn.usage.output_tokens,
        thinking_tokens=turn.usage.thinking_tokens,
        total_tokens=turn.usage.total_tokens,
        duration_ms=duration_ms,
        error_code=turn.error.code if turn.error else "",
        error_message=turn.error.message if turn.error else "",
    )


class IteratingController(_ModelCalls):
    async def run(self, run: AgentRun) -> AgentResult:
        await self._record_messages(run)
        tools = tuple(await run.tools.list_tools())
        await self._record_tool_list(run, tools)
        limit = run.settings.max_iterations
        for iteration in range(1, limit + 1):
            await run.recorder.progress("investigating", f"Iteration {iteration}/{limit}")
            if run.sub_agents is not None:
                await self._append(run, run.sub_agents.drain())
            reason = await _over_budget(run)
            if reason:
                return await self._budget_conclusion(run, reason, iteration - 1)
            turn = await self._turn(run, tools, interaction_type="iteration")
            if turn.error:
                return AgentResult(
                    ExecutionStatus.FAILED,
                    error=_describe(turn.error, run.choice),
                    iterations=iteration,
                )
            if turn.tool_calls:
                for index, call in enumerate(turn.tool_calls):
                    reason = await _over_budget(run)
                    if reason:
                        await self._skip_tools(run, turn.tool_calls[index:], reason)
                        return await self._budget_conclusion(run, reason, iteration)
                    await self._run_tool(run, call)
            elif run.sub_agents is not None and _waiting(run):
                # It may not conclude while its sub-agents run: their results come next.
                await self._append(run, await run.sub_agents.wait())
            else:
                return self._conclude(turn, iteration)
        if run.sub_agents is not None and run.sub_agents.running:
            await run.sub_agents.cancel_all(f"the limit of {limit} steps was reached")
            await self._append(run, run.sub_agents.drain())
        await run.recorder.progress("concluding", f"Forcing conclusion after {limit} iterations")
        await self._append(run, [forced_conclusion(limit)])
        marks = {"forced_conclusion": True, "iterations_used": limit, "max_iterations": limit}
        turn = await self._turn(run, (), interaction_type="forced_conclusion", item_metadata=marks)
        if turn.error:
            return AgentResult(
                ExecutionStatus.FAILED,
                error=_describe(turn.error, run.choice),
                iterations=limit + 1,
            )
        return self._conclude(turn, limit + 1)

    async def _budget_conclusion(self, run: AgentRun, reason: str, iterations: int) -> AgentResult:
        """The investigation's budget is spent: one last call without tools, marked as
        TARSy marks a forced conclusion, with the reason ``budget``. Sub-agents still
        running conclude too, on the same budget; their answers come first."""
        if run.sub_agents is not None:
            while run.sub_agents.running:
                await self._append(run, await run.sub_agents.wait())
            await self._append(run, run.sub_agents.drain())
        await run.recorder.progress("concluding", f"Stopped by budget: {reason}")
        await self._append(run, [budget_conclusion(reason)])
        marks = {
            "forced_conclusion": True,
            "reason": "budget",
            "iterations_used": iterations,
            "max_iterations": run.settings.max_iterations,
        }
        turn = await self._turn(run, (), interaction_type="forced_conclusion", item_metadata=marks)
        if turn.error:
            return AgentResult(
                ExecutionStatus.FAILED,
                error=_describe(turn.error, run.choice),
                iterations=iterations + 1,
            )
        return self._conclude(turn, iterations + 1)

    async def _skip_tools(self, run: AgentRun, calls: list[ToolCall], reason: str) -> None:
        """The tool calls a budget stop left unrun are answered as such: the model's
        conversation needs an answer to each call it made."""
        await self._append(
            run,
            [
                ConversationMessage(
                    Role.TOOL,
                    BUDGET_SKIPPED_TOOL.format(reason=reason),
                    tool_call_id=call.id,
                    tool_name=call.name,
                )
                for call in calls
            ],
        )

    @staticmethod
    def _conclude(turn: LLMTurn, iterations: int) -> AgentResult:
        if not turn.text.strip():
            return AgentResult(
                ExecutionStatus.FAILED,
                error="the model ended its turn without an answer or a tool call",
                iterations=iterations,
            )
        return AgentResult(
            ExecutionStatus.COMPLETED, final_analysis=turn.text, iterations=iterations
        )

    @staticmethod
    async def _record_tool_list(run: AgentRun, tools: tuple[ToolDefinition, ...]) -> None:
        by_server: dict[str, list[str]] = {}
        for tool in tools:
            server, name = tool_parts(tool.name)
            by_server.setdefault(server, []).append(name)
        for server, names in by_server.items():
            await run.recorder.mcp_interaction(
                interaction_type="tool_list", server_name=server, available_tools=names
            )

    async def _run_tool(self, run: AgentRun, call: ToolCall) -> None:
        server, tool = tool_parts(call.name)
        await run.recorder.progress("gathering_info", f"Calling {server}.{tool}")
        item = await run.recorder.start_item(
            TimelineEventType.LLM_TOOL_CALL,
            metadata={
                "tool_name": call.name,
                "server_name": server,
                "arguments": call.arguments,
                "call_id": call.id,
            },
        )
        result = await run.tools.call_tool(call.name, call.arguments)
        # Masked before anything keeps or shows it: the timeline, the records, the model.
        config = run.servers.get(server)
        content = tool_results.mask(result.content, config)
        shown = tool_results.stored(content)
        await run.recorder.complete_item(
            item,
            shown,
            status=TimelineEventStatus.FAILED if result.is_error else TimelineEventStatus.COMPLETED,
            metadata={
                "is_error": result.is_error,
                "duration_ms": result.duration_ms,
                **({"truncated": True} if shown != content else {}),
            },
        )
        await run.recorder.mcp_interaction(
            interaction_type="tool_call",
            server_name=server,
            tool_name=tool,
            arguments=call.arguments,
            result=content,
            is_error=result.is_error,
            duration_ms=result.duration_ms,
        )
        for_model = await tool_results.for_model(run, call, config, content)
        message = ConversationMessage(
            Role.TOOL, for_model, tool_call_id=call.id, tool_name=call.name
        )
        run.messages.append(message)
        await run.recorder.message(message)


@dataclass(frozen=True)
class SingleShotController(_ModelCalls):
    """One call, no tools. ``thinking_fallback``: when the model answers only in its
    thinking (some do for a merge), that thinking is the answer (synthesis: yes;
    scoring: no)."""

    answer_type: TimelineEventType = TimelineEventType.FINAL_ANALYSIS
    thinking_fallback: bool = False
    interaction_type: str = "single_shot"

    async def run(self, run: AgentRun) -> AgentResult:
        await self._record_messages(run)
        turn = await self._turn(
            run, (), interaction_type=self.interaction_type, answer_type=self.answer_type
        )
        if turn.error:
            return AgentResult(
                ExecutionStatus.FAILED, error=_describe(turn.error, run.choice), iterations=1
            )
        answer = turn.text.strip() or (turn.thinking.strip() if self.thinking_fallback else "")
        if not answer:
            return AgentResult(
                ExecutionStatus.FAILED, error="the model returned no answer", iterations=1
            )
        if not turn.text.strip():
            await run.recorder.add_item(self.answer_type, answer, metadata={"from_thinking": True})
        return AgentResult(ExecutionStatus.COMPLETED, final_analysis=answer, iterations=1)


async def _over_budget(run: AgentRun) -> str:
    """Which limit of the investigation's budget is reached, or "" (agents/budget.py)."""
    return await run.budget.exhausted() if run.budget is not None else ""


def _waiting(run: AgentRun) -> bool:
    return run.sub_agents is not None and run.sub_agents.running > 0


def _storable(delta: Any) -> Any:
    """A model's text as the database can hold it: a NUL or a lone surrogate in what a
    provider decoded becomes U+FFFD (a reply cannot be refused, and PostgreSQL cannot
    store NUL in text)."""
    if isinstance(delta, TextDelta | ThinkingDelta) and delta.content:
        content = storable(delta.content)
        if content is not delta.content:
            return type(delta)(content)
    return delta


async def _bounded(stream: AsyncGenerator[Any, None]) -> AsyncIterator[Any]:
    """The provider's deltas, ended by a retryable timeout error when the model is silent
    too long before its first delta or between two, or the whole call runs too long."""
    first = settings.TARSY_LLM_FIRST_CHUNK_TIMEOUT
    stall = settings.TARSY_LLM_STALL_TIMEOUT
    received = False
    try:
        async with asyncio.timeout(settings.TARSY_LLM_CALL_TIMEOUT):
            while True:
                # Not ``asyncio.wait_for``: on Python 3.11 it returns the delta and drops a
                # cancellation (the session's timeout, a cancel) that lands in the same
                # loop step, and the stream then runs on past the session's end.
                try:
                    async with asyncio.timeout(stall if received else first):
                        delta = await anext(stream)
                except StopAsyncIteration:
                    return
                received = True
                yield _storable(delta)
    except TimeoutError:
        if received:
            message = f"the model sent nothing for {stall:g} s (or the call exceeded its limit)"
        else:
            message = f"no response from the model within {first:g} s"
        yield ErrorInfo("timeout", message, retryable=True)
    finally:
        await stream.aclose()


def _describe(error: ErrorInfo, choice: ProviderChoice) -> str:
    """What went wrong, naming the provider (and where it was looked for when it could not
    be reached). Masked: providers' error messages can quote what they were sent."""
    hint = " (temporary; retrying later may succeed)" if error.retryable else ""
    where = ""
    if error.code == CONNECTION_ERROR:
        endpoint = choice.config.base_url or f"the default {choice.config.type} endpoint"
        where = f"; could not connect to {endpoint}: check the provider's base_url"
    return mask_text(
        f"LLM error [{error.code}] from provider {choice.describe()}: {error.message}{where}{hint}"
    )
