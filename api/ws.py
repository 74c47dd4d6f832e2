"""``/api/v1/ws``: TARSy's JSON WebSocket protocol (docs/api.md §2), for TARSy's
dashboard and scripts.

A client subscribes to channels (``sessions``, ``session:<id>``); each subscription and
each ``catchup`` replays the session's persistent events from the event log, and live
events follow from this process's relay. Messages are handled one at a time, so live
events that arrive during a replay wait for it; the ones it already sent are skipped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest

from api import protocol
from live import relay
from live.metrics import WEBSOCKET_CONNECTIONS
from live.relay import LIST_GROUP, ensure_relay_running, session_group
from live.streams import Shown
from masking.bounded import load_json
from sessions import selectors
from sessions.auth import proxy_identity, user_for_token, user_still_allowed
from sessions.models import SessionEventType, TimelineEventStatus

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
INT64 = 2**63
RECENT_LIVE = 512  # the relay sends an event once per group it concerns
MESSAGE_LIMIT = 64 * 1024  # characters of a client's message


class ApiConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if not self.scope.get("proxy_identity") and (user is None or not user.is_authenticated):
            # Refused before the handshake completes: the client gets HTTP 403.
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.subscribed: set[str] = set()
        # session id → the channel names subscribed for it (a client may spell one twice)
        self.sessions: dict[uuid.UUID, set[str]] = {}
        # session id → ids replays sent that may still arrive live, and the highest of them
        self.replayed: dict[uuid.UUID, set[int]] = {}
        self.replayed_through: dict[uuid.UUID, int] = {}
        self.recent: deque[int] = deque(maxlen=RECENT_LIVE)
        # What this client has been sent of each streaming item: streamed text comes live
        # from the workers and again as saved rows (live/streams.py).
        self.shown = Shown()
        await self.accept()
        self.counted = True
        WEBSOCKET_CONNECTIONS.labels(kind="api").inc()
        ensure_relay_running()
        await self.send_json({"type": "connection.established", "connection_id": str(uuid.uuid4())})
        self.access_check = asyncio.create_task(self.check_access())

    async def disconnect(self, code: int) -> None:
        if getattr(self, "counted", False):
            WEBSOCKET_CONNECTIONS.labels(kind="api").dec()
            self.counted = False
        for session_id in getattr(self, "sessions", {}):
            await self.channel_layer.group_discard(session_group(session_id), self.channel_name)
        if protocol.LIST_CHANNEL in getattr(self, "subscribed", ()):
            await self.channel_layer.group_discard(LIST_GROUP, self.channel_name)
        if check := getattr(self, "access_check", None):
            check.cancel()

    async def check_access(self) -> None:
        """Close the socket once its login or token no longer holds."""
        while True:
            await asyncio.sleep(settings.TARSY_WS_ACCESS_CHECK_INTERVAL)
            if not await database_sync_to_async(_still_allowed)(self.scope):
                await self.close(code=CLOSE_UNAUTHENTICATED)
                return

    async def send_json(self, message: dict[str, Any]) -> None:
        await self.send(text_data=protocol.encode(message))

    # --- client → server ------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        message = _client_message(text_data if text_data is not None else bytes_data)
        if message is None:
            return  # not JSON, or mistyped fields: ignored, as TARSy does
        action, channel, last_event_id = message
        if action == "ping":
            await self.send_json({"type": "pong"})
            return
        if action not in ("subscribe", "unsubscribe", "catchup"):
            return
        if not channel:
            await self.send_json({"type": "error", "message": f"channel is required for {action}"})
            return
        if action == "subscribe":
            await self.subscribe(channel)
            await self.send_json({"type": "subscription.confirmed", "channel": channel})
            await self.catchup(channel, 0)
        elif action == "unsubscribe":
            await self.unsubscribe(channel)
        elif last_event_id is not None:
            await self.catchup(channel, last_event_id)

    async def subscribe(self, channel: str) -> None:
        # Any channel name is accepted (TARSy's rule); only these two kinds carry events.
        self.subscribed.add(channel)
        if channel == protocol.LIST_CHANNEL:
            await self.channel_layer.group_add(LIST_GROUP, self.channel_name)
        elif (session_id := protocol.channel_session_id(channel)) is not None:
            following = session_id in self.sessions
            self.sessions.setdefault(session_id, set()).add(channel)
            await self.channel_layer.group_add(session_group(session_id), self.channel_name)
            if not following:
                # Stream chunks are live only (TARSy's rule): from what has streamed so far.
                saved = await sync_to_async(selectors.session_streamed_text)(session_id)
                for item_id, text in saved.items():
                    if not self.shown.knows(item_id):
                        self.shown.start(item_id, len(relay.streamed_after(item_id, text)))

    async def unsubscribe(self, channel: str) -> None:
        self.subscribed.discard(channel)
        if channel == protocol.LIST_CHANNEL:
            await self.channel_layer.group_discard(LIST_GROUP, self.channel_name)
        elif (session_id := protocol.channel_session_id(channel)) in self.sessions:
            names = self.sessions[session_id]
            names.discard(channel)
            if not names:
                del self.sessions[session_id]
                await self.channel_layer.group_discard(session_group(session_id), self.channel_name)

    async def catchup(self, channel: str, after: int) -> None:
        """Replay a session's persistent events after ``after``, at most
        ``TARSY_CATCHUP_LIMIT``, then ``catchup.overflow`` if there were more. Only
        ``session:<id>`` channels have stored events."""
        session_id = protocol.channel_session_id(channel)
        if session_id is None:
            return
        limit = settings.TARSY_CATCHUP_LIMIT
        frames, ids, overflow = await sync_to_async(_replay)(session_id, after, limit)
        for frame in frames:
            await self.send(text_data=frame)
        if ids:
            # Added to, not replaced: live copies of an earlier replay may still be queued.
            self.replayed.setdefault(session_id, set()).update(ids)
            self.replayed_through[session_id] = max(
                self.replayed_through.get(session_id, 0), max(ids)
            )
        if overflow:
            await self.send_json({"type": "catchup.overflow", "channel": channel, "has_more": True})

    # --- relay → client ---------------------------------------------------------------

    async def relay_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        if event["id"] in self.recent:
            return  # this event's copy for our other group: already handled
        self.recent.append(event["id"])
        session_id = uuid.UUID(str(event["session_id"]))
        to_session = session_id in self.sessions and self._unsent(session_id, event)
        listed = protocol.LIST_CHANNEL in self.subscribed
        to_list = listed and event["type"] in protocol.LIST_CHANNEL_TYPES
        await self._relay(event, to_session=to_session, to_list=to_list)
        if event["type"] in protocol.PROGRESS_SOURCES and (to_session or listed):
            await self._send_progress(event, to_session=to_session, listed=listed)

    async def _send_progress(
        self, event: dict[str, Any], *, to_session: bool, listed: bool
    ) -> None:
        """TARSy's progress events after the event they come from: session.progress on
        both channels, execution.progress on the session's."""
        for frame in await sync_to_async(_progress)(event):
            if to_session or (listed and frame["type"] == "session.progress"):
                await self.send(text_data=protocol.live_frame(frame))

    async def _relay(self, event: dict[str, Any], *, to_session: bool, to_list: bool) -> None:
        if not (to_session or to_list):
            return
        kind, stored = event["type"], event["payload"]
        if kind == SessionEventType.STREAM_CHUNK:
            # Saved text: only what the live copies have not brought.
            item_id = int(stored["event_id"])
            new = self.shown.extend(item_id, stored.get("offset"), stored.get("delta", ""))
            if not new:
                return
            event = {**event, "payload": {**stored, "delta": new}}
        payload = await sync_to_async(_translate)(event)
        if payload is None:
            return
        if to_session:
            if protocol.is_persistent(kind):
                await self.send(
                    text_data=protocol.live_frame({**payload, "db_event_id": event["id"]})
                )
            else:
                await self.send(text_data=protocol.live_frame(payload))
            await self._follow_streams(event)
        if to_list:  # TARSy's transient copy for the session list: no db_event_id
            await self.send(text_data=protocol.live_frame(payload))

    async def _follow_streams(self, event: dict[str, Any]) -> None:
        """A new streaming item is followed from its content on (with what streamed into
        it before its creation reached this socket); a completed one no more."""
        kind, stored = event["type"], event["payload"]
        item_id = int(stored.get("event_id") or 0)
        if kind == SessionEventType.TIMELINE_COMPLETED:
            self.shown.forget(item_id)
        elif (
            kind == SessionEventType.TIMELINE_CREATED
            and stored.get("status") == TimelineEventStatus.STREAMING
            and not self.shown.knows(item_id)
        ):
            length = len(stored.get("content") or "")
            self.shown.start(item_id, length)
            if early := relay.streamed_from(item_id, length):
                await self._send_delta(
                    event["session_id"], {"item_id": item_id, "offset": length, "text": early}
                )

    async def relay_delta(self, message: dict[str, Any]) -> None:
        """Streamed text, live from a worker."""
        delta = message["delta"]
        if uuid.UUID(delta["session_id"]) in self.sessions:
            await self._send_delta(delta["session_id"], delta)

    async def _send_delta(self, session_id: Any, delta: dict[str, Any]) -> None:
        item_id = int(delta["item_id"])
        new = self.shown.extend(item_id, int(delta["offset"]), delta["text"])
        if not new:
            return
        event = {
            "id": 0,
            "type": SessionEventType.STREAM_CHUNK,
            "session_id": str(session_id),
            "payload": {"event_id": item_id, "delta": new},
        }
        payload = await sync_to_async(_translate)(event)
        if payload is not None:
            await self.send(text_data=protocol.live_frame(payload))

    def _unsent(self, session_id: uuid.UUID, event: dict[str, Any]) -> bool:
        """Whether a live event of a subscribed session is news: not sent by a replay,
        and (a stream chunk) not older than what the replays showed."""
        through = self.replayed_through.get(session_id, 0)
        if not protocol.is_persistent(event["type"]):
            return event["id"] > through
        replayed = self.replayed.get(session_id)
        if not replayed:
            return True
        if event["id"] in replayed:
            replayed.discard(event["id"])
            return False
        if event["id"] > through:
            # A session's events arrive in id order: nothing older can repeat now.
            self.replayed.pop(session_id, None)
        return True


