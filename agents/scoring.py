"""Scoring an ended investigation: a judge model reads it and rates it (ADR-0008, -0011).

Two turns in one conversation, on a ``scoring`` stage of its own:
1. the evaluation, outcome first, ending with ``TAGS:`` and ``SCORE:`` lines that are
   parsed here; an answer without a valid score is sent back once with a correction,
   and a second miss fails the scoring with the reason;
2. the tool report: tools that were missing, and existing ones that were hard to use.

The run writes under the score's lease (``services.scoring``): a worker that lost its
score row (timed out by recovery) writes nothing more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from agents.controller import AgentRun, NoTools, SingleShotController, _describe
from agents.executor import LEASE_LOST, Stop, run_leased
from agents.memory import ReflectionFailed, reflect, reflect_on_feedback
from agents.prompts import (
    SCORING_CORRECTION,
    SCORING_EVALUATION_REQUEST,
    SCORING_FAILURE_TAGS,
    SCORING_TOOL_REPORT_REQUEST,
)
from agents.recorder import Recorder, db
from agents.resolver import (
    NO_TOOLS_OR_SKILLS,
    AgentSettings,
    ResolutionError,
    resolve,
    stage_agent_settings,
)
from agents.runs import RunControl
from config.loader import get_config
from config.types import ChainConfig, StageAgentConfig, StageConfig, TarsyConfig
from llm.demo_script import INVESTIGATION_TO_SCORE, TOOL_REPORT_REQUEST
from llm.types import ConversationMessage, Role
from sessions.models import (
    AgentExecution,
    AlertSession,
    FeedbackReflection,
    MCPInteraction,
    ScoreStatus,
    Stage,
    StageType,
    SteeringNote,
    TimelineEvent,
    TimelineEventType,
)
from sessions.services import reflection as reflection_services
from sessions.services import scoring as score_services
from sessions.services.leases import FeedbackLease, Interruption, LeaseLost, ScoreLease
from sessions.services.scoring import ScoreResult
from sessions.services.shutdown import score_requeue

logger = logging.getLogger(__name__)

FAILURE_TAGS = tuple(term for term, _ in SCORING_FAILURE_TAGS)
# The stages a judge reads: the investigation and what summed it up, not chats or
# earlier scorings.
SCORED_STAGE_TYPES = (
    StageType.INVESTIGATION,
    StageType.ACTION,
    StageType.SYNTHESIS,
    StageType.EXEC_SUMMARY,
)
# A tool result longer than this reaches the judge cut, with a note saying so.
TOOL_RESULT_CHARS = 4000


# --- the judge's answer ----------------------------------------------------------------------


class MalformedScore(ValueError):
    """The answer has no usable score; the message says what is wrong with it."""


@dataclass(frozen=True)
class ScoreAnswer:
    score: int
    analysis: str
    tags: list[str]


# "SCORE: 72", also "**Score:** 72/100" and the like: models decorate.
_SCORE_LINE = re.compile(r"^[\s*_#>`-]*score[\s*_`]*[:=](?P<value>.*)$", re.IGNORECASE)
_TAGS_LINE = re.compile(
    r"^[\s*_#>`-]*(?:failure[ _])?tags[\s*_`]*[:=](?P<value>.*)$", re.IGNORECASE
)
_SCORE_VALUE = re.compile(r"^[\s*_`]*(?P<number>\d+)\s*(?:/\s*100)?[\s*_`.]*$")
_BARE_SCORE = re.compile(r"^\s*\d+\s*$")


def parse_score(text: str) -> ScoreAnswer:
    """The score (the last ``SCORE:`` line, else a last line that is only a number, as
    TARSy's judge ends), the failure tags (the ``TAGS:`` line, or the
    vocabulary's terms found in the text when there is none) and the analysis (the rest).
    Raises ``MalformedScore`` when there is no whole number from 0 to 100."""
    lines = text.strip().splitlines()
    score_at = next((i for i in range(len(lines) - 1, -1, -1) if _SCORE_LINE.match(lines[i])), None)
    if score_at is None and lines and _BARE_SCORE.match(lines[-1]):
        # TARSy's ending: the score alone on the very last line.
        score_at, value = len(lines) - 1, lines[-1].strip()
    elif score_at is None:
        raise MalformedScore("it has no 'SCORE: <0-100>' line")
    else:
        score_line = _SCORE_LINE.match(lines[score_at])
        assert score_line is not None  # found above
        value = score_line["value"].strip()
    number = _SCORE_VALUE.match(value)
    if number is None or int(number["number"]) > 100:
        raise MalformedScore(
            f"its SCORE line says {value[:40]!r}, not a whole number from 0 to 100"
        )
    tags_at = next((i for i in range(len(lines) - 1, -1, -1) if _TAGS_LINE.match(lines[i])), None)
    analysis = "\n".join(
        line for i, line in enumerate(lines) if i not in (score_at, tags_at)
    ).strip()
    if tags_at is not None:
        tags_line = _TAGS_LINE.match(lines[tags_at])
        assert tags_line is not None  # found above
        named = tags_line["value"].lower()
        found = set(re.findall(r"[a-z_]+", named))
    else:
        found = {term for term in FAILURE_TAGS if term in analysis.lower()}
    return ScoreAnswer(
        int(number["number"]), analysis, [term for term in FAILURE_TAGS if term in found]
    )


# --- the prompts -----------------------------------------------------------------------------


def _evaluation_request() -> str:
    tags = "\n".join(f"- {term}: {meaning}" for term, meaning in SCORING_FAILURE_TAGS)
    return SCORING_EVALUATION_REQUEST.format(failure_tags=tags)


def _tool_report_request() -> str:
    return SCORING_TOOL_REPORT_REQUEST.format(heading=TOOL_REPORT_REQUEST)


def prompt_hash(instructions: str) -> str:
    """Which version of the judge's prompts made a score: its instructions and every fixed
    text it is sent (not the investigation), so that changing any of them shows."""
    texts = [instructions, _evaluation_request(), SCORING_CORRECTION, _tool_report_request()]
    return hashlib.sha256("\n\x00\n".join(texts).encode()).hexdigest()


def scoring_messages(instructions: str, investigation: str) -> list[ConversationMessage]:
    user = f"{INVESTIGATION_TO_SCORE}\n\n{investigation}\n\n{_evaluation_request()}"
    return [ConversationMessage(Role.SYSTEM, instructions), ConversationMessage(Role.USER, user)]


def investigation_text(session: AlertSession) -> str:
    """What the judge reads: the alert, each stage's agents with what they thought, the
    tools they called with their results (masked when they were recorded), their
    answers, the final analysis and the summary, a budget's stop and an SRE's guidance
    (when there were); then the tools that were available."""
    parts = [f"### Alert\n\nType: {session.alert_type}\n\n{session.alert_data}"]
    if session.runbook:
        parts.append(f"### Runbook\n\n{session.runbook}")
    stages = list(
        Stage.objects.filter(session=session, stage_type__in=SCORED_STAGE_TYPES).order_by(
            "index", "id"
        )
    )
    executions: dict[int, list[AgentExecution]] = {}
    for execution in AgentExecution.objects.filter(stage__in=stages).order_by("id"):
        executions.setdefault(execution.stage_id, []).append(execution)
    items: dict[int | None, list[TimelineEvent]] = {}  # none without an execution here
    for item in TimelineEvent.objects.filter(execution__stage__in=stages).order_by("id"):
        items.setdefault(item.execution_id, []).append(item)
    for stage in stages:
        parts.append(
            f"### Stage {stage.index + 1}: {stage.name} ({stage.stage_type}, {stage.status})"
        )
        for execution in executions.get(stage.id, []):
            role = f", dispatched with the task: {execution.task}" if execution.task else ""
            lines = [f"#### Agent {execution.agent_name} ({execution.status}{role})"]
            lines += [_item_text(item) for item in items.get(execution.id, [])]
            if execution.error_message:
                lines.append(f"Ended with the error: {execution.error_message}")
            parts.append("\n\n".join(lines))
    if session.final_analysis:
        parts.append(f"### Final analysis of the session\n\n{session.final_analysis}")
    if session.executive_summary:
        parts.append(f"### Executive summary\n\n{session.executive_summary}")
    if session.error_message:
        parts.append(f"### The session ended {session.status}\n\n{session.error_message}")
    if session.budget_stop:
        parts.append(
            f"### Stopped by its budget\n\n{session.budget_stop}: the running agents were told "
            "to conclude without tools, and the rest of the chain was skipped."
        )
    notes = SteeringNote.objects.filter(session=session).order_by("id")
    if notes:
        # What the SRE already knew is not the agents' finding: the judge should know.
        lines = [
            f"- {note.created_at:%H:%M:%S} UTC, {note.author or 'an SRE'}: {note.text}"
            for note in notes
        ]
        parts.append("### Guidance an SRE gave the agents while they ran\n\n" + "\n".join(lines))
    parts.append("### Tools that were available\n\n" + _available_tools(session))
    return "\n\n".join(parts)


def _item_text(item: TimelineEvent) -> str:
    if item.event_type == TimelineEventType.LLM_TOOL_CALL:
        result = item.content
        if len(result) > TOOL_RESULT_CHARS:
            cut = len(result) - TOOL_RESULT_CHARS
            result = f"{result[:TOOL_RESULT_CHARS]}\n[… {cut} more characters not shown]"
        arguments = json.dumps(item.metadata.get("arguments", {}), sort_keys=True)
        outcome = "Error" if item.metadata.get("is_error") else "Result"
        return f"Tool call `{item.metadata.get('tool_name', '?')}` {arguments}\n{outcome}:\n```\n{result}\n```"
    labels: dict[str, str] = {
        TimelineEventType.LLM_THINKING: "Thinking",
        TimelineEventType.LLM_RESPONSE: "Said",
        TimelineEventType.FINAL_ANALYSIS: "Answer",
        TimelineEventType.EXECUTIVE_SUMMARY: "Summary",
        TimelineEventType.MCP_TOOL_SUMMARY: "Summary of the last tool result",
        TimelineEventType.ERROR: "Error",
        TimelineEventType.TASK_ASSIGNED: "Task from the dispatching agent",
        TimelineEventType.SKILL_LOADED: "Skill in its prompt",
    }
    return f"{labels.get(item.event_type, item.event_type)}: {item.content}"


def _available_tools(session: AlertSession) -> str:
    listed: dict[str, set[str]] = {}
    for server, tools in MCPInteraction.objects.filter(
        session=session, interaction_type="tool_list"
    ).values_list("server_name", "available_tools"):
        listed.setdefault(server, set()).update(tools or [])
    if not listed:
        return "No MCP tools were available."
    return "\n".join(
        f"- {server}.{tool}" for server in sorted(listed) for tool in sorted(listed[server])
    )


# --- the conversation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Scoring:
    """How the conversation went: an answer, or why there is none."""

    answer: ScoreAnswer | None = None
    tool_report: str = ""
    error: str = ""  # without an answer: why it failed; with one: why there is no report


@dataclass(frozen=True)
class ScoringController(SingleShotController):
    """The two turns, no tools. No thinking fallback: a score only the thinking holds is
    not an answer."""

    answer_type: TimelineEventType = TimelineEventType.LLM_RESPONSE
    interaction_type: str = "scoring"

    async def score(self, run: AgentRun) -> Scoring:
        await self._record_messages(run)
        turn = await self._turn(
            run, (), interaction_type=self.interaction_type, answer_type=self.answer_type
        )
        if turn.error:
            return Scoring(error=_describe(turn.error, run.choice))
        try:
            answer = parse_score(turn.text)
        except MalformedScore as problem:
            first = turn.text.strip()
            correction = SCORING_CORRECTION.format(problem=problem)
            await self._append(run, [ConversationMessage(Role.USER, correction)])
            turn = await self._turn(
                run, (), interaction_type=self.interaction_type, answer_type=self.answer_type
            )
            if turn.error:
                return Scoring(error=_describe(turn.error, run.choice))
            try:
                answer = parse_score(turn.text)
            except MalformedScore as again:
                return Scoring(
                    error=f"The scoring model gave no valid score, even when asked again: {again}."
                )
            if not answer.analysis:  # it only repeated the closing lines
                answer = dataclasses.replace(answer, analysis=first)
        await self._append(run, [ConversationMessage(Role.USER, _tool_report_request())])
        turn = await self._turn(
            run, (), interaction_type=self.interaction_type, answer_type=self.answer_type
        )
        if turn.error:
            return Scoring(answer, error=f"No tool report: {_describe(turn.error, run.choice)}")
        if not turn.text.strip():
            return Scoring(answer, error="No tool report: the model returned no answer.")
        return Scoring(answer, tool_report=turn.text.strip())


# --- the run ---------------------------------------------------------------------------------


def scoring_settings(session: AlertSession) -> AgentSettings:
    """The session's chain's scoring agent (``chain_scoring_settings``)."""
    config = get_config()
    chain = config.chains.get(session.chain_id)
    if chain is None:
        raise ResolutionError(
            f"chain {session.chain_id!r} is no longer configured in {config.source}"
        )
    return chain_scoring_settings(config, chain)


def chain_scoring_settings(config: TarsyConfig, chain: ChainConfig) -> AgentSettings:
    """The chain's scoring agent with the hierarchy applied (defaults → agent → chain →
    defaults.scoring → the chain's ``scoring`` block); no tools."""
    scoring = chain.scoring
    step = StageAgentConfig(
        name=scoring.agent,
        llm_provider=scoring.llm_provider,
        llm_backend=scoring.llm_backend,
        max_iterations=scoring.max_iterations,
    )
    stage = StageConfig(name="Scoring", agents=(step,))
    return dataclasses.replace(
        stage_agent_settings(config, chain, stage, step), **NO_TOOLS_OR_SKILLS
    )


async def execute_scoring(
    lease: ScoreLease, *, should_stop: Callable[[], Interruption | None] | None = None
) -> str:
    """Score one claimed session; returns the score's status. Held like a session's run
    (``run_leased``): its lease renewed while the model thinks, the run stopped (writing
    nothing) once the lease is lost, and ended failed when the worker's cluster goes."""
    try:
        return await run_leased(
            lease,
            _score,
            name=f"score-{lease.score_id}",
            should_stop=should_stop,
            end=score_services.score_end,
            requeue=score_requeue,
        )
    except LeaseLost:
        logger.warning("score %s: lease lost; this worker stops here", lease.score_id)
        return LEASE_LOST


async def _score(lease: ScoreLease, stop: Stop, control: RunControl) -> str:
    session = await db(AlertSession.objects.get)(id=lease.session_id)
    try:
        agent = await db(lambda: resolve(get_config(), scoring_settings(session)))()
    except ResolutionError as problem:
        await db(score_services.score_fail)(lease=lease, execution=None, error_message=str(problem))
        return ScoreStatus.FAILED
    instructions = agent.settings.custom_instructions
    version = prompt_hash(instructions)
    execution = await db(score_services.score_stage_start)(
        lease=lease,
        agent_name=agent.name,
        llm_provider=agent.choice.config.name,
        llm_backend=agent.choice.backend,
        model_name=agent.choice.config.model,
    )
    recorder = Recorder(session, execution, lease)
    try:
        investigation = await db(investigation_text)(session)
        outcome = await ScoringController().score(
            AgentRun(
                settings=agent.settings,
                choice=agent.choice,
                fallbacks=list(agent.fallbacks),
                tools=NoTools(),
                recorder=recorder,
                messages=scoring_messages(instructions, investigation),
                cost=get_config().cost_estimation,
            )
        )
    except LeaseLost:
        raise
    except Exception as exc:
        logger.exception("score %s crashed", lease.score_id)
        outcome = Scoring(error=f"Internal error: {type(exc).__name__}: {exc}")
    config = get_config()
    if outcome.answer is not None and config.defaults.memory.enabled:
        # What the session teaches, on the scoring execution (before it closes).
        await db(score_services.score_memorizing)(lease=lease)
        try:
            await reflect(
                config=config,
                session=session,
                lease=lease,
                agent=agent,
                recorder=recorder,
                investigation=investigation,
                score=f"Score: {outcome.answer.score}/100\n\n{outcome.answer.analysis}",
            )
        except LeaseLost:
            raise
        except Exception:  # a reflection never fails the score
            logger.exception("score %s: the reflection failed", lease.score_id)
    if outcome.answer is None:
        await db(score_services.score_fail)(
            lease=lease,
            execution=recorder.execution,
            error_message=outcome.error,
            prompt_hash=version,
        )
        return ScoreStatus.FAILED
    await db(score_services.score_complete)(
        lease=lease,
        execution=recorder.execution,
        result=ScoreResult(
            total_score=outcome.answer.score,
            score_analysis=outcome.answer.analysis,
            failure_tags=outcome.answer.tags,
            tool_improvement_report=outcome.tool_report,
            prompt_hash=version,
            error_message=outcome.error,
        ),
    )
    return ScoreStatus.COMPLETED


# --- the feedback Reflector ----------------------------------------------------------------

FEEDBACK_TIMEOUT = 180.0  # seconds for the whole run (TARSy's three minutes)


async def execute_feedback_reflection(
    lease: FeedbackLease, *, should_stop: Callable[[], Interruption | None] | None = None
) -> str:
    """Draw lessons from one reviewer's feedback (sessions/services/reflection.py), with
    the scoring agent's model, held like a scoring (``run_leased``)."""
    try:
        return await run_leased(
            lease,
            _reflect_on_feedback,
            name=f"feedback-{lease.reflection_id}",
            should_stop=should_stop,
            end=reflection_services.feedback_reflection_end,
            requeue=reflection_services.feedback_reflection_requeue,
        )
    except LeaseLost:
        logger.warning("feedback reflection %s: lease lost", lease.reflection_id)
        return LEASE_LOST


async def _reflect_on_feedback(lease: FeedbackLease, stop: Stop, control: RunControl) -> str:
    reflection = await db(FeedbackReflection.objects.select_related("session").get)(
        id=lease.reflection_id
    )
    session = reflection.session
    end = reflection_services.feedback_reflection_end
    try:
        agent = await db(lambda: resolve(get_config(), scoring_settings(session)))()
    except ResolutionError as problem:
        await db(end)(lease=lease, status=ScoreStatus.FAILED, error_message=str(problem))
        return ScoreStatus.FAILED
    execution = await db(reflection_services.feedback_reflection_start)(
        lease=lease,
        llm_provider=agent.choice.config.name,
        llm_backend=agent.choice.backend,
        model_name=agent.choice.config.model,
    )
    if execution is None:
        logger.info("session %s: never scored; its feedback is not reflected on", session.id)
        return ScoreStatus.COMPLETED
    try:
        learned = await asyncio.wait_for(
            reflect_on_feedback(
                config=get_config(),
                session=session,
                lease=lease,
                agent=agent,
                recorder=Recorder(session, execution, lease),
                investigation=await db(investigation_text)(session),
                feedback=reflection.feedback,
                rating=reflection.quality_rating,
            ),
            FEEDBACK_TIMEOUT,
        )
    except LeaseLost:
        raise
    except TimeoutError:
        message = f"The feedback Reflector did not finish within {FEEDBACK_TIMEOUT:g} s."
        await db(end)(lease=lease, status=ScoreStatus.TIMED_OUT, error_message=message)
        return ScoreStatus.TIMED_OUT
    except Exception as exc:
        if not isinstance(exc, ReflectionFailed):
            logger.exception("feedback reflection %s crashed", lease.reflection_id)
        await db(end)(
            lease=lease, status=ScoreStatus.FAILED, error_message=f"{type(exc).__name__}: {exc}"
        )
        return ScoreStatus.FAILED
    logger.info(
        "session %s: feedback taught %d new lesson(s), reinforced %d, deprecated %d",
        session.id,
        len(learned.create),
        len(learned.reinforce),
        len(learned.deprecate),
    )
    await db(end)(lease=lease, status=ScoreStatus.COMPLETED)
    return ScoreStatus.COMPLETED
