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
from collections import OrderedDict
from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import QueryDict

from live import relay
from live.metrics import WEBSOCKET_CONNECTIONS
from live.relay import (
    LIST_EVENT_TYPES,
    LIST_GROUP,
    ensure_relay_running,
    event_message,
    session_group,
)
from live.streams import Shown
from masking.bounded import load_json
from sessions import selectors
from sessions.auth import user_still_allowed
from sessions.models import (
    AgentExecution,
    AlertSession,
    ExecutionStatus,
    SessionEventType,
    Stage,
    StageType,
    TimelineEventStatus,
)
from web import fragments as live
from web import listing
from web.listing import ListState
from web.views import scoring as scoring_views

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
RELOAD = '<div id="live-reload" data-reload="1"></div>'
# Stream chunks are small; allow many more of them than persistent events.
TRANSIENT_FACTOR = 50
SENT_MEMORY = 20_000  # event ids a socket remembers having sent


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
        self.last_sent = self.floor = 0
        self.sent: OrderedDict[int, None] = OrderedDict()  # ids after the floor, newest last
        await self.channel_layer.group_add(self.group, self.channel_name)
        ensure_relay_running()
        await self.accept()
        WEBSOCKET_CONNECTIONS.labels(kind="page").inc()
        self.access_check = asyncio.create_task(self.check_access())

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if check := getattr(self, "access_check", None):
            WEBSOCKET_CONNECTIONS.labels(kind="page").dec()  # set once accepted and counted
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
            message = load_json(text_data or "", what="message", max_depth=4, max_chars=4096)
            action = message.get("action")
            cursor = int(message.get("last_event_id") or 0)
        except (ValueError, TypeError, AttributeError, OverflowError):  # 1e999 is infinite
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
        self.last_sent = self.floor = cursor
        for event in events:
            await self.deliver(event)
        for event in self.buffer:
            await self.deliver(event)
        self.buffer = []
        await self.caught_up()
        self.subscribed = True

    async def caught_up(self) -> None:
        """After the replay: bring what the log cannot replay up to date."""

    async def relay_event(self, message: dict[str, Any]) -> None:
        if not self.subscribed:
            self.buffer.append(message["event"])
            return
        await self.deliver(message["event"])

    async def relay_delta(self, message: dict[str, Any]) -> None:
        """Streamed text, live from a worker (no event id: it is not in the log yet)."""
        if not self.subscribed:
            self.buffer.append({"delta": message["delta"]})
            return
        await self.deliver_delta(message["delta"])

    async def deliver_delta(self, delta: dict[str, Any]) -> None:
        pass  # only the session page streams

    async def deliver(self, event: dict[str, Any]) -> None:
        if "delta" in event and "id" not in event:
            await self.deliver_delta(event["delta"])
            return
        # Not by "id <= last sent": on PostgreSQL another session's event can commit
        # (and be relayed) after a later id was sent.
        if event["id"] <= self.floor or event["id"] in self.sent:
            return  # in the page already, or replayed, or sent live
        self.sent[event["id"]] = None
        if len(self.sent) > SENT_MEMORY:
            self.sent.popitem(last=False)
        html = await self.render(event)
        self.last_sent = max(self.last_sent, event["id"])
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
        # What the page shows of each streaming item. Streamed text comes live from the
        # workers and again as saved rows (live/streams.py); until the replay is done it
        # follows no item, then every streaming item is sent whole (``caught_up``).
        self.shown = Shown()
        return await sync_to_async(AlertSession.objects.filter(id=self.session_id).exists)()

    async def caught_up(self) -> None:
        """Every streaming item whole, as saved and as this process's relay saw it stream
        since: the page may have been rendered, or have last heard, before either."""
        saved = await sync_to_async(selectors.session_streamed_text)(self.session_id)
        html = []
        for item_id, text in saved.items():
            text = relay.streamed_after(item_id, text)
            self.shown.start(item_id, len(text))
            html.append(live.stream_fragment(item_id, text, whole=True))
        if html:
            await self.send(text_data="".join(html))

    async def deliver_delta(self, delta: dict[str, Any]) -> None:
        item_id = int(delta["item_id"])
        new = self.shown.extend(item_id, int(delta["offset"]), delta["text"])
        if new:
            await self.send(text_data=live.stream_fragment(item_id, new))

    async def replay(self, cursor: int) -> list[dict[str, Any]] | None:
        limit = settings.TARSY_CATCHUP_LIMIT

        def load() -> list[dict[str, Any]] | None:
            if selectors.events_pruned_after(cursor, session_id=self.session_id):
                return None  # what it missed has expired from the log
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
        kind, payload = event["type"], event["payload"]
        if kind == SessionEventType.STREAM_CHUNK:
            item_id = int(payload["event_id"])
            new = self.shown.extend(item_id, payload.get("offset"), payload.get("delta", ""))
            return live.stream_fragment(item_id, new) if new else ""
        html = await sync_to_async(self._render)(event)
        if kind == SessionEventType.TIMELINE_CREATED:
            item_id, content = int(payload["event_id"]), payload.get("content") or ""
            if payload.get("status") == TimelineEventStatus.STREAMING:
                # The item is on the page now; what streamed into it before its creation
                # reached this socket, the relay kept.
                self.shown.start(item_id, len(content))
                early = relay.streamed_from(item_id, len(content))
                if early and (new := self.shown.extend(item_id, len(content), early)):
                    html += live.stream_fragment(item_id, new)
        elif kind == SessionEventType.TIMELINE_COMPLETED:
            self.shown.forget(int(payload["event_id"]))
        return html

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
            if stage is None or stage.stage_type == StageType.SCORING:
                return ""  # a scoring shows in the Scoring section, not the timeline
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
            if execution is None or execution.stage.stage_type == StageType.SCORING:
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
            if selectors.events_pruned_after(cursor):
                return None  # what it missed has expired from the log
            events = selectors.events_after(cursor, types=list(LIST_EVENT_TYPES), limit=limit + 1)
            if len(events) > limit:
                return None
            return [event_message(e) for e in events]

        return await sync_to_async(load)()

    async def render(self, event: dict[str, Any]) -> str:
        if event["type"] == SessionEventType.STAGE_STATUS:
            return ""  # for TARSy's clients' progress (api/ws.py); no row shows stages
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
            # Only the history depends on this page's filters. On page 1 of the default
            # order the session is new at the top: the section is sent again whole (its
            # count, the row pushed off the page). Elsewhere a row the page shows is
            # updated, and nothing moves under the reader.
            if self.state.is_default_view:
                html += _history_html(event["id"], self.state.params())
            else:
                html += live.row_fragment(session, upsert=False)
        return html


# Every list socket in this process gets the same panels for an event, and every socket
# on one session the same token meter: each is rendered once per event, not per socket.
@functools.lru_cache(maxsize=16)
def _panels_html(event_id: int, session_id: Any) -> str:
    return live.panels_fragment(selectors.session_panels())


@functools.lru_cache(maxsize=64)
def _history_html(event_id: int, params: str) -> str:
    state = ListState.from_query(QueryDict(params))
    return live.history_fragment(state, listing.history_page(state), listing.COLUMNS)


@functools.lru_cache(maxsize=16)
def _usage_html(event_id: int, session_id: Any) -> str:
    """The token meter, and the budget's meters when the session has a budget."""
    html = live.usage_fragment(selectors.session_usage_by_id(session_id))
    session = AlertSession.objects.filter(id=session_id).first()
    if session is not None and session.budget:
        html += live.budget_fragment(session)
    return html