def _replay(session_id: uuid.UUID, after: int, limit: int) -> tuple[list[str], list[int], bool]:
    """Catch-up frames, never truncated, each with its ``db_event_id``. Events after
    ``after`` that have expired from the log (an ended session's, ``TARSY_EVENT_RETENTION``
    after it ended) cannot be replayed: that is an overflow, and the client reloads."""
    if selectors.events_pruned_after(after, session_id=session_id):
        return [], [], True
    rows = protocol.catchup_events(session_id, after=after, limit=limit + 1)
    overflow = len(rows) > limit
    frames, ids = [], []
    for row in rows[:limit]:
        event = {
            "id": row.id,
            "type": row.type,
            "session_id": row.session_id,
            "payload": row.payload,
        }
        payload = _translate(event)
        if payload is not None:
            frames.append(protocol.encode({**payload, "db_event_id": row.id}))
            ids.append(row.id)
    return frames, ids, overflow


def _progress(event: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return protocol.progress_payloads(event)
    except Exception:
        logger.exception("/api/v1/ws: no progress for event %s (%s)", event["id"], event["type"])
        return []


def _translate(event: dict[str, Any]) -> dict[str, Any] | None:
    # One row TARSy's shapes cannot express must not end every client's socket.
    try:
        return protocol.tarsy_payload(event)
    except Exception:
        logger.exception(
            "/api/v1/ws: event %s (%s) could not be translated", event["id"], event["type"]
        )
        return None


def _client_message(data: str | bytes | None) -> tuple[str, str, int | None] | None:
    """``(action, channel, last_event_id)``, or None for what TARSy's Go decoder rejects
    (not JSON, not an object, a field of the wrong type)."""
    try:
        # The protocol's messages are small and flat; anything else is not one of them.
        message = load_json(data or "", what="message", max_depth=4, max_chars=MESSAGE_LIMIT)
    except (ValueError, TypeError):
        return None
    if message is None:
        return "", "", None
    if not isinstance(message, dict):
        return None
    action = message.get("action") or ""
    channel = message.get("channel") or ""
    last_event_id = message.get("last_event_id")
    if not isinstance(action, str) or not isinstance(channel, str):
        return None
    if last_event_id is not None and (
        isinstance(last_event_id, bool)
        or not isinstance(last_event_id, int)
        or not -INT64 <= last_event_id < INT64
    ):
        return None
    return action, channel, last_event_id


def _still_allowed(scope: Mapping[str, Any]) -> bool:
    if scope.get("proxy_identity"):
        return True  # the proxy vouched for the handshake; it has no session to re-check
    if token := scope.get("api_token"):
        user = user_for_token(token)
        return user is not None and user.pk == scope["user"].pk
    return user_still_allowed(scope)


class BearerTokenMiddleware:
    """ASGI middleware inside ``AuthMiddlewareStack``: a WebSocket handshake may
    authenticate with ``Authorization: Bearer <token>`` (as the REST API does), or come
    through a trusted reverse proxy naming its user (``TARSY_TRUSTED_PROXIES``). A bad
    or revoked token refuses the socket even with a logged-in cookie, as the API does."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket":
            scope = await database_sync_to_async(_authenticate)(scope)
        return await self.application(scope, receive, send)


def _authenticate(scope: dict[str, Any]) -> dict[str, Any]:
    request = _handshake_request(scope)
    if identity := proxy_identity(request):
        return {**scope, "proxy_identity": identity}
    header = request.headers.get("Authorization", "")
    if not header:
        return scope
    scheme, _, token = header.partition(" ")
    token = token.strip()
    user = user_for_token(token) if scheme.lower() == "bearer" and token else None
    if user is None:
        return {**scope, "user": AnonymousUser()}
    # No browser session: the access check re-reads the token instead.
    return {**scope, "user": user, "api_token": token, "session": None}


def _handshake_request(scope: dict[str, Any]) -> HttpRequest:
    """The handshake's headers and peer address as an ``HttpRequest``, for the helpers
    that authenticate HTTP requests."""
    request = HttpRequest()
    client = scope.get("client") or ("", 0)
    request.META["REMOTE_ADDR"] = client[0] or ""
    for name, value in scope.get("headers", []):
        key = "HTTP_" + name.decode("latin1").upper().replace("-", "_")
        request.META[key] = value.decode("latin1")
    return request
