"""What memory and skills each model call of a session carried (issue 21), for the trace.

Read from the requests as recorded, not from what the run meant to send:

- *Injected* lessons: the ``<memory_data>`` block under the system prompt's lessons
  heading (agents/memory.py ``memory_section``; chat's, agents/chat.py, in its context
  message), matched to the session's ``InjectedMemory`` rows by their text.
- *Recalled* lessons: ``recall_past_investigations`` results in the request, matched to
  lessons by their text; *past sessions*: ``search_past_sessions`` results.
- *Pre-loaded* skills: the ``### <name>`` headings of the system prompt's pre-loaded
  skills section (agents/skills.py ``skill_sections``), among the skills the agent's
  timeline says it was given (``skill_loaded``): a skill's own text may hold such a
  heading.
- *Loaded* skills: the ``## Skill: <name>`` headings of ``load_skill`` results, among the
  names the agent asked for.

A lesson's text is data written from alerts and may imitate any marker: it is matched
whole (a line of it that looks like another lesson stays part of it), it cannot close its
block (``memory_section`` escapes ``</memory_data>``), and nothing inside a lessons block
is read as a skill.

A mark is *new* in the first request of its agent (execution) that carries it, *carried*
in the later ones. Reads the stored requests of the whole session (each call stores only
what it adds to the one it continues), in a fixed number of queries.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sessions.models import (
    AlertSession,
    InjectedMemory,
    InvestigationMemory,
    TimelineEvent,
    TimelineEventType,
)

# The markers the prompt builders write; agents/skills.py and agents/memory.py build their
# text with these, and tests/sessions/test_trace_marks.py reads the builders' real output.
LESSONS_HEADING = "## Lessons from Past Investigations"
# agents/chat.py ``chat_context``: the lessons the investigation was given, for a chat.
CHAT_LESSONS_HEADING = "## Lessons from past investigations the investigation was given"
MEMORY_DATA_OPEN = "<memory_data>\n"
MEMORY_DATA_CLOSE = "\n</memory_data>"
PRELOADED_SKILLS_HEADING = "## Pre-loaded Skills"
AVAILABLE_SKILLS_HEADING = "## Available Skills"
SUB_AGENTS_HEADING = "## Sub-agents"  # agents/prompts.py ``orchestration_section``
LOADED_SKILL_HEADING = "## Skill: "  # each skill of a ``load_skill`` result
PAST_SESSION_HEADING = "### Session "  # each session of a ``search_past_sessions`` result
# Built-in tools (agents/skills.py ``LOAD_SKILL``, agents/memory.py ``MEMORY_TOOLS``).
LOAD_SKILL_TOOL = "load_skill"
RECALL_TOOL = "recall_past_investigations"
SEARCH_TOOL = "search_past_sessions"

# Where a lesson's line starts: "- [category, valence" then, in prompts and recall
# results, ", score: …, learned …"; the lesson's text follows "] ".
_LESSON_LINE = re.compile(r"^- \[[a-z]+, [a-z]+(?:, [^\]\n]*)?\] ", re.M)
_PRELOADED_SKILL = re.compile(r"(?<=\n\n)### ([^\n]+)\n")
_LOADED_SKILL = re.compile(r"(?:\A|(?<=\n\n))" + re.escape(LOADED_SKILL_HEADING) + r"([^\n]+)\n")
_PAST_SESSION = re.compile(
    r"(?:\A|(?<=\n\n))" + re.escape(PAST_SESSION_HEADING) + r"([0-9a-f]{8}-[0-9a-f-]{27}) \("
)
# How many lines that look like lessons one lesson's text may hold and still be matched.
MAX_LINES_PER_LESSON = 20
LABEL_CHARS = 80
_IN_BATCH = 500  # values per ``IN (…)``, under SQLite's bound on a query's parameters


@dataclass(frozen=True)
class Mark:
    key: str  # a lesson's id, a skill's name, a past session's id
    label: str  # what the page shows: a lesson's first words, a skill's name
    new: bool  # the first request of its agent that carries it


@dataclass(frozen=True)
class InteractionMarks:
    injected: tuple[Mark, ...] = ()
    # Lesson lines in the prompt that match none of the session's injected lessons (a
    # lesson edited or deleted since).
    injected_unmatched: int = 0
    recalled: tuple[Mark, ...] = ()
    recalled_unmatched: int = 0
    past_sessions: tuple[Mark, ...] = ()
    preloaded: tuple[Mark, ...] = ()
    loaded: tuple[Mark, ...] = ()

    @property
    def lessons(self) -> bool:
        return bool(
            self.injected or self.injected_unmatched or self.recalled or self.recalled_unmatched
        )

    @property
    def skills(self) -> bool:
        return bool(self.preloaded or self.loaded)

    def __bool__(self) -> bool:
        return self.lessons or self.skills or bool(self.past_sessions)


@dataclass(frozen=True)
class _Block:
    """A ``<memory_data>`` block's text and where each lesson line's text starts and
    where the line (with any lines after it that are not lessons) ends."""

    text: str
    items: tuple[tuple[int, int], ...]

    def spans(self) -> Iterable[str]:
        for i, (start, _) in enumerate(self.items):
            for j in range(i, min(len(self.items), i + MAX_LINES_PER_LESSON)):
                yield self.text[start : self.items[j][1]]

    def match(self, known: Mapping[str, str]) -> tuple[list[str], int]:
        """The ids of the lessons it holds (``known``: a lesson's text as written in a
        block → its id), the longest match first; and how many lines match none."""
        ids, unmatched, i = [], 0, 0
        while i < len(self.items):
            start = self.items[i][0]
            last = min(len(self.items), i + MAX_LINES_PER_LESSON) - 1
            for j in range(last, i - 1, -1):
                found = known.get(self.text[start : self.items[j][1]])
                if found is not None:
                    ids.append(found)
                    i = j + 1
                    break
            else:
                unmatched += 1
                i += 1
        return ids, unmatched


@dataclass(frozen=True)
class _Facts:
    """What one message of a request holds, before it is matched to lessons and skills."""

    injected: tuple[_Block, ...] = ()
    recalled: tuple[_Block, ...] = ()
    preloaded: tuple[str, ...] = ()
    loaded: tuple[str, ...] = ()
    past_sessions: tuple[str, ...] = ()


def as_written(content: str) -> str:
    """A lesson's text as a ``<memory_data>`` block holds it (agents/memory.py)."""
    return content.replace("</memory_data>", "</ memory_data>")


