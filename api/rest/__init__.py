"""The REST API under ``/api/v1``, wire-compatible with TARSy's (docs/api.md §1).

django-ninja routes every operation and writes the OpenAPI document
(``/api/v1/openapi.json``; Swagger UI at ``/api/docs``). Every error is JSON with
``message`` (and ``error``, its copy): unknown paths 404, wrong methods 405, bodies over
2 MiB 413, bad input 400 naming the field, and no input gives a 500.
"""

from __future__ import annotations

import logging
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from api.rest import alerts, followups, memories, sessions, steering, system, trace, usage
from api.rest.common import BODY_LIMIT, NOT_FOUND, check_query
from api.rest.docs import add_request_models
from sessions.auth import ApiRejected, api_error, authenticate_api_request
from sessions.intake import AlertRejected

logger = logging.getLogger(__name__)

__all__ = ["api", "api_urlpatterns"]


class ApiAuth:
    """A trusted proxy's user, a bearer token or a browser login (``sessions.auth``)."""

    # Tells the docs page to send the CSRF token, so "Try it out" works when logged in.
    csrf = True

    def __call__(self, request: HttpRequest) -> str:
        author = authenticate_api_request(request)
        check_query(request)
        return author


class TarsyApi(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return add_request_models(document)


def _openapi_auth(view):
    """The document needs the same credentials as the API."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            authenticate_api_request(request)
        except ApiRejected as rejected:
            return api_error(str(rejected), rejected.status)
        return view(request, *args, **kwargs)

    return wrapper


api = TarsyApi(
    title="TARSy API",
    version="v1",
    description=(
        "TARSy's REST API (wire-compatible with the Go TARSy). Authenticate with "
        "'Authorization: Bearer <token>' (manage.py create_api_token USERNAME), a browser "
        "login, or a trusted proxy's X-Forwarded-User header."
    ),
    urls_namespace="api-v1",
    auth=[ApiAuth()],
    openapi_url="/openapi.json",
    docs_url=None,  # /api/docs, a page of the site (tarsy_site/urls.py)
    docs_decorator=_openapi_auth,
    openapi_extra={
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    },
)
for module in (alerts, sessions, steering, followups, memories, system, trace, usage):
    api.add_router("", module.router)


def _validation_message(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("query", "path", "body")]
    field = ".".join(location) or "request"
    return f"validation error on field '{field}': {first.get('msg', 'invalid value')}"


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return api_error(_validation_message(exc.errors), 400)


@api.exception_handler(ApiRejected)
def _rejected(request: HttpRequest, exc: ApiRejected) -> HttpResponse:
    return api_error(str(exc), exc.status, **exc.extra)


@api.exception_handler(AlertRejected)
def _alert_rejected(request: HttpRequest, exc: AlertRejected) -> HttpResponse:
    return api_error(str(exc), exc.status, **exc.extra)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return api_error("authentication required", 401)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return api_error(str(exc), exc.status_code)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return api_error(NOT_FOUND, 404)


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return api_error(f"Request Entity Too Large: the body limit is {BODY_LIMIT} bytes", 413)


@api.exception_handler(DatabaseError)
def _database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    logger.error("API %s %s: database error: %s", request.method, request.path, exc)
    return api_error(f"the database is unavailable ({type(exc).__name__}); retry later", 503)


@api.exception_handler(Exception)
def _internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("API %s %s failed", request.method, request.path)
    return api_error("internal server error", 500)


def _json_view(view):
    """Each route: exempt from the site's login redirect (the API answers 401 itself),
    and a wrong method gets TARSy's JSON 405 rather than Django's empty one."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and "json" not in response.get("Content-Type", ""):
            allowed = response.get("Allow", "")
            response = api_error(f"Method Not Allowed; allowed: {allowed}", 405)
            response["Allow"] = allowed
        return response

    return csrf_exempt(login_not_required(wrapper))


@csrf_exempt
@login_not_required
def unknown_route(request: HttpRequest, path: str = "") -> HttpResponse:
    return api_error(f"Not Found: no API route {request.path!r}", 404)


def _patterns() -> list[Any]:
    patterns, _app, _namespace = api.urls
    wrapped = []
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _json_view(pattern.callback)
        wrapped.append(pattern)
    return wrapped


# The ``api-v1`` namespace's patterns, then JSON 404 for anything else under /api/v1/.
api_urlpatterns = [*_patterns(), re_path(r"^(?P<path>.*)$", unknown_route)]
