"""The event relay: one per daphne process.

It tails the event log (``SessionEvent.id > cursor``) and fans each event out through
the in-process channel layer to the consumers following that session, and session
status changes to the session list. Workers never talk to the channel layer: the
database is the only thing shared between processes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from sessions import selectors
from sessions.models import SessionEvent, SessionEventType

logger = logging.getLogger(__name__)

LIST_GROUP = "sessions"
# What the session list follows: statuses (panels and rows), and what its rows show of a
# session's review and score.
LIST_EVENT_TYPES = (
    SessionEventType.SESSION_STATUS,
    SessionEventType.REVIEW_STATUS,
    SessionEventType.SCORE_UPDATED,
)
BATCH = 1000
GAP_GRACE = 2.0  # seconds to wait for an uncommitted event before skipping its id


def session_group(session_id: Any) -> str:
    return f"session_{str(session_id).replace('-', '')}"


def event_message(event: SessionEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "type": event.type,
        "session_id": str(event.session_id),
        "transient": event.transient,
        "payload": event.payload,
    }


class EventRelay:
    def __init__(
        self,
        poll_interval: float,
        *,
        gap_grace: float = GAP_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.poll_interval = poll_interval
        self.gap_grace = gap_grace
        self.clock = clock
        self.cursor = 0
        self.last_poll: float | None = None  # clock() of the last read of the log
        self._started = False  # a hole before the first event is history (deleted rows)
        self._gap_seen_at: float | None = None

    def deliverable(self, events: list[SessionEvent]) -> list[SessionEvent]:
        """The events up to the first hole in the ids, or past it once it is stale.

        PostgreSQL hands out ids when a row is inserted, not when it commits: event 11
        of one session can be visible while event 10 of another is still in flight.
        Moving the cursor past 10 would lose it for good, so the relay waits for a hole
        to fill — briefly, because a rolled-back transaction leaves one for ever.
        (SQLite commits one writer at a time, so its ids have no such holes.)
        """
        ready = []
        expected = self.cursor + 1
        for event in events:
            if event.id > expected and self._started and self.gap_grace > 0:
                now = self.clock()
                if self._gap_seen_at is None:
                    self._gap_seen_at = now
                if now - self._gap_seen_at < self.gap_grace:
                    break
            self._gap_seen_at = None
            self._started = True
            ready.append(event)
            expected = event.id + 1
        return ready

    async def run(self) -> None:
        from asgiref.sync import sync_to_async

        load = sync_to_async(selectors.events_after, thread_sensitive=False)
        self.cursor = await sync_to_async(selectors.latest_event_id, thread_sensitive=False)()
        layer = get_channel_layer()
        while True:
            try:
                events = await load(self.cursor, limit=BATCH)
                self.last_poll = self.clock()
            except Exception:
                logger.exception("event relay: reading the event log failed; retrying")
                await asyncio.sleep(1)
                continue
            for event in self.deliverable(events):
                message = {"type": "relay.event", "event": event_message(event)}
                await layer.group_send(session_group(event.session_id), message)
                if event.type in LIST_EVENT_TYPES:
                    await layer.group_send(LIST_GROUP, message)
                self.cursor = event.id
            if len(events) < BATCH:
                await asyncio.sleep(self.poll_interval)


_relay_task: asyncio.Task | None = None
_relay: EventRelay | None = None


def relay_health() -> tuple[bool, str]:
    """(healthy, what to say) for this process's relay, for /health."""
    if _relay_task is None or _relay is None:
        return True, "not started: it starts with the first live page in this process"
    if _relay_task.done():
        return False, "stopped; live pages in this process get no updates until a restart"
    if _relay.last_poll is None:
        return True, "starting"
    age = _relay.clock() - _relay.last_poll
    if age > max(5.0, 50 * _relay.poll_interval):
        return False, f"stalled: last read the event log {age:.1f} s ago"
    return True, f"last read the event log {age:.2f} s ago"


def ensure_relay_running() -> None:
    """Start this process's relay on first use, in the server's event loop."""
    global _relay_task, _relay
    loop = asyncio.get_running_loop()
    # A relay from an event loop that has ended (tests run one loop each) is gone.
    if _relay_task is None or _relay_task.done() or _relay_task.get_loop() is not loop:
        # SQLite commits one writer at a time, so its ids never have in-flight holes.
        grace = 0.0 if connection.vendor == "sqlite" else GAP_GRACE
        _relay = EventRelay(settings.TARSY_RELAY_POLL_INTERVAL, gap_grace=grace)
        _relay_task = loop.create_task(_relay.run(), name="tarsy-event-relay")
