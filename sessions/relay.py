"""The event relay: one per daphne process.

It tails the event log (``SessionEvent.id > cursor``) and fans each event out through
the in-process channel layer to the consumers following that session, and session
status changes to the session list. Workers never talk to the channel layer: the
database is the only thing shared between processes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from sessions import selectors
from sessions.models import SessionEvent
from sessions.services import SESSION_STATUS

logger = logging.getLogger(__name__)

LIST_GROUP = "sessions"
BATCH = 1000


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
    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self.cursor = 0

    async def run(self) -> None:
        from asgiref.sync import sync_to_async

        load = sync_to_async(selectors.events_after, thread_sensitive=False)
        self.cursor = await sync_to_async(selectors.latest_event_id, thread_sensitive=False)()
        layer = get_channel_layer()
        while True:
            try:
                events = await load(self.cursor, limit=BATCH)
            except Exception:
                logger.exception("event relay: reading the event log failed; retrying")
                await asyncio.sleep(1)
                continue
            for event in events:
                message = {"type": "relay.event", "event": event_message(event)}
                await layer.group_send(session_group(event.session_id), message)
                if event.type == SESSION_STATUS:
                    await layer.group_send(LIST_GROUP, message)
                self.cursor = event.id
            if len(events) < BATCH:
                await asyncio.sleep(self.poll_interval)


_relay_task: asyncio.Task | None = None


def ensure_relay_running() -> None:
    """Start this process's relay on first use, in the server's event loop."""
    global _relay_task
    loop = asyncio.get_running_loop()
    # A relay from an event loop that has ended (tests run one loop each) is gone.
    if _relay_task is None or _relay_task.done() or _relay_task.get_loop() is not loop:
        relay = EventRelay(settings.TARSY_RELAY_POLL_INTERVAL)
        _relay_task = loop.create_task(relay.run(), name="tarsy-event-relay")
