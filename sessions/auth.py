"""API authentication: ``Authorization: Bearer <token>`` or a logged-in browser session."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from functools import wraps
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from sessions.models import ApiToken

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "tarsy_"


def api_error(message: str, status: int, **extra: Any) -> JsonResponse:
    """Every API error: ``message`` is TARSy's key; ``error`` repeats it for clients of
    this API's first versions."""
    return JsonResponse({"message": message, "error": message, **extra}, status=status)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(*, username: str) -> str:
    """Create the user if needed and a new token for it; returns the token (shown once)."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, token_hash=_hash(token), prefix=token[:12])
    return token


def user_for_token(token: str) -> AbstractBaseUser | None:
    api_token = ApiToken.objects.select_related("user").filter(token_hash=_hash(token)).first()
    if api_token is None or not api_token.user.is_active:
        return None
    ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=timezone.now())
    return api_token.user


def user_still_allowed(scope: dict[str, Any]) -> bool:
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
    current = get_user(request)
    return current.is_authenticated and current.pk == user.pk


def _csrf_failure(request: HttpRequest) -> HttpResponse | None:
    return CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})


def api_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Authenticate an API request; answer 401 JSON rather than redirecting to a login page.

    Bearer requests skip CSRF (no ambient credentials); cookie-authenticated unsafe
    requests still get Django's CSRF check.
    """

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        header = request.headers.get("Authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return api_error("Authorization header must be 'Bearer <token>'", 401)
            user = user_for_token(token.strip())
            if user is None:
                return api_error("invalid or revoked API token", 401)
            request.user = user
        elif request.user.is_authenticated:
            if request.method not in ("GET", "HEAD", "OPTIONS") and (
                failure := _csrf_failure(request)
            ):
                return failure
        else:
            return api_error(
                "authentication required: send 'Authorization: Bearer <token>' "
                "(create one with: python manage.py create_api_token USERNAME)",
                401,
            )
        return _json_errors(view, request, *args, **kwargs)

    return csrf_exempt(login_not_required(wrapper))


def _json_errors(view: Callable[..., HttpResponse], request: HttpRequest, *args, **kwargs):
    """API clients get JSON for every failure, never Django's HTML error pages."""
    try:
        return view(request, *args, **kwargs)
    except Http404 as exc:
        return api_error(str(exc) or "not found", 404)
    except DatabaseError as exc:
        logger.error("API %s %s: database error: %s", request.method, request.path, exc)
        return api_error(f"the database is unavailable ({type(exc).__name__}); retry later", 503)
    except Exception:
        logger.exception("API %s %s failed", request.method, request.path)
        return api_error("internal error; the server log has the details", 500)
