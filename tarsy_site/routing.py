from __future__ import annotations

from django.urls import path

from api.ws import ApiConsumer
from web.consumers import SessionConsumer, SessionListConsumer

websocket_urlpatterns = [
    path("ws/sessions/", SessionListConsumer.as_asgi()),
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
    path("api/v1/ws", ApiConsumer.as_asgi()),
]
