"""Load and validate tarsy.yaml.

The file is read with the size and depth bounds of ``masking.bounded``, validated by the
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

from config.fields import PROBLEM
from config.references import validate_references
from config.schema import TarsyFile
from config.types import TarsyConfig
from masking.bounded import UnsafeInput, load_yaml

__all__ = ["ConfigError", "get_config", "load_config", "validate_references"]


class ConfigError(ValueError):
    pass


# A tarsy.yaml is a few KiB; a file far larger (or deeper) is not one.
CONFIG_CHARS = 4 * 1024 * 1024


def load_config(path: str | Path) -> TarsyConfig:
    path = Path(path)
    try:
        raw = load_yaml(path.read_text(), what=str(path), max_chars=CONFIG_CHARS)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found (set TARSY_CONFIG to a tarsy.yaml)") from None
    except UnsafeInput as exc:
        raise ConfigError(f"{exc}: is this the right file?") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(raw, path.name)


def parse_config(raw: object, source: str) -> TarsyConfig:
    """A loaded YAML document (None: an empty file) as configuration from ``source``."""
    try:
        file = TarsyFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(error_message(source, exc)) from None
    return file.to_config(source)


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


def key_path(loc: tuple[str | int, ...]) -> str:
    """``("agents", "X", "mcp_servers", 0)`` → ``agents.X.mcp_servers[0]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part != "[key]":  # pydantic's mark of a mapping's key; the path names it
            path += f".{part}" if path else part
    return path


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
