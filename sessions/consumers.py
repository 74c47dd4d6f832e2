"""WebSocket consumers for the HTMX pages: they send HTML fragments.

Protocol: after connecting, the page sends ``{"action": "subscribe", "last_event_id": N}``
with the cursor it was rendered at (or last saw). The consumer replays what happened
after N from the event log, then streams live events, skipping any it already sent.
More than ``TARSY_CATCHUP_LIMIT`` persistent events to replay: it tells the page to
reload instead.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import QueryDict

from sessions import listing, live, scoring_views, selectors
from sessions.auth import user_still_allowed
from sessions.listing import ListState
from sessions.models import AgentExecution, AlertSession, ExecutionStatus, SessionEventType, Stage
from sessions.relay import (
    LIST_EVENT_TYPES,
    LIST_GROUP,
    ensure_relay_running,
    event_message,
    session_group,
)

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
RELOAD = '<div id="live-reload" data-reload="1"></div>'
# Stream chunks are small; allow many more of them than persistent events.
TRANSIENT_FACTOR = 50


class _LiveConsumer(AsyncWebsocketConsumer):
    group: str = ""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await self.setup():
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.subscribed = False
        self.buffer: list[dict[str, Any]] = []
        self.last_sent = 0
        await self.channel_layer.group_add(self.group, self.channel_name)
        ensure_relay_running()
        await self.accept()
        self.access_check = asyncio.create_task(self.check_access())

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if check := getattr(self, "access_check", None):
            check.cancel()

    async def check_access(self) -> None:
        """Close the socket once its login no longer holds (logout, deactivation, a
        password change): the page then reloads into the login form."""
        while True:
            await asyncio.sleep(settings.TARSY_WS_ACCESS_CHECK_INTERVAL)
            if not await sync_to_async(user_still_allowed)(self.scope):
                await self.close(code=CLOSE_UNAUTHENTICATED)
                return

    async def setup(self) -> bool:
        raise NotImplementedError

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = json.loads(text_data or "")
            action = message.get("action")
            cursor = int(message.get("last_event_id") or 0)
        except (ValueError, TypeError, AttributeError):
            await self.send(text_data=json.dumps({"error": "expected JSON with 'action'"}))
            return
        if action == "ping":
            await self.send(text_data='<div id="live-pong" hidden></div>')
            return
        if action != "subscribe" or self.subscribed:
            return
        events = await self.replay(cursor)
        if events is None:
            await self.send(text_data=RELOAD)
            await self.close()
            return
        self.last_sent = cursor
        for event in events:
            await self.deliver(event)
        for event in self.buffer:
            await self.deliver(event)
        self.buffer = []
        self.subscribed = True

    async def relay_event(self, message: dict[str, Any]) -> None:
        if not self.subscribed:
            self.buffer.append(message["event"])
            return
        await self.deliver(message["event"])

    async def deliver(self, event: dict[str, Any]) -> None:
        if event["id"] <= self.last_sent:
            return  # already replayed or sent live
        html = await self.render(event)
        self.last_sent = event["id"]
        if html:  # else nothing to show: the page's cursor may lag; a replay shows nothing too
            await self.send(text_data=html + live.cursor_fragment(event["id"]))

    async def replay(self, cursor: int) -> list[dict[str, Any]] | None:
        raise NotImplementedError

    async def render(self, event: dict[str, Any]) -> str:
        raise NotImplementedError


class SessionConsumer(_LiveConsumer):
    """Follows one session's page: status, timeline items and stream chunks."""

    async def setup(self) -> bool:
        self.session_id = self.scope["url_route"]["kwargs"]["session_id"]
        self.group = session_group(self.session_id)
        return await sync_to_async(AlertSession.objects.filter(id=self.session_id).exists)()

    async def replay(self, cursor: int) -> list[dict[str, Any]] | None:
        limit = settings.TARSY_CATCHUP_LIMIT

        def load() -> list[dict[str, Any]] | None:
            if selectors.persistent_event_count_after(cursor, session_id=self.session_id) > limit:
                return None
            events = selectors.events_after(
                cursor, session_id=self.session_id, limit=limit * TRANSIENT_FACTOR + 1
            )
            if len(events) > limit * TRANSIENT_FACTOR:
                return None
            return [event_message(e) for e in events]

        return await sync_to_async(load)()

    async def render(self, event: dict[str, Any]) -> str:
        return await sync_to_async(self._render)(event)

    def _render(self, event: dict[str, Any]) -> str:
        kind, payload = event["type"], event["payload"]
        if kind == SessionEventType.SESSION_STATUS:
            session = AlertSession.objects.get(id=self.session_id)
            html = live.session_fragments(event, session, selectors.session_usage(session))
            if session.is_terminal:  # it can be scored now
                html += scoring_views.score_fragments(self.session_id)
            return html
        if kind == SessionEventType.SCORE_UPDATED:
            return scoring_views.score_fragments(self.session_id)
        if kind == SessionEventType.SLACK_STATUS:
            session = AlertSession.objects.get(id=self.session_id)
            return live.slack_fragment(session)
        if kind == SessionEventType.STAGE_STATUS:
            stage = Stage.objects.select_related("session").filter(id=payload["stage_id"]).first()
            if stage is None:
                return ""
            created = payload["status"] == ExecutionStatus.ACTIVE
            html = live.stage_fragment(stage, created=created)
            if created:  # "stage 2 of 3" in the header moves on
                html += live.stage_progress_fragment(stage.session)
            return html
        if kind == SessionEventType.EXECUTION_STATUS:
            execution = (
                AgentExecution.objects.select_related("stage")
                .filter(id=payload["execution_id"])
                .first()
            )
            if execution is None:
                return ""
            created = payload["status"] == ExecutionStatus.ACTIVE and not payload.get(
                "cancel_requested"
            )
            return live.execution_fragment(execution, created=created)
        html = live.session_fragments(event, None)
        if kind == SessionEventType.TIMELINE_COMPLETED:
            # An LLM call has just been recorded with its item: the token meter moves.
            html += _usage_html(event["id"], self.session_id)
        return html


