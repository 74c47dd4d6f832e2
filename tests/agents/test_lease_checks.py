"""A worker's lease keepers look at their leases together (agents/executor.py): one read
per round, however many sessions the worker runs."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from agents import executor
from sessions import services
from tests.conftest import running_session

pytestmark = pytest.mark.django_db(transaction=True)


async def test_keepers_that_look_together_are_answered_by_one_read(monkeypatch):
    leases = [(await sync_to_async(running_session)())[1] for _ in range(6)]
    reads: list[int] = []
    read = services.leases_status

    def counted(*, leases):
        reads.append(len(leases))
        return read(leases=leases)

    monkeypatch.setattr(services, "leases_status", counted)
    states = await asyncio.gather(*(executor._checks().status(lease) for lease in leases))
    assert reads == [6]
    assert [state.status for state in states] == ["in_progress"] * 6
    # A later round reads again; a failed read reaches every keeper that asked.
    monkeypatch.setattr(services, "leases_status", lambda *, leases: 1 / 0)
    results = await asyncio.gather(
        *(executor._checks().status(lease) for lease in leases[:2]), return_exceptions=True
    )
    assert [type(r) for r in results] == [ZeroDivisionError, ZeroDivisionError]
