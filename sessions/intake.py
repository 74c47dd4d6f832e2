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


def validate_alert(
    *,
    data: Any,
    alert_type: Any = None,
    runbook: Any = None,
    unknown_fields: set[str] = frozenset(),
) -> ValidAlert:
    if unknown_fields:
        raise AlertRejected(
            f"unknown field(s): {', '.join(sorted(unknown_fields))}; "
            "allowed: alert_type, runbook, data"
        )
    if data is None:
        raise AlertRejected("'data' is required: the alert's text (JSON, YAML, plain text…)")
    if isinstance(data, dict | list):
        # Old TARSy clients send a JSON object; keep it as readable text.
        data = json.dumps(data, indent=2, ensure_ascii=False)
    if not isinstance(data, str):
        raise AlertRejected(f"'data' must be a string, got {type(data).__name__}")
    if not data.strip():
        raise AlertRejected("'data' is empty: send the alert's text")
    size = len(data.encode())
    limit = settings.TARSY_MAX_ALERT_BYTES
    if size > limit:
        raise AlertRejected(
            f"'data' is {size} bytes; the limit is {limit} bytes (1 MiB)",
            status=413,
            max_bytes=limit,
        )
    config = get_config()
    if alert_type in (None, ""):
        alert_type = config.defaults.alert_type
    if not isinstance(alert_type, str):
        raise AlertRejected(f"'alert_type' must be a string, got {type(alert_type).__name__}")
    chain = config.chain_for_alert_type(alert_type)
    if chain is None:
        raise AlertRejected(
            f"unknown alert_type {alert_type!r}; known alert types: {', '.join(config.alert_types)}",
            known_alert_types=config.alert_types,
        )
    if runbook is not None and not isinstance(runbook, str):
        raise AlertRejected(f"'runbook' must be a string, got {type(runbook).__name__}")
    # Secrets pasted into an alert are masked before it is stored or shown to a model.
    return ValidAlert(
        alert_type=alert_type,
        chain_id=chain.id,
        data=mask_alert(data),
        runbook=mask_alert(runbook or ""),
    )
