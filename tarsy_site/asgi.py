"""ASGI entry point: Django for HTTP, Channels for WebSockets.

Every WebSocket handshake passes the same-origin check first, then authenticates by the
session cookie, or by ``Authorization: Bearer <token>`` or a trusted proxy's user header
(``/api/v1/ws`` clients; api/ws.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")

from django.core.asgi import get_asgi_application

django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from api.ws import BearerTokenMiddleware  # noqa: E402
from tarsy_site.routing import websocket_urlpatterns  # noqa: E402
from tarsy_site.websocket import SameOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": SameOriginValidator(
            # Its URLPatterns route consumers (tarsy_site/routing.py), as the stubs cannot tell.
            AuthMiddlewareStack(BearerTokenMiddleware(URLRouter(websocket_urlpatterns)))  # type: ignore[arg-type]
        ),
    }
)
