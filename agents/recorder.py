"""How agent code writes what happens: async wrappers over ``sessions.services``.

The worker runs a session inside ``asyncio.run``; the ORM is synchronous, so every
write hops to asgiref's single sync thread, which keeps one database connection and
the order of writes.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from asgiref.sync import sync_to_async

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

    async def start_item(
        self,
        event_type: TimelineEventType,
        *,
        content: str = "",
        metadata: dict[str, Any] | None = None,
        status: TimelineEventStatus = TimelineEventStatus.STREAMING,
    ) -> TimelineEvent:
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
        await db(services.timeline_event_chunk)(lease=self.lease, event=item, delta=delta)

    async def complete_item(
        self,
        item: TimelineEvent,
        content: str,
        *,
        status: TimelineEventStatus = TimelineEventStatus.COMPLETED,
        event_type: TimelineEventType | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TimelineEvent:
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

    async def llm_interaction(self, **fields: Any) -> None:
        await db(services.llm_interaction_create)(
            lease=self.lease, execution=self.execution, **fields
        )

    async def mcp_interaction(self, **fields: Any) -> None:
        await db(services.mcp_interaction_create)(
            lease=self.lease, execution=self.execution, **fields
        )

    async def check_lease(self) -> None:
        """Raise ``LeaseLost`` now, rather than at the next write, if the session is gone:
        before a model call, so a worker that lost its session calls no model."""
        if await db(services.session_lease_status)(lease=self.lease) is None:
            raise services.LeaseLost(self.lease)