def session_trace_marks(session: AlertSession) -> dict[int, InteractionMarks]:
    """Each LLM interaction's marks, by its id; interactions that carried nothing are left
    out."""
    conversations: dict[int, list[_Facts | None]] = {}
    order: list[tuple[int, int]] = []
    asked: dict[int, set[str]] = defaultdict(set)  # skills each execution asked to load
    rows = (
        session.llm_interactions.order_by("id")
        .values_list(
            "id", "execution_id", "extends_id", "shared_messages", "request_messages", "tool_calls"
        )
        .iterator(chunk_size=50)
    )
    for interaction_id, execution_id, extends_id, shared, messages, tool_calls in rows:
        own: list[_Facts | None] = []
        for message in messages if isinstance(messages, list) else []:
            own.append(_facts(message) if isinstance(message, dict) else None)
            if isinstance(message, dict) and message.get("role") == "assistant":
                asked[execution_id] |= _skills_asked(message.get("tool_calls"))
        asked[execution_id] |= _skills_asked(tool_calls)
        if extends_id is not None and extends_id in conversations:
            # As sessions.selectors.trace.request_messages rebuilds it; the answer between
            # (None) is the model's own and carries no marks.
            own = [*conversations[extends_id], None][: shared or 0] + own
        conversations[interaction_id] = own
        order.append((interaction_id, execution_id))

    facts = {id(f): f for conversation in conversations.values() for f in conversation if f}
    resolved = _Resolver(session, list(facts.values()), asked)
    marks: dict[int, InteractionMarks] = {}
    seen: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for interaction_id, execution_id in order:
        found = resolved.interaction(conversations[interaction_id], execution_id)
        if found is None:
            continue
        marks[interaction_id] = found.marks(seen[execution_id])
        seen[execution_id] |= found.keys()
    return marks


