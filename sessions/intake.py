"""Validation of an incoming alert, shared by the REST API and the web form."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents.config import get_config
from agents.masking import mask_alert


class AlertRejected(Exception):
    def __init__(self, message: str, status: int = 400, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


@dataclass(frozen=True)
class ValidAlert:
    alert_type: str
    chain_id: str
    data: str
    runbook: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# Alerts are a few levels deep (Alertmanager's webhook is four); anything far deeper is
# an attack on the parser, the masker or the LLM prompt.
MAX_JSON_DEPTH = 32
ALLOWED_FIELDS = ("alert_type", "runbook", "data")


def read_json_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; ``AlertRejected`` names what is wrong with it."""
    try:
        body = json.loads(raw or b"", parse_constant=_no_constants)
    except RecursionError:
        raise AlertRejected(
            f"request body is nested more than {MAX_JSON_DEPTH} levels deep"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise AlertRejected(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise AlertRejected("request body must be a JSON object with a 'data' field")
    if _deeper_than(body, MAX_JSON_DEPTH):
        raise AlertRejected(f"request body is nested more than {MAX_JSON_DEPTH} levels deep")
    return body


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _deeper_than(root: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def validate_alert(
    *,
    data: Any,
    alert_type: Any = None,
    runbook: Any = None,
    unknown_fields: set[str] = frozenset(),
) -> ValidAlert:
    if unknown_fields:
        names = ", ".join(_shorten(name, 40) for name in sorted(unknown_fields)[:10])
        raise AlertRejected(f"unknown field(s): {names}; allowed: {', '.join(ALLOWED_FIELDS)}")
    if data is None:
        raise AlertRejected("'data' is required: the alert's text (JSON, YAML, plain text…)")
    if isinstance(data, dict | list):
        # Old TARSy clients send a JSON object: measured as sent (compact), stored readable.
        _check_size("data", json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        data = json.dumps(data, indent=2, ensure_ascii=False)
    elif isinstance(data, str):
        _check_size("data", data)
    else:
        raise AlertRejected(f"'data' must be a string, got {type(data).__name__}")
    if not data.strip():
        raise AlertRejected("'data' is empty: send the alert's text")
    if runbook is not None and not isinstance(runbook, str):
        raise AlertRejected(f"'runbook' must be a string, got {type(runbook).__name__}")
    _check_size("runbook", runbook or "")
    config = get_config()
    if alert_type in (None, ""):
        alert_type = config.defaults.alert_type
    if not isinstance(alert_type, str):
        raise AlertRejected(f"'alert_type' must be a string, got {type(alert_type).__name__}")
    _check_size("alert_type", alert_type)
    chain = config.chain_for_alert_type(alert_type)
    if chain is None:
        raise AlertRejected(
            f"unknown alert_type {_shorten(alert_type)}; "
            f"known alert types: {', '.join(config.alert_types)}",
            known_alert_types=config.alert_types,
        )
    # Secrets pasted into an alert are masked before it is stored or shown to a model.
    return ValidAlert(
        alert_type=alert_type,
        chain_id=chain.id,
        data=mask_alert(data),
        runbook=mask_alert(runbook or ""),
    )


def _check_size(field: str, text: str) -> None:
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:
        # JSON allows "\ud800"; UTF-8 (the database, the LLM APIs) does not.
        raise AlertRejected(
            f"'{field}' contains a lone surrogate ({text[exc.start]!a}) at character "
            f"{exc.start}: send valid Unicode text"
        ) from None
    limit = settings.TARSY_MAX_ALERT_BYTES
    if size > limit:
        raise AlertRejected(
            f"'{field}' is {size} bytes; the limit is {limit} bytes (1 MiB)",
            status=413,
            max_bytes=limit,
        )


def _shorten(value: str, limit: int = 60) -> str:
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"
