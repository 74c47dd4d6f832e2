from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.filter
def status_class(status: str) -> str:
    return {
        "pending": "queued",
        "in_progress": "running",
        "cancelling": "running",
        "completed": "ok",
        "failed": "bad",
        "timed_out": "bad",
        "cancelled": "muted",
    }.get(status, "muted")


@register.filter
def cancellable(execution) -> bool:
    from sessions.live import cancellable as offers_cancel

    return offers_cancel(execution)
