"""``classify_error`` and ``retry_after_seconds`` on the exceptions SDKs really raise."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from google.genai import errors as genai_errors

from llm.errors import (
    AUTH,
    CONNECTION_ERROR,
    INVALID_REQUEST,
    QUOTA,
    RATE_LIMIT,
    SERVER_ERROR,
    TIMEOUT,
    UNKNOWN,
    classify_error,
    retry_after_seconds,
)

REQUEST = httpx.Request("POST", "https://generativelanguage.googleapis.com/v1beta/models/m")


def gemini_error(
    status: int,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    details: list[Any] | None = None,
) -> genai_errors.APIError:
    """What google-genai raises for an HTTP error (ClientError for 4xx, ServerError for 5xx)."""
    body: dict[str, Any] = {"error": {"code": status, "message": message, "status": "X"}}
    if details is not None:
        body["error"]["details"] = details
    response = httpx.Response(status, json=body, headers=headers or {}, request=REQUEST)
    cls = genai_errors.ClientError if status < 500 else genai_errors.ServerError
    return cls(status, body, response)


def retry_info(delay: str) -> list[dict[str, str]]:
    return [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]


class StatusError(Exception):
    """An SDK exception that carries its HTTP status as ``status_code`` (OpenAI, Anthropic)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (
            gemini_error(429, "Resource has been exhausted.", headers={"Retry-After": "3"}),
            RATE_LIMIT,
            True,
        ),
        (gemini_error(429, "Too many requests: rate limit exceeded."), RATE_LIMIT, True),
        # Gemini's per-minute limit is worded as quota but says when to come back.
        (
            gemini_error(429, "You exceeded your current quota.", details=retry_info("20s")),
            RATE_LIMIT,
            True,
        ),
        (gemini_error(429, "Resource has been exhausted (e.g. check quota)."), QUOTA, False),
        # "generate" contains "rate"; only the word counts.
        (
            gemini_error(
                429,
                "Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests",
            ),
            QUOTA,
            False,
        ),
        (StatusError(429, "insufficient_quota: check your plan and billing details"), QUOTA, False),
        (StatusError(402, "payment required"), QUOTA, False),
        (gemini_error(401, "API key not valid."), AUTH, False),
        (gemini_error(403, "Permission denied."), AUTH, False),
        (gemini_error(400, "Invalid JSON payload."), INVALID_REQUEST, False),
        (gemini_error(404, "models/nope is not found."), INVALID_REQUEST, False),
        (gemini_error(500, "Internal error."), SERVER_ERROR, True),
        (gemini_error(503, "The model is overloaded."), SERVER_ERROR, True),
        (httpx.ReadTimeout("timed out", request=REQUEST), TIMEOUT, True),
        (TimeoutError(), TIMEOUT, True),
        (
            httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            ),
            SERVER_ERROR,
            True,
        ),
        (httpx.ReadError("connection reset"), SERVER_ERROR, True),
        (httpx.ConnectError("[Errno 111] Connection refused"), CONNECTION_ERROR, True),
        (ConnectionResetError("reset by peer"), CONNECTION_ERROR, True),
        (RuntimeError("deadline exceeded while waiting"), TIMEOUT, True),
        (ValueError("boom"), UNKNOWN, False),
    ],
)
def test_classify_error(exc: BaseException, code: str, retryable: bool) -> None:
    classified = classify_error(exc)
    assert (classified.code, classified.retryable) == (code, retryable)
    assert classified.message


def test_classify_error_message_falls_back_to_the_type_name() -> None:
    assert classify_error(KeyError()).message == "KeyError"


@pytest.mark.parametrize(
    ("headers", "details", "expected"),
    [
        ({"Retry-After": "7"}, None, 7.0),
        ({"retry-after": "1.5"}, None, 1.5),
        ({"Retry-After": "-4"}, None, 0.0),
        # An HTTP date, relative to "now" below (2015-10-21 07:28:00 GMT).
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:30 GMT"}, None, 30.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:30 -0000"}, None, 30.0),
        ({"Retry-After": "soon"}, None, None),
        ({}, retry_info("12.5s"), 12.5),
        ({"Retry-After": "2"}, retry_info("12s"), 2.0),  # the header wins
        ({}, [{"@type": "type.googleapis.com/google.rpc.ErrorInfo"}], None),
        ({}, None, None),
    ],
)
def test_retry_after_seconds(
    headers: dict[str, str], details: list[Any] | None, expected: float | None
) -> None:
    exc = gemini_error(429, "slow down", headers=headers, details=details)
    assert retry_after_seconds(exc, now=1445412480.0) == expected


def test_retry_after_seconds_without_a_response() -> None:
    assert retry_after_seconds(ValueError("no response attached")) is None


def test_malformed_retry_after_does_not_break_classification() -> None:
    exc = gemini_error(429, "Resource has been exhausted.", headers={"Retry-After": "soon"})
    assert classify_error(exc).code == RATE_LIMIT
