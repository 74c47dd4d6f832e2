"""Skills: reusable knowledge an operator drops into the config directory (TARSy's
``skills/``, ADR-0012).

``skills/<name>/SKILL.md`` or a flat file ``skills/<name>`` (how a Kubernetes ConfigMap
mounts): YAML frontmatter between ``---`` lines with ``name`` and ``description``, then
the markdown body. Dotfiles (a ConfigMap's ``..data``) and directories without a
SKILL.md are skipped; no ``skills/`` is no skills. Every other mistake stops start-up
naming the file. Loaded once, at start; a credential in one is masked.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from config.types import Skill
from masking import mask_text
from masking.bounded import UnsafeInput, load_yaml

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
# A skill is a page or two of markdown; a file far larger is not one.
SKILL_CHARS = 1024 * 1024


class SkillError(ValueError):
    pass


def load_skills(config_dir: Path) -> dict[str, Skill]:
    """The skills under ``config_dir/skills``, by name, in file-name order."""
    root = config_dir / SKILLS_DIR
    if not root.is_dir():
        return {}
    skills: dict[str, Skill] = {}
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue  # a ConfigMap's ..data and ..2024_… links
        path = entry / SKILL_FILE if entry.is_dir() else entry
        if not path.is_file():
            continue  # a directory without a SKILL.md
        skill = parse_skill(path)
        if skill.name in skills:
            raise SkillError(f"{path}: duplicate skill name {skill.name!r}")
        skills[skill.name] = skill
    return skills


def parse_skill(path: Path) -> Skill:
    if path.stat().st_size > 4 * SKILL_CHARS:  # before reading it: UTF-8 is 4 bytes at most
        raise SkillError(f"{path}: over {SKILL_CHARS} characters; a skill is not this large")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise SkillError(f"{path}: not UTF-8 text") from None
    if len(text) > SKILL_CHARS:
        raise SkillError(f"{path}: over {SKILL_CHARS} characters; a skill is not this large")
    front, body = _split(text.replace("\r\n", "\n").replace("\r", "\n"), path)
    try:
        meta = load_yaml(front, what=str(path), max_chars=SKILL_CHARS)
    except (yaml.YAMLError, ValueError, UnsafeInput) as exc:
        raise SkillError(f"{path}: invalid frontmatter YAML: {exc}") from None
    if meta is not None and not isinstance(meta, dict):
        raise SkillError(f"{path}: the frontmatter must be a mapping with name and description")
    meta = meta or {}
    fields = {}
    for key in ("name", "description"):
        value = meta.get(key)
        if not isinstance(value, str) or not value.strip():
            raise SkillError(f"{path}: missing required field {key!r} in frontmatter")
        fields[key] = value.strip()
    # A skill's text goes into prompts, the trace and the config view: a credential
    # pasted into one is masked like any tool result's.
    return Skill(
        name=fields["name"], description=mask_text(fields["description"]), body=mask_text(body)
    )


def _split(text: str, path: Path) -> tuple[str, str]:
    """Frontmatter and body; the body is kept as written (TARSy does not trim it)."""
    text = text.lstrip()
    if not text.startswith("---"):
        raise SkillError(f"{path}: missing frontmatter delimiters (expected '---' at start)")
    rest = text[3:].removeprefix("\n")
    end = rest.find("\n---\n")
    if end >= 0:
        return rest[:end], rest[end + 5 :]
    if rest.endswith("\n---"):
        return rest[:-4], ""
    raise SkillError(f"{path}: missing closing frontmatter delimiter '---'")