def _facts(message: dict[str, Any]) -> _Facts | None:
    content = message.get("content")
    if not isinstance(content, str) or not content:
        return None
    role, tool = message.get("role"), message.get("tool_name")
    facts = _Facts()
    if role == "system":
        facts = _Facts(injected=_blocks(content, LESSONS_HEADING), preloaded=_preloaded(content))
    elif role == "user":
        facts = _Facts(injected=_blocks(content, CHAT_LESSONS_HEADING))
    elif role == "tool" and tool == RECALL_TOOL:
        block = _block(content, 0) if content.startswith(MEMORY_DATA_OPEN) else None
        facts = _Facts(recalled=(block,) if block else ())
    elif role == "tool" and tool == SEARCH_TOOL:
        facts = _Facts(past_sessions=tuple(_PAST_SESSION.findall(content)))
    elif role == "tool" and tool == LOAD_SKILL_TOOL:
        facts = _Facts(loaded=tuple(_LOADED_SKILL.findall(content)))
    return facts if facts != _Facts() else None


def _blocks(content: str, heading: str) -> tuple[_Block, ...]:
    """The lessons blocks under each ``heading`` (an alert quoting one is matched against
    the session's own lessons only, so it can add none)."""
    blocks = []
    start = content.find(heading)
    while start >= 0:
        opening = content.find(MEMORY_DATA_OPEN, start + len(heading))
        block = _block(content, opening) if opening >= 0 else None
        if block is None:
            break
        blocks.append(block)
        start = content.find(heading, opening + len(MEMORY_DATA_OPEN) + len(block.text))
    return tuple(blocks)


def _block(content: str, opening: int) -> _Block | None:
    start = opening + len(MEMORY_DATA_OPEN)
    end = content.find(MEMORY_DATA_CLOSE, start - 1)
    if end < 0:
        return None
    text = content[start:end] if end >= start else ""
    lines = list(_LESSON_LINE.finditer(text))
    items = tuple(
        (line.end(), lines[k + 1].start() - 1 if k + 1 < len(lines) else len(text))
        for k, line in enumerate(lines)
    )
    return _Block(text, items)


def _preloaded(content: str) -> tuple[str, ...]:
    """The ``### <name>`` headings of the pre-loaded skills section, up to the next
    section the prompt builder writes after it."""
    start = content.find(PRELOADED_SKILLS_HEADING)
    if start < 0:
        return ()
    ends = [
        content.find(f"\n\n{heading}", start)
        for heading in (AVAILABLE_SKILLS_HEADING, SUB_AGENTS_HEADING, LESSONS_HEADING)
    ]
    end = min((e for e in ends if e >= 0), default=len(content))
    return tuple(_PRELOADED_SKILL.findall(content[start:end] + "\n"))


def _skills_asked(tool_calls: Any) -> set[str]:
    names: set[str] = set()
    for call in tool_calls if isinstance(tool_calls, list) else []:
        if not isinstance(call, dict) or call.get("name") != LOAD_SKILL_TOOL:
            continue
        arguments = call.get("arguments")
        asked = arguments.get("names") if isinstance(arguments, dict) else None
        names |= {n for n in asked if isinstance(n, str)} if isinstance(asked, list) else set()
    return names


@dataclass(frozen=True)
class _Found:
    """One interaction's marks before new and carried are told apart."""

    injected: dict[str, str]
    injected_unmatched: int
    recalled: dict[str, str]
    recalled_unmatched: int
    past_sessions: dict[str, str]
    preloaded: dict[str, str]
    loaded: dict[str, str]

    KINDS = ("injected", "recalled", "past_sessions", "preloaded", "loaded")

    def keys(self) -> set[tuple[str, str]]:
        return {(kind, key) for kind in self.KINDS for key in getattr(self, kind)}

    def marks(self, seen: set[tuple[str, str]]) -> InteractionMarks:
        def of(kind: str) -> tuple[Mark, ...]:
            found: dict[str, str] = getattr(self, kind)
            return tuple(Mark(k, label, (kind, k) not in seen) for k, label in found.items())

        return InteractionMarks(
            injected=of("injected"),
            injected_unmatched=self.injected_unmatched,
            recalled=of("recalled"),
            recalled_unmatched=self.recalled_unmatched,
            past_sessions=of("past_sessions"),
            preloaded=of("preloaded"),
            loaded=of("loaded"),
        )


