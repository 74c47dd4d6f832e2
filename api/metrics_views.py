"""GET /metrics: Prometheus text (or OpenMetrics, when the scraper asks for it)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder

from api.metrics import SCOPES


@login_not_required
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    if (refusal := _refusal(request)) is not None:
        return refusal
    scope = request.GET.get("scope", "all")
    if scope not in SCOPES:
        return _text(f"unknown scope {scope[:50]!r}: use all, process or database", 400)
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(SCOPES[scope]), content_type=content_type)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """A set TARSY_METRICS_TOKEN is the only way in; without one, logged-in staff (or
    anyone, with TARSY_METRICS_PUBLIC)."""
    expected = settings.TARSY_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if expected:
        scheme, _, token = header.partition(" ")
        if not header:
            return _unauthorized("send 'Authorization: Bearer <TARSY_METRICS_TOKEN>'")
        if scheme.lower() != "bearer":
            return _unauthorized("the Authorization header must be 'Bearer <token>'")
        # Constant time: the comparison must not tell a guesser how much of it was right.
        if not hmac.compare_digest(token.strip().encode(), expected.encode()):
            return _unauthorized("wrong metrics token")
        return None
    if settings.TARSY_METRICS_PUBLIC:
        return None
    user = request.user
    if user.is_authenticated and user.is_staff:
        return None
    if user.is_authenticated:
        return _text("only staff users may read /metrics", 403)
    if header:
        return _unauthorized(
            "this server has no TARSY_METRICS_TOKEN set: set one for your scraper, "
            "or log in as a staff user"
        )
    return _unauthorized(
        "log in as a staff user, or set TARSY_METRICS_TOKEN and send "
        "'Authorization: Bearer <token>'"
    )


def _unauthorized(message: str) -> HttpResponse:
    response = _text(message, 401)
    response["WWW-Authenticate"] = 'Bearer realm="tarsy-metrics"'
    return response


def _text(message: str, status: int) -> HttpResponse:
    return HttpResponse(f"{message}\n", status=status, content_type="text/plain; charset=utf-8")
