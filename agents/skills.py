"""Skills at run time (TARSy's ADR-0012): which an agent gets, what its prompt says of
them, and the ``load_skill`` tool that hands it one on demand.

An agent's *required* skills are in its system prompt from the start (and each is a
``skill_loaded`` item on its timeline); its *on-demand* skills are listed by name and
description, and ``load_skill`` returns their text. ``skills`` absent on the agent means
every skill on demand, ``[]`` none; required ones are never also on demand. Synthesis,
executive summary and scoring agents get none (their settings say so).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.controller import ToolExecutor
from agents.resolver import AgentSettings
from config.types import Skill, TarsyConfig
from llm.types import ToolDefinition
from sessions.selectors import trace_marks

# A built-in tool of no server: TARSy's name, plain at the wire too.
LOAD_SKILL = trace_marks.LOAD_SKILL_TOOL  # "load_skill"

LOAD_SKILL_TOOL = ToolDefinition(
    LOAD_SKILL,
    "Load skills by name. Returns the full skill content for each requested skill.",
    {
        "type": "object",
        "properties": {
            "names": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Skill names to load",
            }
        },
        "required": ["names"],
    },
)


@dataclass(frozen=True)
class AgentSkills:
    required: tuple[Skill, ...] = ()
    on_demand: tuple[Skill, ...] = ()


def agent_skills(config: TarsyConfig, settings: AgentSettings) -> AgentSkills:
    """An agent's skills from its settings' (merged) ``skills`` and ``required_skills``;
    a name the directory lacks (the check refuses it) is left out."""
    registry = config.skills
    if not registry:
        return AgentSkills()
    required = tuple(
        registry[name] for name in dict.fromkeys(settings.required_skills) if name in registry
    )
    names = list(registry) if settings.skills is None else list(dict.fromkeys(settings.skills))
    taken = {skill.name for skill in required}
    on_demand = tuple(registry[n] for n in names if n in registry and n not in taken)
    return AgentSkills(required, on_demand)


def skill_sections(skills: AgentSkills) -> list[str]:
    """The system prompt's sections: the required skills' text, then the catalog."""
    sections = []
    if skills.required:
        text = "\n".join(f"\n### {skill.name}\n\n{skill.body}" for skill in skills.required)
        sections.append(
            f"{trace_marks.PRELOADED_SKILLS_HEADING}\n\n"
            "Skills provide domain-specific knowledge for your task.\n"
            "The following have been loaded automatically — use them as reference.\n"
            f"{text}".rstrip("\n")
        )
    if skills.on_demand:
        catalog = "".join(f"- **{s.name}**: {s.description}\n" for s in skills.on_demand)
        sections.append(
            f"{trace_marks.AVAILABLE_SKILLS_HEADING}\n\n"
            "Skills provide domain-specific knowledge that may help with your task.\n"
            "The following additional skills can be loaded on demand using the `load_skill` "
            "tool.\n"
            "Scan the descriptions and decide:\n"
            "- If one or more match your task: load them before proceeding.\n"
            "- If none match: skip and proceed without them.\n\n"
            f"<available_skills>\n{catalog}</available_skills>"
        )
    return sections


@dataclass(frozen=True)
class SkillResult:
    content: str
    is_error: bool = False
    duration_ms: int = 0


class WithSkills:
    """An agent's tools plus ``load_skill``, which serves its on-demand skills only."""

    def __init__(self, inner: ToolExecutor, on_demand: Sequence[Skill]) -> None:
        self.inner = inner
        self.skills = {skill.name: skill for skill in on_demand}

    async def list_tools(self) -> list[ToolDefinition]:
        tools = await self.inner.list_tools()
        return [LOAD_SKILL_TOOL, *(t for t in tools if t.name != LOAD_SKILL)]

    async def call_tool(self, name: str, arguments: dict[str, Any]):
        if name != LOAD_SKILL:
            return await self.inner.call_tool(name, arguments)
        started = time.monotonic()
        result = self.load(arguments)
        return SkillResult(
            result.content, result.is_error, round((time.monotonic() - started) * 1000)
        )

    def load(self, arguments: Any) -> SkillResult:
        names = arguments.get("names") if isinstance(arguments, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            got = json.dumps(arguments)[:200]
            return SkillResult(
                f"invalid arguments: 'names' must be a list of names, got {got}", True
            )
        if not names:
            return SkillResult("'names' must contain at least one skill name", True)
        loaded = [self.skills[n] for n in names if n in self.skills]
        invalid = [n for n in names if n not in self.skills]
        available = ", ".join(sorted(self.skills))
        if not loaded:
            return SkillResult(
                f"no valid skills found for: {', '.join(invalid)}\n\nAvailable skills: {available}",
                True,
            )
        content = "\n\n".join(
            f"{trace_marks.LOADED_SKILL_HEADING}{skill.name}\n\n{skill.body}" for skill in loaded
        )
        if invalid:
            content += (
                f"\n\n---\nNote: the following skill names were not found: "
                f"{', '.join(invalid)}\n\nAvailable skills: {available}"
            )
        return SkillResult(content)
