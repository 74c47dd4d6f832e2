"""The event relay: one per daphne process.

It tails the event log and fans each event out through the in-process channel layer to
the consumers following that session, and list events to the session list. Workers never
talk to the channel layer: the database is the only thing shared between processes.

It reads the log when woken (sessions/wakeup.py: PostgreSQL NOTIFY, or a datagram from a
writer on this host under SQLite) and, in case a wake-up was lost, every
``TARSY_RELAY_POLL_INTERVAL`` seconds.

Streamed text comes the same two ways but carries its words (sessions/streams.py): the
relay hands each piece on at once as a ``relay.delta`` message and keeps what each item
streamed lately (live/streams.py), from which a page that loads or reconnects is caught
up past the last saved row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from live.metrics import RELAY_LAG
from live.streams import Tails
from sessions import selectors, streams, wakeup
from sessions.models import SessionEvent, SessionEventType

logger = logging.getLogger(__name__)

LIST_GROUP = "sessions"
# What the session list follows: statuses (panels and rows), and what its rows show of a
# session's review and score.
LIST_EVENT_TYPES = (
    SessionEventType.SESSION_STATUS,
    SessionEventType.REVIEW_STATUS,
    SessionEventType.SCORE_UPDATED,
    # Not shown by the list page; /api/v1/ws derives TARSy's session.progress from it.
    SessionEventType.STAGE_STATUS,
)
BATCH = 1000
# How long a skipped id is looked for again. PostgreSQL draws ids at insert, not commit:
# while one session's transaction is in flight, later ids of other sessions commit.
HOLE_GRACE = 300.0
MAX_HOLES = 1000
STARTUP_WINDOW = 100
_EXPIRE_EVERY = 60.0  # seconds between sweeps of the streams that went quiet
_COMPLETED_MEMORY = 10_000  # completed items whose late live pieces are ignored


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
        hole_grace: float = HOLE_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.poll_interval = poll_interval
        self.hole_grace = hole_grace
        self.clock = clock
        self.head = 0  # the highest id delivered
        self.holes: dict[int, float] = {}  # ids below head not seen yet → since when
        self.last_poll: float | None = None  # clock() of the last read of the log
        self.wake = asyncio.Event()
        self.listening: bool | None = None  # PostgreSQL: whether LISTEN is up
        self.tails = Tails(clock)
        self.completed: dict[int, None] = {}  # recently completed items, oldest first
        self.deltas: asyncio.Queue[streams.Delta] = asyncio.Queue()
        self.expired_at = clock()

    def accept(self, events: list[SessionEvent]) -> list[SessionEvent]:
        """The events of ``events`` (in id order) not delivered yet.

        Nothing waits for a hole: each session's events become visible in id order
        (services/events.py locks the session for each), so an event can be delivered
        as soon as it is seen, whatever other sessions' transactions are doing. An id
        skipped over is remembered and looked for again until ``hole_grace`` has passed:
        it may be another session's event whose transaction has not committed yet (or
        one rolled back, which leaves a hole for ever).
        """
        now = self.clock()
        fresh = []
        for event in events:
            if self.holes.pop(event.id, None) is None:
                if event.id <= self.head:
                    continue
                if self.hole_grace > 0:
                    for missing in range(max(self.head + 1, event.id - MAX_HOLES), event.id):
                        self.holes[missing] = now
                self.head = event.id
            fresh.append(event)
        if self.holes:
            recent = {i: t for i, t in self.holes.items() if now - t < self.hole_grace}
            self.holes = dict(sorted(recent.items())[-MAX_HOLES:])
        return fresh

    def take_delta(self, delta: streams.Delta) -> None:
        """A piece of streamed text, live from a worker: kept, and handed on in order."""
        if delta.item_id in self.completed:
            return  # late: its completion, with the whole text, has been handed on
        self.tails.add(delta.session_id, delta.item_id, delta.offset, delta.text)
        self.deltas.put_nowait(delta)

    def _saw(self, event: SessionEvent) -> None:
        """What a stored event tells the tails: saved text, or an item's end."""
        if event.type == SessionEventType.STREAM_CHUNK:
            payload = event.payload
            offset = payload.get("offset")
            if type(offset) is int and event.timeline_event_id not in self.completed:
                self.tails.add(
                    str(event.session_id), int(payload["event_id"]), offset, payload["delta"]
                )
        elif event.type == SessionEventType.TIMELINE_COMPLETED:
            item_id = int(event.payload["event_id"])
            self.tails.complete(item_id)
            self.completed[item_id] = None
            if len(self.completed) > _COMPLETED_MEMORY:
                del self.completed[next(iter(self.completed))]
        if self.clock() - self.expired_at > _EXPIRE_EVERY:
            self.expired_at = self.clock()
            self.tails.expire()

    async def _hand_on_deltas(self, layer: Any) -> None:
        while True:
            delta = await self.deltas.get()
            try:
                await layer.group_send(
                    session_group(delta.session_id),
                    {"type": "relay.delta", "delta": delta.as_message()},
                )
            except Exception:
                logger.exception("event relay: a stream delta could not be handed on")

    async def run(self) -> None:
        from asgiref.sync import sync_to_async

        load = sync_to_async(selectors.events_for_relay, thread_sensitive=False)
        start = sync_to_async(selectors.event_ids_near_head, thread_sensitive=False)
        self.head, present = await start(STARTUP_WINDOW if self.hole_grace > 0 else 0)
        # Recent ids below the head that are not there yet may still be in flight.
        now = self.clock()
        window = range(max(1, self.head - STARTUP_WINDOW + 1), self.head)
        self.holes = {i: now for i in window if i not in present}
        layer = get_channel_layer()
        assert layer is not None  # settings.CHANNEL_LAYERS
        deltas = asyncio.create_task(self._hand_on_deltas(layer), name="tarsy-relay-deltas")
        async with self._wake_ups(), _cancelled_at_exit(deltas):
            while True:
                self.wake.clear()
                try:
                    events = await load(self.head, list(self.holes), limit=BATCH)
                    self.last_poll = self.clock()
                except Exception:
                    logger.exception("event relay: reading the event log failed; retrying")
                    await asyncio.sleep(1)
                    continue
                for event in self.accept(events):
                    self._saw(event)
                    message = {"type": "relay.event", "event": event_message(event)}
                    await layer.group_send(session_group(event.session_id), message)
                    if event.type in LIST_EVENT_TYPES:
                        await layer.group_send(LIST_GROUP, message)
                    RELAY_LAG.observe(max(0.0, time.time() - event.created_at.timestamp()))
                if len(events) < BATCH:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.poll_interval):
                            await self.wake.wait()

    @contextlib.asynccontextmanager
    async def _wake_ups(self):
        if connection.vendor == "postgresql":
            listener = asyncio.create_task(self._listen(), name="tarsy-relay-listen")
            try:
                yield
            finally:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener  # its connection closed
            return
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Nudged(self), local_addr=("127.0.0.1", 0)
        )
        announced = wakeup.announce(transport.get_extra_info("sockname")[1])
        try:
            yield
        finally:
            transport.close()
            if announced is not None:
                wakeup.withdraw(announced)

    async def _listen(self) -> None:
        """LISTEN on a connection of its own; reconnect when it drops (meanwhile the
        relay still polls)."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    **_listen_params(), autocommit=True
                ) as listen:
                    await listen.execute(f"LISTEN {wakeup.CHANNEL}")
                    await listen.execute(f"LISTEN {streams.CHANNEL}")
                    self.listening = True
                    self.wake.set()  # whatever was written while not listening
                    async for notify in listen.notifies():
                        if notify.channel != streams.CHANNEL:
                            self.wake.set()
                        elif (delta := streams.decode(notify.payload)) is not None:
                            self.take_delta(delta)
            except Exception as exc:
                if self.listening is not False:
                    logger.warning("event relay: LISTEN failed (%s); polling until it is back", exc)
            self.listening = False
            await asyncio.sleep(1)


@contextlib.asynccontextmanager
async def _cancelled_at_exit(task: asyncio.Task):
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _Nudged(asyncio.DatagramProtocol):
    """Datagrams from this host's writers: a wake-up, or a signed piece of streamed text
    (anything else, or a bad signature, only wakes the relay: it reads the log)."""

    def __init__(self, relay: EventRelay) -> None:
        self.relay = relay

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if data.startswith(streams.DATAGRAM):
            delta = streams.decode_datagram(data)
            if delta is not None:
                self.relay.take_delta(delta)
                return
        self.relay.wake.set()


def _listen_params() -> dict[str, Any]:
    db = connection.settings_dict
    params = {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
    }
    libpq = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "options")
    params.update({k: v for k, v in db.get("OPTIONS", {}).items() if k in libpq})
    return {k: v for k, v in params.items() if v is not None}


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
    if age > max(5.0, 5 * _relay.poll_interval):
        return False, f"stalled: last read the event log {age:.1f} s ago"
    if _relay.listening is False:
        return False, (
            "PostgreSQL LISTEN is down: live updates come with the "
            f"{_relay.poll_interval:g} s safety poll until it reconnects"
        )
    return True, f"last read the event log {age:.2f} s ago"


def ensure_relay_running() -> None:
    """Start this process's relay on first use, in the server's event loop."""
    global _relay_task, _relay
    loop = asyncio.get_running_loop()
    # A relay from an event loop that has ended (tests run one loop each) is gone.
    if _relay_task is None or _relay_task.done() or _relay_task.get_loop() is not loop:
        # SQLite commits one writer at a time, so its ids never have in-flight holes.
        grace = 0.0 if connection.vendor == "sqlite" else HOLE_GRACE
        _relay = EventRelay(settings.TARSY_RELAY_POLL_INTERVAL, hole_grace=grace)
        _relay_task = loop.create_task(_relay.run(), name="tarsy-event-relay")


def streamed_after(item_id: int, saved: str) -> str:
    """An item's streamed text: ``saved`` (from its saved rows) and what this process's
    relay has seen stream after it."""
    return saved if _relay is None else _relay.tails.after(item_id, saved)


def streamed_from(item_id: int, offset: int) -> str | None:
    """What this process's relay has seen an item stream from ``offset`` on; None when
    it has not seen that far back."""
    return None if _relay is None else _relay.tails.text_from(item_id, offset)
