"""Load and validate tarsy.yaml (and, in a TARSy config directory, llm-providers.yaml).

``TARSY_CONFIG`` names a tarsy.yaml, or a directory in TARSy's layout: ``tarsy.yaml``,
optionally ``llm-providers.yaml`` and ``skills/`` (config/skills.py). Each file is read with the size and depth bounds of ``masking.bounded``, validated by the
schema (config/schema.py), and handed to the rest of TARSy as frozen dataclasses
(config/types.py). Every mistake stops start-up with a message naming the file, the key
and what is allowed, e.g. ``tarsy.yaml: agents.KubernetesAgent.mcp_servers[0]: unknown MCP
server 'k8s'; defined: kubernetes`` (one line per mistake).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from django.conf import settings
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from config.fields import PROBLEM, key_path
from config.schema import ProvidersFile, TarsyFile
from config.skills import SkillError, load_skills
from config.types import FileProvider, Skill, TarsyConfig
from masking.bounded import UnsafeInput, load_yaml

__all__ = ["ConfigError", "get_config", "load_config"]


class ConfigError(ValueError):
    pass


# A tarsy.yaml is a few KiB; a file far larger (or deeper) is not one.
CONFIG_CHARS = 4 * 1024 * 1024


TARSY_FILE = "tarsy.yaml"
PROVIDERS_FILE = "llm-providers.yaml"


def load_config(path: str | Path) -> TarsyConfig:
    """``path``: a tarsy.yaml, or a TARSy config directory holding one."""
    path = Path(path)
    providers: dict[str, FileProvider] = {}
    if path.is_dir():
        providers_path = path / PROVIDERS_FILE
        if providers_path.exists():
            providers = load_providers(providers_path)
        source = str(path / TARSY_FILE)
    else:
        source = path.name
    try:
        # The config directory's skills/: beside a tarsy.yaml named alone, too.
        skills = load_skills(path if path.is_dir() else path.parent)
    except SkillError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(read_tarsy_file(path), source, providers, skills)


def read_tarsy_file(path: Path) -> object:
    """The YAML document of a tarsy.yaml, or of the one in a TARSy config directory."""
    if path.is_dir():
        path = path / TARSY_FILE
    return _read(path, f"set TARSY_CONFIG to a {TARSY_FILE} or a directory holding one")


def _read(path: Path, hint: str) -> object:
    try:
        return load_yaml(path.read_text(), what=str(path), max_chars=CONFIG_CHARS)
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"{path}: file not found ({hint})") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory ({hint})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text: is this the right file?") from None
    except UnsafeInput as exc:
        raise ConfigError(f"{exc}: is this the right file?") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def load_providers(path: Path) -> dict[str, FileProvider]:
    """``llm-providers.yaml``: its providers by name."""
    raw = _read(path, "TARSy's llm-providers.yaml, next to tarsy.yaml")
    try:
        file = ProvidersFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(error_message(str(path), exc)) from None
    return {
        name: provider.build_named(name, path.name) for name, provider in file.llm_providers.items()
    }


def parse_config(
    raw: object,
    source: str,
    providers: dict[str, FileProvider] | None = None,
    skills: dict[str, Skill] | None = None,
) -> TarsyConfig:
    """A loaded YAML document (None: an empty file) as configuration from ``source``,
    with the skills of its directory (None: none looked for, none checked)."""
    context = {"skills": set(skills)} if skills is not None else None
    try:
        file = TarsyFile.model_validate(raw, context=context)
    except ValidationError as exc:
        raise ConfigError(error_message(source, exc)) from None
    return file.to_config(source, providers, skills)


@cache
def get_config() -> TarsyConfig:
    return load_config(settings.TARSY_CONFIG)


def error_message(source: str, error: ValidationError) -> str:
    """``<file>: <key path>: <what is wrong>``, one line per mistake."""
    lines = []
    for detail in error.errors(include_url=False):
        key = key_path(detail["loc"])
        lines.append(f"{source}: {key + ': ' if key else ''}{_what(detail)}")
    return "\n".join(dict.fromkeys(lines))


def _what(detail: ErrorDetails) -> str:
    """TARSy's own rules say it in their words; pydantic's few checks of its own (a
    missing key, a mapping or list that is something else) in the same words."""
    kind, value = detail["type"], detail["input"]
    if kind == PROBLEM:
        return str(detail.get("ctx", {}).get("message", detail["msg"]))
    if kind == "missing":
        return "is required"
    if kind in ("dict_type", "model_type"):
        return f"expected a mapping, got {type(value).__name__}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {type(value).__name__}"
    return detail["msg"]
