"""One place that decides what an SDK exception means: ``classify_error()``."""

from __future__ import annotations

import asyncio
import email.utils
import re
import time
from dataclasses import dataclass

RATE_LIMIT = "rate_limit"
SERVER_ERROR = "server_error"
TIMEOUT = "timeout"
AUTH = "auth_error"
INVALID_REQUEST = "invalid_request"
QUOTA = "quota_exceeded"
EMPTY_RESPONSE = "empty_response"
STREAM_INTERRUPTED = "stream_interrupted"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Classified:
    code: str
    retryable: bool
    message: str


def _status_code(exc: BaseException) -> int | None:
    for attr in ("status_code", "code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


_QUOTA_RE = re.compile(r"quota|insufficient_quota|billing|credit balance", re.IGNORECASE)
_TIMEOUT_RE = re.compile(r"timed? ?out|timeout|deadline exceeded", re.IGNORECASE)


def classify_error(exc: BaseException) -> Classified:
    """Map any SDK exception to ``(code, retryable)``; unknown errors are not retried."""
    message = str(exc) or type(exc).__name__
    name = type(exc).__name__
    status = _status_code(exc)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError) or "Timeout" in name:
        return Classified(TIMEOUT, True, message)
    if status == 429 or "RateLimit" in name or "ResourceExhausted" in name:
        # A 429 that says "quota" is a hard limit on the account, not a burst.
        if _QUOTA_RE.search(message) and "rate" not in message.lower():
            return Classified(QUOTA, False, message)
        return Classified(RATE_LIMIT, True, message)
    if status in (401, 403) or "Authentication" in name or "PermissionDenied" in name:
        return Classified(AUTH, False, message)
    if status == 402 or (status is None and _QUOTA_RE.search(message)):
        return Classified(QUOTA, False, message)
    if status is not None and status >= 500:
        return Classified(SERVER_ERROR, True, message)
    if status in (400, 404, 409, 413, 422) or "BadRequest" in name or "InvalidArgument" in name:
        return Classified(INVALID_REQUEST, False, message)
    if "Connection" in name or "RemoteProtocolError" in name or "ReadError" in name:
        return Classified(SERVER_ERROR, True, message)
    if _TIMEOUT_RE.search(message):
        return Classified(TIMEOUT, True, message)
    return Classified(UNKNOWN, False, message)


def retry_after_seconds(exc: BaseException, *, now: float | None = None) -> float | None:
    """The server's ``Retry-After`` (seconds or HTTP date), if the exception carries one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_to_datetime(value)
    if parsed is None:
        return None
    return max(0.0, parsed.timestamp() - (now if now is not None else time.time()))
