"""Which pages may open TARSy's WebSockets.

Browsers send cookies to every port of a host, so a page served from
``http://127.0.0.1:9999`` would ride the user's login into ``ws://127.0.0.1:8000``
unless the Origin is checked in full. An origin is allowed when its scheme, host and
port equal the site's own (taken from the Host header, which must be in
``ALLOWED_HOSTS``), or one of ``ALLOWED_WS_ORIGINS`` / ``CSRF_TRUSTED_ORIGINS`` (behind a
TLS proxy the browser's origin is ``https://…`` while daphne sees ``ws://``). A
handshake without an Origin comes from a program, not a browser page; the consumers
still require a login.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]  # scheme, host (lower case, "*.example.com" allowed), port


def parse_origin(value: str) -> Origin | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _matches(origin: Origin, allowed: Origin) -> bool:
    scheme, host, port = allowed
    if (origin[0], origin[2]) != (scheme, port):
        return False
    if host.startswith("*."):
        return origin[1].endswith(host[1:])
    return origin[1] == host


def _site_origin(scope: dict[str, Any], headers: dict[bytes, bytes]) -> Origin | None:
    host = headers.get(b"host", b"").decode("latin1")
    domain, port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") in ("wss", "https") or _forwarded_secure(headers)
    scheme = "https" if secure else "http"
    return scheme, domain, int(port) if port else _DEFAULT_PORTS[scheme]


def _forwarded_secure(headers: dict[bytes, bytes]) -> bool:
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if not proxy:
        return False
    name = proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
    return headers.get(name, b"").decode("latin1") == proxy[1]


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    site = _site_origin(scope, headers)
    if site is None:
        return False  # a Host we do not serve: DNS rebinding, or a misconfiguration
    if b"origin" not in headers:
        return True
    origin = parse_origin(headers[b"origin"].decode("latin1"))
    if origin is None:
        return False  # "null" (sandboxed frames, file://) or garbage
    trusted = [*settings.ALLOWED_WS_ORIGINS, *settings.CSRF_TRUSTED_ORIGINS]
    allowed = [site, *filter(None, map(parse_origin, trusted))]
    return any(_matches(origin, candidate) for candidate in allowed)


class SameOriginValidator:
    """ASGI middleware: refuses a WebSocket handshake from any other origin (HTTP 403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            # The stubs type a scope as a TypedDict; ASGI passes a plain dict.
            return await WebsocketDenier()(scope, receive, send)  # type: ignore[arg-type]
        return await self.application(scope, receive, send)
