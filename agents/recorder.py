"""How agent code writes what happens: async wrappers over ``sessions.services``.

The worker runs a session inside ``asyncio.run``; the ORM is synchronous, so every
write hops to asgiref's single sync thread, which keeps one database connection and
the order of writes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from llm.types import ConversationMessage, ProviderConfig
from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    TimelineEvent,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services import Lease


def db(function):
    return sync_to_async(function, thread_sensitive=True)


def message_to_json(message: ConversationMessage) -> dict[str, Any]:
    data = asdict(message)
    data["role"] = str(message.role)
    return data


class Recorder:
    """Records one agent execution: its timeline items, messages and interactions.

    Every write goes under the session's lease and raises ``LeaseLost`` once the worker
    no longer holds the session.
    """

    def __init__(self, session: AlertSession, execution: AgentExecution, lease: Lease) -> None:
        self.session = session
        self.execution = execution
        self.lease = lease
        self._timeline_sequence = 0
        self._message_sequence = 0
        self._streams = _Streams(lease)
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
        self._timeline_sequence += 1
        return await db(services.timeline_event_add)(
            lease=self.lease,
            execution=self.execution,
            sequence_number=self._timeline_sequence,
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

    async def mcp_interaction(self, **fields: Any) -> None:
        await db(services.mcp_interaction_create)(
            lease=self.lease, execution=self.execution, **fields
        )

    async def check_lease(self) -> None:
        """Raise ``LeaseLost`` now, rather than at the next write, if the session is gone:
        before a model call, so a worker that lost its session calls no model."""
        if await db(services.session_lease_status)(lease=self.lease) is None:
            raise services.LeaseLost(self.lease)


class _Streams:
    """Streamed deltas, written at most once per ``TARSY_STREAM_FLUSH_INTERVAL``.

    A model sends many small deltas; writing each as its own transaction and event row
    cost a worker about 2 ms apiece and made most of the event log. The first delta after
    a quiet spell is written at once; the ones that follow within the interval are
    gathered and written together when it ends (or sooner, when the item completes or
    another item starts), so text reaches the page at most one interval late.
    """

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.pending: dict[int, tuple[TimelineEvent, list[str]]] = {}
        self.written_at = float("-inf")
        self.timer: asyncio.Task | None = None
        self.failure: BaseException | None = None
        self.lock = asyncio.Lock()

    async def add(self, item: TimelineEvent, delta: str) -> None:
        self._raise_failure()
        self.pending.setdefault(item.id, (item, []))[1].append(delta)
        wait = self.written_at + settings.TARSY_STREAM_FLUSH_INTERVAL - time.monotonic()
        if wait <= 0 and not self.lock.locked():
            await self.flush()
        elif self.timer is None:
            self.timer = asyncio.create_task(self._flush_after(max(wait, 0.0)))

    def drop(self, item: TimelineEvent) -> None:
        self.pending.pop(item.id, None)

    async def flush(self) -> None:
        self._raise_failure()
        async with self.lock:
            if not self.pending:
                return
            chunks = [(item, "".join(parts)) for item, parts in self.pending.values()]
            self.pending = {}
            try:
                await db(services.timeline_event_chunks)(lease=self.lease, chunks=chunks)
            finally:
                # The interval runs from the end of the write: when writes are slow (a
                # busy database), more deltas go into each, and a session's write rate
                # falls instead of its queue growing.
                self.written_at = time.monotonic()

    async def _flush_after(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
            self.timer = None
            await self.flush()
        except Exception as exc:  # LeaseLost above all: raised at the agent's next write
            self.failure = exc
        finally:
            self.timer = None

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
