from __future__ import annotations

from django.urls import path

from api.ws import ApiConsumer
from web.consumers import SessionConsumer, SessionListConsumer

# Channels routes consumers with Django's path(), whose stubs take only views.
websocket_urlpatterns = [
    path("ws/sessions/", SessionListConsumer.as_asgi()),  # type: ignore[arg-type]
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),  # type: ignore[arg-type]
    path("api/v1/ws", ApiConsumer.as_asgi()),  # type: ignore[arg-type]
]
