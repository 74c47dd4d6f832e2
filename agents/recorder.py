"""How agent code writes what happens: async wrappers over ``sessions.services``.

The worker runs a session inside ``asyncio.run``; the ORM is synchronous, so every
write hops to asgiref's single sync thread, which keeps one database connection and
the order of writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
import weakref
from dataclasses import asdict
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.conf import settings

from llm.types import ConversationMessage, ProviderConfig
from sessions import services, streams
from sessions.models import (
    AgentExecution,
    AlertSession,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services import Lease

logger = logging.getLogger(__name__)


def db(function):
    return sync_to_async(function, thread_sensitive=True)


def message_to_json(message: ConversationMessage) -> dict[str, Any]:
    data = asdict(message)
    data["role"] = str(message.role)
    return data


class Spending(Protocol):
    """What a call recorded is spent from (agents/budget.py's ``SessionBudget``)."""

    def spend_call(self, tokens: int, cost_usd: float | None) -> None: ...

    def spend_tool_call(self) -> None: ...


class Recorder:
    """Records one agent execution: its timeline items, messages and interactions.

    Every write goes under the session's lease and raises ``LeaseLost`` once the worker
    no longer holds the session.
    """

    def __init__(
        self,
        session: AlertSession,
        execution: AgentExecution,
        lease: Lease,
        budget: Spending | None = None,
    ) -> None:
        self.session = session
        self.execution = execution
        self.lease = lease
        # The session's budget (agents/budget.py): each call recorded is spent from it.
        self.budget = budget
        self._message_sequence = 0
        self._streams = _Streams(lease, session.id)
        # The latest call of each kind (an iteration, a summary…): what the next call of
        # the same conversation continues, so that only what it adds is stored.
        self._calls: dict[str, services.RecordedCall] = {}

    async def start_item(
        self,
        event_type: TimelineEventType,
        *,
        content: str = "",
        metadata: dict[str, Any] | None = None,
        status: TimelineEventStatus = TimelineEventStatus.STREAMING,
    ) -> TimelineEvent:
        await self._streams.flush()  # text streamed before this item shows before it
        return await db(services.timeline_event_add)(
            lease=self.lease,
            execution=self.execution,
            event_type=event_type,
            content=content,
            metadata=metadata,
            status=status,
        )

    async def add_item(
        self,
        event_type: TimelineEventType,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
    ) -> TimelineEvent:
        return await self.start_item(event_type, content=content, metadata=metadata, status=status)

    async def chunk(self, item: TimelineEvent, delta: str) -> None:
        await self._streams.add(item, delta)

    async def flush(self) -> None:
        """Write the streamed text still gathered (an interrupted stream keeps it)."""
        await self._streams.flush()

    async def complete_item(
        self,
        item: TimelineEvent,
        content: str,
        *,
        status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
        event_type: TimelineEventType | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TimelineEvent:
        # The completed item carries its whole text: what was still gathered is not needed.
        self._streams.drop(item)
        await self._streams.flush()
        return await db(services.timeline_event_complete)(
            lease=self.lease,
            event=item,
            content=content,
            status=status,
            event_type=event_type,
            metadata=metadata,
        )

    async def message(self, message: ConversationMessage) -> None:
        self._message_sequence += 1
        await db(services.message_create)(
            lease=self.lease,
            execution=self.execution,
            sequence_number=self._message_sequence,
            role=str(message.role),
            content=message.content,
            tool_calls=[
                {"id": call.id, "name": call.name, "arguments": call.arguments}
                for call in message.tool_calls
            ],
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
        )

    async def progress(self, phase: str, message: str) -> None:
        """TARSy's ``execution.progress``: investigating, gathering_info, distilling,
        concluding (api/protocol.py sends it on)."""
        await self._streams.flush()  # after the text streamed before it
        await db(services.execution_progress)(
            lease=self.lease, execution=self.execution, phase=phase, message=message
        )

    async def switch_provider(self, config: ProviderConfig, backend: str) -> None:
        self.execution = await db(services.execution_switch_provider)(
            lease=self.lease,
            execution=self.execution,
            llm_provider=config.name,
            llm_backend=backend,
            model_name=config.model,
        )

    async def llm_interaction(
        self, *, interaction_type: str, request_messages: list[dict[str, Any]], **fields: Any
    ) -> None:
        """Record one model call; ``request_messages`` is the whole request."""
        request = services.as_stored(request_messages)
        interaction = await db(services.llm_interaction_create)(
            lease=self.lease,
            execution=self.execution,
            earlier=tuple(self._calls.values()),
            interaction_type=interaction_type,
            request_messages=request,
            **fields,
        )
        self._calls[interaction_type] = services.RecordedCall.of(interaction, request)
        if self.budget is not None:
            cost = interaction.estimated_cost_usd
            self.budget.spend_call(interaction.total_tokens, None if cost is None else float(cost))

    async def mcp_interaction(self, **fields: Any) -> None:
        await db(services.mcp_interaction_create)(
            lease=self.lease, execution=self.execution, **fields
        )
        if self.budget is not None and fields.get("interaction_type") == "tool_call":
            self.budget.spend_tool_call()

    async def check_lease(self) -> None:
        """Raise ``LeaseLost`` now, rather than at the next write, if the session is gone:
        before a model call, so a worker that lost its session calls no model."""
        if await db(services.session_lease_status)(lease=self.lease) is None:
            raise services.LeaseLost(self.lease)


# The streams open under each lease: a stop saves what they hold before it ends the work
# (agents/executor.py), so that an item closed by a cancel keeps every word the pages saw.
_open_streams: dict[Lease, weakref.WeakSet[_Streams]] = {}


async def save_streams(lease: Lease) -> None:
    """Save the text every stream of ``lease`` holds unsaved, and send the pages nothing
    more: the work is being stopped, and its items will close with what is saved (best
    effort: a lease lost meanwhile saves nothing)."""
    for streams_ in list(_open_streams.get(lease, ())):
        streams_.halted = True
        with contextlib.suppress(Exception):
            await streams_.save()


def forget_streams(lease: Lease) -> None:
    """The work of ``lease`` has ended."""
    _open_streams.pop(lease, None)


class _Notifier:
    """On PostgreSQL streamed text leaves as ``NOTIFY`` payloads, which need a database
    connection. Sent through the database thread every write of the process waits for,
    they queued behind those writes (at 50 sessions, seconds). So they leave from a thread
    and connection of their own, every session of the event loop together, in order,
    without the model's stream waiting for them."""

    def __init__(self) -> None:
        self.pending: list[streams.Delta] = []
        self.sender: asyncio.Task[None] | None = None

    def send(self, deltas: list[streams.Delta]) -> None:
        self.pending.extend(deltas)
        if self.sender is None or self.sender.done():
            self.sender = asyncio.create_task(self._run(), name="stream-notify")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.pending:
            batch, self.pending = self.pending, []
            try:
                await loop.run_in_executor(_notify_thread(), streams.send_on_own_connection, batch)
            except Exception:
                # Best effort: the pages get these words from the next save.
                logger.warning(
                    "streamed text not sent live; the next save brings it", exc_info=True
                )


_notifiers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Notifier] = (
    weakref.WeakKeyDictionary()
)
_notify_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _notifier() -> _Notifier:
    loop = asyncio.get_running_loop()
    notifier = _notifiers.get(loop)
    if notifier is None:
        notifier = _notifiers[loop] = _Notifier()
    return notifier


def _notify_thread() -> concurrent.futures.ThreadPoolExecutor:
    global _notify_executor
    if _notify_executor is None:
        _notify_executor = concurrent.futures.ThreadPoolExecutor(1, "tarsy-notify")
    return _notify_executor


def _forget_notify_thread() -> None:  # a forked child has no such thread
    global _notify_executor
    _notify_executor = None


os.register_at_fork(after_in_child=_forget_notify_thread)


class _Stream:
    """One item's streamed text: what the pages have not been sent yet, and what the
    database has not saved yet (each with the character it starts at)."""

    def __init__(self, item: TimelineEvent) -> None:
        self.item = item
        self.unsent: list[str] = []
        self.sent_end = 0
        self.unsaved: list[str] = []
        self.saved_end = 0


class _Streams:
    """Streamed deltas, sent to the pages at most once per ``TARSY_STREAM_FLUSH_INTERVAL``
    and saved at most once per ``TARSY_STREAM_SAVE_INTERVAL``.

    A model sends many small deltas. Writing each as a transaction cost a worker ~2 ms
    apiece and, under SQLite, queued every stream of every session for the one write lock.
    So the words go to the relays directly (sessions/streams.py): the first delta after a
    quiet spell at once, the ones that follow within the interval together when it ends.
    The database gets the same text, with the same offsets, in one transaction per save
    interval (or sooner, when an item completes or another one starts): what a relay
    missed, and what a page loading later shows. Neither waits for the other, and the
    model's stream waits for neither: saves run beside it, and a lost lease found by one
    is raised at the agent's next delta or write.
    """

    def __init__(self, lease: Lease, session_id: Any) -> None:
        self.lease = lease
        self.session_id = str(session_id)
        self.streams: dict[int, _Stream] = {}
        self.sent_at = float("-inf")
        self.saved_at = float("-inf")
        self.send_timer: asyncio.Task | None = None
        self.save_timer: asyncio.Task | None = None
        self.failure: BaseException | None = None
        self.halted = False  # the work is being stopped: nothing more goes to the pages
        self.save_lock = asyncio.Lock()
        _open_streams.setdefault(lease, weakref.WeakSet()).add(self)

    async def add(self, item: TimelineEvent, delta: str) -> None:
        self._raise_failure()
        stream = self.streams.get(item.id)
        if stream is None:
            stream = self.streams[item.id] = _Stream(item)
        stream.unsent.append(delta)
        stream.unsaved.append(delta)
        now = time.monotonic()
        wait = self.sent_at + settings.TARSY_STREAM_FLUSH_INTERVAL - now
        if wait <= 0:
            await self._send()
        elif self.send_timer is None:
            self.send_timer = asyncio.create_task(self._send_later(wait))
        if self.save_timer is None:
            self.save_timer = asyncio.create_task(self._save_later())

    def drop(self, item: TimelineEvent) -> None:
        self.streams.pop(item.id, None)

    async def flush(self) -> None:
        """Send and save everything gathered, now."""
        self._raise_failure()
        await self._send()
        await self._save()

    async def save(self) -> None:
        """Save what is gathered now, without sending it (a stop is ending the work)."""
        await self._save()

    async def _send(self) -> None:
        deltas = []
        for stream in self.streams.values():
            if stream.unsent:
                text = "".join(stream.unsent)
                stream.unsent = []
                deltas.append(streams.Delta(self.session_id, stream.item.id, stream.sent_end, text))
                stream.sent_end += len(text)
        if not deltas or self.failure is not None or self.halted:
            return  # (a worker that lost or is ending its session shows nothing more)
        self.sent_at = time.monotonic()
        if streams.needs_database():
            _notifier().send(deltas)
            return
        try:
            streams.send(deltas)
        except Exception:
            # Best effort: the pages get these words from the next save.
            logger.warning("streamed text not sent live; the next save brings it", exc_info=True)

    async def _save(self) -> None:
        async with self.save_lock:
            chunks = []
            for stream in self.streams.values():
                if stream.unsaved:
                    text = "".join(stream.unsaved)
                    stream.unsaved = []
                    chunks.append((stream.item, text, stream.saved_end))
                    stream.saved_end += len(text)
            if not chunks:
                return
            try:
                await db(services.timeline_event_chunks)(lease=self.lease, chunks=chunks)
            finally:
                # The interval runs from the end of the write: when writes are slow (a
                # busy database), more text goes into each, and a session's write rate
                # falls instead of its queue growing.
                self.saved_at = time.monotonic()

    async def _send_later(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
            self._clear_timer("send_timer")
            await self._send()
        finally:
            self._clear_timer("send_timer")

    async def _save_later(self) -> None:
        try:
            async with self.save_lock:
                pass  # after the save in flight, if any
            await asyncio.sleep(
                max(0.0, self.saved_at + settings.TARSY_STREAM_SAVE_INTERVAL - time.monotonic())
            )
            self._clear_timer("save_timer")
            await self._save()
        except Exception as exc:  # LeaseLost above all: raised at the agent's next write
            self.failure = exc
        finally:
            self._clear_timer("save_timer")

    def _clear_timer(self, name: str) -> None:
        # Only its own: a delta arriving during this timer's action may have set another.
        if getattr(self, name) is asyncio.current_task():
            setattr(self, name, None)

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
