"""One place that decides what an SDK exception means: ``classify_error()``."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import re
import time
from dataclasses import dataclass

RATE_LIMIT = "rate_limit"
SERVER_ERROR = "server_error"
# The provider could not be reached at all (refused, DNS, TLS): most often a wrong base_url.
CONNECTION_ERROR = "connection_error"
TIMEOUT = "timeout"
AUTH = "auth_error"
INVALID_REQUEST = "invalid_request"
QUOTA = "quota_exceeded"
EMPTY_RESPONSE = "empty_response"
STREAM_INTERRUPTED = "stream_interrupted"
UNKNOWN = "unknown"
# The model finished a turn whose tool-call arguments are not a JSON object (or one too
# deep or unstorable to keep); running half a turn is worse than asking again, so the
# agent gets a retryable error.
INVALID_TOOL_CALL = "invalid_tool_call"


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
# A whole word: a bare substring test also matched "generate" (Gemini's quota metric
# generate_content_free_tier_requests), "separate", "accurate"…
_RATE_RE = re.compile(r"\brate\b|rate[ _-]?limit", re.IGNORECASE)
_TIMEOUT_RE = re.compile(r"timed? ?out|timeout|deadline exceeded", re.IGNORECASE)
# Gemini's 429 body: {"error": {"details": [{"@type": "…google.rpc.RetryInfo",
# "retryDelay": "7s"}]}} — it sends no Retry-After header.
_RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def classify_error(exc: BaseException) -> Classified:
    """Map any SDK exception to ``(code, retryable)``; unknown errors are not retried."""
    message = str(exc) or type(exc).__name__
    name = type(exc).__name__
    status = _status_code(exc)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError) or "Timeout" in name:
        return Classified(TIMEOUT, True, message)
    if status == 429 or "RateLimit" in name or "ResourceExhausted" in name:
        # A 429 that says "quota" is a hard limit on the account, not a burst — unless
        # the server says when to come back: Gemini words its per-minute limits as
        # "quota" ("Resource has been exhausted (e.g. check quota).") and attaches a
        # retry delay to them.
        if (
            _QUOTA_RE.search(message)
            and not _RATE_RE.search(message)
            and retry_after_seconds(exc) is None
        ):
            return Classified(QUOTA, False, message)
        return Classified(RATE_LIMIT, True, message)
    # google-auth's DefaultCredentialsError: Vertex AI without Application Default Credentials.
    if (
        status in (401, 403)
        or "Authentication" in name
        or "PermissionDenied" in name
        or "Credentials" in name
    ):
        return Classified(AUTH, False, message)
    if status == 402 or (status is None and _QUOTA_RE.search(message)):
        return Classified(QUOTA, False, message)
    if status is not None and status >= 500:
        return Classified(SERVER_ERROR, True, message)
    if status in (400, 404, 409, 413, 422) or "BadRequest" in name or "InvalidArgument" in name:
        return Classified(INVALID_REQUEST, False, message)
    # httpx's ConnectError (refused, DNS) and the SDKs' APIConnectionError wrapping it;
    # a connection that broke later is the server's problem.
    if "Connect" in name:
        return Classified(CONNECTION_ERROR, True, message)
    if "RemoteProtocolError" in name or "ReadError" in name:
        return Classified(SERVER_ERROR, True, message)
    if _TIMEOUT_RE.search(message):
        return Classified(TIMEOUT, True, message)
    return Classified(UNKNOWN, False, message)


def retry_after_seconds(exc: BaseException, *, now: float | None = None) -> float | None:
    """The server's ``Retry-After`` (seconds or HTTP date), if the exception carries one.

    Falls back to a ``google.rpc.RetryInfo`` delay in the error body (google-genai keeps
    the parsed body in ``APIError.details``).
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    value = (headers.get("retry-after") or headers.get("Retry-After")) if headers else None
    if not value:
        return _retry_info_seconds(getattr(exc, "details", None))
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        # A malformed header must not turn error classification itself into a crash.
        return None
    if parsed.tzinfo is None:
        # RFC 9110 dates are GMT; a naive datetime's .timestamp() would assume local time.
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return max(0.0, parsed.timestamp() - (now if now is not None else time.time()))


def _retry_info_seconds(body: object) -> float | None:
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO_TYPE:
            match = _DURATION_RE.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
