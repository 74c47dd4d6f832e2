"""API authentication and the author of an API request.

A request is authenticated by, in order: a trusted reverse proxy's identity header
(``TARSY_TRUSTED_PROXIES``, as TARSy is deployed behind oauth2-proxy), an
``Authorization: Bearer <token>`` header, or a logged-in browser session.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import secrets
from collections.abc import Mapping
from datetime import timedelta
from functools import cache
from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone

from masking import mask_alert
from sessions.models import ApiToken

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "tarsy_"
# TARSy's order (pkg/api/auth.go): oauth2-proxy's user, its email, kube-rbac-proxy's user.
IDENTITY_HEADERS = ("X-Forwarded-User", "X-Forwarded-Email", "X-Remote-User")
AUTHOR_LIMIT = 150  # characters (AlertSession.author)
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# How stale a token's ``last_used_at`` may be: recording every use made each API read a
# write transaction (on SQLite, a wait for the one write lock); once a minute is enough
# to tell a token in use from a forgotten one.
LAST_USED_EVERY = timedelta(minutes=1)


def api_error(message: str, status: int, **extra: Any) -> JsonResponse:
    """Every API error: ``message`` is TARSy's key; ``error`` repeats it for clients of
    this API's first versions."""
    return JsonResponse({"message": message, "error": message, **extra}, status=status)


class ApiRejected(Exception):
    """An API request that gets a JSON error; ``extra`` keys join the body."""

    def __init__(self, message: str, status: int = 400, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(*, username: str) -> str:
    """Create the user if needed and a new token for it; returns the token (shown once)."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, token_hash=_hash(token), prefix=token[:12])
    return token


def user_for_token(token: str) -> User | None:
    api_token = ApiToken.objects.select_related("user").filter(token_hash=_hash(token)).first()
    if api_token is None or not api_token.user.is_active:
        return None
    now = timezone.now()
    if api_token.last_used_at is None or now - api_token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=now)
    return api_token.user


def user_still_allowed(scope: Mapping[str, Any]) -> bool:
    """Whether the login a WebSocket was opened with still holds: the session exists
    (not logged out), its password hash matches (no password change), and the user is
    active. Django's own ``get_user`` makes each of those checks."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return False
    session = scope.get("session")
    if session is None or session.session_key is None:
        # No browser session (a test, or a future token-authenticated socket).
        return get_user_model().objects.filter(pk=user.pk, is_active=True).exists()
    engine = import_module(settings.SESSION_ENGINE)
    request = SimpleNamespace(session=engine.SessionStore(session.session_key))
    current = get_user(request)  # type: ignore[arg-type]  # it reads only request.session
    return current.is_authenticated and current.pk == user.pk


@cache
def _trusted_networks(
    proxies: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for proxy in filter(None, (p.strip() for p in proxies)):
        try:
            networks.append(ipaddress.ip_network(proxy, strict=False))
        except ValueError:
            # Logged once (cached); skipping it is the safe reading of a typo.
            logger.error("TARSY_TRUSTED_PROXIES: %r is not an IP address or network", proxy)
    return tuple(networks)


def from_trusted_proxy(request: HttpRequest) -> bool:
    networks = _trusted_networks(tuple(settings.TARSY_TRUSTED_PROXIES))
    if not networks:
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in networks)


def proxy_identity(request: HttpRequest) -> str:
    """The user a trusted proxy vouches for ("" if none); anyone else's headers are
    ignored, since any client can send them."""
    if not from_trusted_proxy(request):
        return ""
    for header in IDENTITY_HEADERS:
        if value := request.headers.get(header, "").strip():
            # Stored as the author of whatever the request does, and shown. Masked before
            # it is cut, so that a cut cannot leave a secret too short to be recognised.
            return mask_alert(value)[:AUTHOR_LIMIT]
    return ""


def request_author(request: HttpRequest) -> str:
    """Who an API request acts for (TARSy's author, docs/api.md §4): the proxy's user, else the
    token's owner or the logged-in user."""
    return getattr(request, "tarsy_author", "") or request.user.get_username()


def _csrf_failure(request: HttpRequest) -> HttpResponse | None:
    # No view to run: the check itself is what is wanted.
    return CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})  # type: ignore[arg-type]


def _cross_site(request: HttpRequest) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return request.headers.get("Sec-Fetch-Site") == "cross-site"
    return urlsplit(origin).netloc != request.get_host()


def authenticate_api_request(request: HttpRequest) -> str:
    """Authenticate the request and return its author, or raise ``ApiRejected`` (401,
    403). Bearer requests skip CSRF (no ambient credentials); cookie-authenticated unsafe
    requests get Django's CSRF check, and proxy-authenticated ones an Origin check (the
    proxy's own cookie is ambient too)."""
    if identity := proxy_identity(request):
        if request.method not in SAFE_METHODS and _cross_site(request):
            raise ApiRejected("cross-site request refused: send it from TARSy's own origin", 403)
        request.tarsy_author = identity  # type: ignore[attr-defined]  # read by request_author
        return identity
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiRejected("Authorization header must be 'Bearer <token>'", 401)
        user = user_for_token(token.strip())
        if user is None:
            raise ApiRejected("invalid or revoked API token", 401)
        request.user = user
        return user.get_username()
    if request.user.is_authenticated:
        if request.method not in SAFE_METHODS and (failure := _csrf_failure(request)):
            raise ApiRejected(
                "CSRF check failed: a browser must send the csrftoken cookie's value in "
                "the X-CSRFToken header",
                failure.status_code,
            )
        return request.user.get_username()
    raise ApiRejected(
        "authentication required: send 'Authorization: Bearer <token>' "
        "(create one with: python manage.py create_api_token USERNAME)",
        401,
    )