class _Resolver:
    """Matches what the messages hold to the session's lessons, skills and sessions: a
    query for each kind, whatever the number of interactions."""

    def __init__(
        self, session: AlertSession, facts: list[_Facts], asked: Mapping[int, set[str]]
    ) -> None:
        self.asked = asked
        self.injected: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        for memory_id, content in InjectedMemory.objects.filter(session=session).values_list(
            "memory_id", "memory__content"
        ):
            self.injected[as_written(content)] = str(memory_id)
            self.labels[str(memory_id)] = _label(content)
        self.recallable: dict[str, str] = {}
        spans = {span for f in facts for block in f.recalled for span in block.spans()}
        candidates = sorted(spans | {s.replace("</ memory_data>", "</memory_data>") for s in spans})
        for batch in range(0, len(candidates), _IN_BATCH):
            for memory_id, content in InvestigationMemory.objects.filter(
                content__in=candidates[batch : batch + _IN_BATCH]
            ).values_list("id", "content"):
                self.recallable[as_written(content)] = str(memory_id)
                self.labels[str(memory_id)] = _label(content)
        self.preloaded: dict[int | None, set[str]] = defaultdict(set)
        for execution_id, metadata in TimelineEvent.objects.filter(
            session=session, event_type=TimelineEventType.SKILL_LOADED
        ).values_list("execution_id", "metadata"):
            name = metadata.get("skill_name") if isinstance(metadata, dict) else None
            if isinstance(name, str):
                self.preloaded[execution_id].add(name)
        ids = {i for f in facts for i in f.past_sessions}
        self.sessions = {
            str(i): alert_type
            for i, alert_type in AlertSession.objects.filter(id__in=sorted(ids))
            .exclude(id=session.id)
            .values_list("id", "alert_type")
        }
        self._cache: dict[int, tuple[Any, ...]] = {}

    def interaction(self, conversation: list[_Facts | None], execution_id: int) -> _Found | None:
        injected: dict[str, str] = {}
        recalled: dict[str, str] = {}
        past: dict[str, str] = {}
        preloaded: dict[str, str] = {}
        loaded: dict[str, str] = {}
        injected_unmatched = recalled_unmatched = 0
        for facts in conversation:
            if facts is None:
                continue
            inj, inj_un, rec, rec_un = self._lessons(facts)
            injected.update(dict.fromkeys(inj, ""))
            recalled.update(dict.fromkeys(rec, ""))
            injected_unmatched += inj_un
            recalled_unmatched += rec_un
            past.update({i: self.sessions[i] for i in facts.past_sessions if i in self.sessions})
            given = self.preloaded.get(execution_id, set())
            preloaded.update({n: n for n in facts.preloaded if n in given})
            asked = self.asked.get(execution_id, set())
            loaded.update({n: n for n in facts.loaded if n in asked})
        found = _Found(
            injected={i: self.labels.get(i, "") for i in injected},
            injected_unmatched=injected_unmatched,
            recalled={i: self.labels.get(i, "") for i in recalled},
            recalled_unmatched=recalled_unmatched,
            past_sessions=past,
            preloaded=preloaded,
            loaded=loaded,
        )
        return found if found.keys() or injected_unmatched or recalled_unmatched else None

    def _lessons(self, facts: _Facts) -> tuple[Any, ...]:
        cached = self._cache.get(id(facts))
        if cached is None:
            injected: list[str] = []
            recalled: list[str] = []
            injected_unmatched = recalled_unmatched = 0
            for block in facts.injected:
                ids, unmatched = block.match(self.injected)
                injected += ids
                injected_unmatched += unmatched
            for block in facts.recalled:
                ids, unmatched = block.match(self.recallable)
                recalled += ids
                recalled_unmatched += unmatched
            cached = (injected, injected_unmatched, recalled, recalled_unmatched)
            self._cache[id(facts)] = cached
        return cached


def _label(content: str) -> str:
    text = " ".join(content.split())
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
