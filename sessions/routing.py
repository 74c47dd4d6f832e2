from __future__ import annotations

from django.urls import path

from sessions.consumers import SessionConsumer, SessionListConsumer
from sessions.ws_api import ApiConsumer

websocket_urlpatterns = [
    path("ws/sessions/", SessionListConsumer.as_asgi()),
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
    path("api/v1/ws", ApiConsumer.as_asgi()),
]
