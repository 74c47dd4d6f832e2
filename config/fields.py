"""The building blocks of tarsy.yaml's schema (config/schema.py): the base of every
mapping, the value types, and how a rule reports a problem at a key.

Every value type says what is wrong in the words users know
(``expected a whole number of at least 1, got 0``); config/loader.py puts the file and
the key path in front. Values are as strict as YAML allows: ``"5"`` is not a number and
``yes`` (a boolean) is not a string.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, NoReturn, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from config.types import SESSION_ID_PLACEHOLDER

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")

# A key path inside tarsy.yaml: ("agents", "KubernetesAgent", "mcp_servers", 0).
Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]
# The error type of every problem a rule of TARSy's reports; its ctx holds the message.
PROBLEM = "tarsy_config"


def _error(message: str) -> PydanticCustomError:
    return PydanticCustomError(PROBLEM, "{message}", {"message": message})


def fail(message: str) -> NoReturn:
    """A problem with the value being validated, at its own key."""
    raise _error(message)


def fail_at(problems: Iterable[Problem]) -> NoReturn:
    """Problems at keys below the value being validated (``loc`` relative to it)."""
    raise ValidationError.from_exception_data(
        "tarsy.yaml",
        [InitErrorDetails(type=_error(message), loc=loc, input=None) for loc, message in problems],
    )


class Schema(BaseModel):
    """A mapping in tarsy.yaml. An unknown key is an error that lists the allowed ones; a
    key set to nothing (``key:``) is as if it were absent, and so is an empty mapping."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())
    # The key a plain string stands for: ``- LogAgent`` is ``- {name: LogAgent}``.
    shorthand: ClassVar[str | None] = None
    # The dataclass of config/types.py this mapping becomes, field by field (``build()``).
    target: ClassVar[type[Any] | None] = None

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, data: Any) -> Any:
        if data is None:
            return {}
        if isinstance(data, str) and cls.shorthand is not None:
            return {cls.shorthand: data}
        if isinstance(data, BaseModel):
            return data  # built in code (the built-in agents), already valid
        if not isinstance(data, dict):
            fail(f"expected a mapping, got {type(data).__name__}")
        allowed = cls.model_fields
        unknown = [key for key in data if key not in allowed]
        if unknown:
            message = f"unknown key; allowed: {', '.join(sorted(allowed))}"
            fail_at(((str(key),), message) for key in unknown)
        return {key: value for key, value in data.items() if value is not None}

    def build(self) -> Any:
        """The frozen dataclass the rest of TARSy reads (``target``); a mapping whose
        shape differs from its dataclass's says how in its own ``build``."""
        if self.target is None:
            raise TypeError(f"{type(self).__name__} has no dataclass of its own")
        return build(self, self.target)


def build(schema: Schema, cls: type[D], **given: Any) -> D:
    """``cls`` from the fields of ``schema`` of the same names (mappings inside it built
    too), and ``given`` for the rest."""
    names = [
        field.name
        for field in dataclasses.fields(cls)
        if field.name not in given and field.name in type(schema).model_fields
    ]
    return cls(**{name: _built(getattr(schema, name)) for name in names}, **given)


def _built(value: Any) -> Any:
    if isinstance(value, Schema):
        return value.build()
    if isinstance(value, tuple):
        return tuple(_built(item) for item in value)
    return value


_TEMPLATE_RE = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def expand(value: str, *, keep_session_id: bool = False) -> str:
    """``{{.ENV_VAR}}`` from the environment; ``{{.PYTHON}}`` is the Python running TARSy.
    ``{{.SESSION_ID}}`` in an HTTP header is filled in per agent execution instead."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "PYTHON":
            return sys.executable
        if name == "SESSION_ID" and keep_session_id:
            return SESSION_ID_PLACEHOLDER
        if name not in os.environ:
            fail(f"environment variable {name} is not set")
        return os.environ[name]

    return _TEMPLATE_RE.sub(replace, value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        fail(f"expected a string, got {type(value).__name__}")
    return expand(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail(f"expected a whole number of at least 1, got {value!r}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        fail(f"expected a number of at least 0, got {value!r}")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        fail(f"expected true or false, got {value!r}")
    return value


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _duration(value: Any) -> float:
    """Seconds, from a number or text such as ``90s``, ``10m``, ``1h``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    match = _DURATION_RE.match(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        fail(f"expected a duration such as 90s, 10m or 1h, got {value!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def list_of(what: str) -> BeforeValidator:
    """A YAML list; anything else is ``expected a list of <what>``."""

    def check(value: Any) -> Any:
        if not isinstance(value, list | tuple):
            fail(f"expected a list of {what}")
        return value

    return BeforeValidator(check)


def required_list(what: str) -> Callable[[Any], Any]:
    """A list that must have something in it: anything else (absent too, with
    ``Field(validate_default=True)``) is ``is required (a list of <what>)``."""

    def check(value: Any) -> Any:
        if not isinstance(value, list | tuple) or not value:
            fail(f"is required (a list of {what})")
        return value

    return check


def mapping_of(what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            fail(f"expected a mapping of {what}")
        return value

    return BeforeValidator(check)


def one_of(allowed: Sequence[str], what: str) -> AfterValidator:
    """``unknown <what> 'x'; allowed: a, b``"""

    def check(value: str) -> str:
        if value not in allowed:
            fail(f"unknown {what} {value!r}; allowed: {', '.join(allowed)}")
        return value

    return AfterValidator(check)


def or_default(default: str) -> AfterValidator:
    """An empty string means the default, as ``key:`` does."""
    return AfterValidator(lambda value: value or default)


def check(rule: Callable[[Any], str | None]) -> AfterValidator:
    """A rule that returns what is wrong with a value, or None."""

    def apply(value: Any) -> Any:
        problem = rule(value)
        if problem is not None:
            fail(problem)
        return value

    return AfterValidator(apply)


# The value types. A string may use {{.ENV_VAR}} wherever tarsy.yaml has one.
Text = Annotated[str, PlainValidator(_text)]
Texts = Annotated[tuple[Text, ...], list_of("strings")]
PositiveInt = Annotated[int, PlainValidator(_positive_int)]
Number = Annotated[float, PlainValidator(_number)]
Flag = Annotated[bool, PlainValidator(_flag)]
Duration = Annotated[float, PlainValidator(_duration)]
# A key of a mapping of names (agents, servers, chains, model rates): YAML may read
# ``404`` or ``1.5`` as a number; a name is text.
Key = Annotated[str, PlainValidator(str)]
# Values of an MCP server's env and headers: any scalar, as text.
EnvValue = Annotated[str, PlainValidator(lambda value: expand(str(value)))]
HeaderValue = Annotated[str, PlainValidator(lambda value: expand(str(value), keep_session_id=True))]


def key_path(loc: tuple[str | int, ...]) -> str:
    """``("agents", "X", "mcp_servers", 0)`` → ``agents.X.mcp_servers[0]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part != "[key]":  # pydantic's mark of a mapping's key; the path names it
            path += f".{part}" if path else part
    return path