class SessionListConsumer(_LiveConsumer):
    """Follows the session list: the panels change as sessions move, and an ended
    session's row appears when it matches the page's filters (its query string)."""

    async def setup(self) -> bool:
        self.group = LIST_GROUP
        query = QueryDict(self.scope.get("query_string", b"").decode("utf-8", "replace"))
        self.state = ListState.from_query(query)
        return True

    async def replay(self, cursor: int) -> list[dict[str, Any]] | None:
        limit = settings.TARSY_CATCHUP_LIMIT

        def load() -> list[dict[str, Any]] | None:
            events = selectors.events_after(cursor, types=list(LIST_EVENT_TYPES), limit=limit + 1)
            if len(events) > limit:
                return None
            return [event_message(e) for e in events]

        return await sync_to_async(load)()

    async def render(self, event: dict[str, Any]) -> str:
        return await sync_to_async(self._render)(event)

    def _render(self, event: dict[str, Any]) -> str:
        session = AlertSession.objects.filter(id=event["session_id"]).first()
        if session is None:
            return ""
        if event["type"] != SessionEventType.SESSION_STATUS:
            if event["payload"].get("actor") == "system":
                return ""  # entering review as it ends: its session.status row shows that
            # A review or a score moved: the row shows it, wherever the page shows the row.
            return live.row_fragment(session, upsert=False)
        html = _panels_html(event["id"], session.id)
        if session.is_terminal and listing.matches(self.state, session.id):
            # Only the row depends on this page's filters: new at the top of page 1 of
            # the default view, else an update of a row the page already shows.
            html += live.row_fragment(session, upsert=self.state.is_default_view)
        return html


# Every list socket in this process gets the same panels for an event, and every socket
# on one session the same token meter: each is rendered once per event, not per socket.
@functools.lru_cache(maxsize=16)
def _panels_html(event_id: int, session_id: Any) -> str:
    return live.panels_fragment(selectors.session_panels())


@functools.lru_cache(maxsize=16)
def _usage_html(event_id: int, session_id: Any) -> str:
    return live.usage_fragment(selectors.session_usage_by_id(session_id))
