"""What every route of the REST API shares: value formats, bodies and errors."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse

from masking.bounded import unstorable
from sessions.auth import ApiRejected, api_error
from sessions.intake import AlertRejected, read_json_body

# TARSy's request body limit (Echo's BodyLimit("2M")).
BODY_LIMIT = 2 * 1024 * 1024
NOT_FOUND = "resource not found"

__all__ = ["NOT_FOUND", "ApiRejected", "api_error", "iso", "json_body", "respond", "sid"]


def iso(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with ``Z``, as TARSy writes times."""
    return value.isoformat().replace("+00:00", "Z") if value else None


def sid(value: Any) -> str | None:
    """Every id in a response is a string (ours are UUIDs or integers)."""
    return None if value is None else str(value)


def respond(data: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(data, status=status, safe=False)


def raw_body(request: HttpRequest) -> bytes:
    length = request.headers.get("Content-Length") or "0"
    if length.isdigit() and int(length) > BODY_LIMIT:
        raise ApiRejected(f"Request Entity Too Large: the body limit is {BODY_LIMIT} bytes", 413)
    try:
        # A chunked body has no Content-Length: it is measured as it is read.
        body = request.body
    except RequestDataTooBig:
        body = b"x" * (BODY_LIMIT + 1)
    if len(body) > BODY_LIMIT:
        raise ApiRejected(f"Request Entity Too Large: the body limit is {BODY_LIMIT} bytes", 413)
    return body


def json_body(request: HttpRequest, *, example: str) -> dict[str, Any] | None:
    """The request's JSON object, or None for an empty body. A body of another content
    type gets 415; one that is not a JSON object gets 400 saying what to send."""
    body = raw_body(request)
    if not body.strip():
        return None
    content_type = request.content_type or ""
    if content_type != "application/json" and not content_type.endswith("+json"):
        raise ApiRejected(
            f"Unsupported Media Type {content_type or '(none)'}: send the body as JSON "
            "with 'Content-Type: application/json'",
            415,
        )
    try:
        parsed = read_json_body(body)
    except AlertRejected as rejected:
        message = str(rejected).replace("with a 'data' field", example)
        raise ApiRejected(message) from None
    if found := _unstorable_in(parsed):
        where, problem = found
        field = re.split(r"[.\[]", where, maxsplit=1)[0][:60]
        path = f" ({where[:120]})" if where != field else ""
        raise ApiRejected(
            f"validation error on field '{field}'{path}: contains {problem}; "
            "send valid Unicode text without NUL characters"
        )
    return parsed


def _unstorable_in(value: Any, where: str = "") -> tuple[str, str] | None:
    """Where a JSON value holds a NUL character (PostgreSQL cannot store one in text) or a
    lone surrogate (``"\\ud800"``: no UTF-8 for it), and which; None if nowhere. The body
    is at most ``read_json_body``'s depth deep."""
    if isinstance(value, str):
        return (where or "body", problem) if (problem := unstorable(value)) else None
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if problem := unstorable(key):
                return ascii(path)[1:-1], f"{problem} in a key"
            if found := _unstorable_in(item, path):
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if found := _unstorable_in(item, f"{where}[{index}]"):
                return found
    return None


def check_query(request: HttpRequest) -> None:
    """Query parameters end up in SQL; PostgreSQL refuses a NUL character in text."""
    for name, values in request.GET.lists():
        if any("\x00" in value for value in values) or "\x00" in name:
            raise ApiRejected(f"validation error on field '{name[:40]}': contains a NUL character")


def only_fields(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    if unknown := sorted(set(body) - set(allowed)):
        names = ", ".join(repr(name[:40]) for name in unknown[:10])
        raise ApiRejected(f"unknown field(s): {names}; allowed: {', '.join(allowed)}")
