"""A worker process's engine: one event loop, in a daemon thread, that runs every session,
chat answer and scoring the process has taken, side by side.

An investigation is nearly all waiting (the model's stream, tool calls, the database), so
one loop runs many at once, where a process per investigation would hold its own MCP
servers and SDK clients for each. The work shares the loop's SDK clients (cached per
loop, llm/clients.py), the process's MCP hub (agents/tools/mcp_hub.py) and its database
thread (agents/recorder.py).

**Room.** ``TARSY_WORKER_SESSIONS`` investigations, and apart from them
``TARSY_WORKER_FOLLOWUPS`` chat answers and scorings: a process full of investigations
still answers questions. A task takes a slot (``reserve``) before it claims its work, so
claimed work never waits for room; the slot is given back when the work ends. Capacity is
read at each reservation (the settings may change under tests).

**Lifetime.** The loop is made on first use and forgotten in a forked child (threads do not
survive fork), as the MCP hub is. A process leaving django-q2's task loop (a stop's poison
pill, a recycle) waits in its exit for the work its engine runs: the process's end would
otherwise end that work mid-write, with nobody to say why. During a stop each piece of
work ends by the shutdown deadline (worker/supervision.py), so the wait is bounded; a
recycled worker takes no new work meanwhile and is replaced once it exits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import multiprocessing.util
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from django.conf import settings

logger = logging.getLogger(__name__)

Kind = Literal["session", "followup"]
SESSION: Kind = "session"
FOLLOWUP: Kind = "followup"  # chat answers and scorings

_WAIT_STEP = 0.2  # seconds between looks at ``give_up`` while waiting for room


def capacity(kind: Kind) -> int:
    if kind == SESSION:
        return int(settings.TARSY_WORKER_SESSIONS)
    return int(settings.TARSY_WORKER_FOLLOWUPS)


class Slot:
    """Room for one piece of work in an engine, held from before its claim to its end."""

    def __init__(self, engine: Engine, kind: Kind) -> None:
        self.engine = engine
        self.kind = kind
        self._released = False

    def release(self) -> None:
        """Give the room back (once; later calls do nothing)."""
        if not self._released:
            self._released = True
            self.engine._release(self.kind)


class Engine:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._room = threading.Condition()
        self._taken: dict[Kind, int] = {SESSION: 0, FOLLOWUP: 0}
        self._running: dict[str, int] = {}  # work id → how many runs of it (a duplicate)

    def reserve(
        self, kind: Kind, *, wait: bool = False, give_up: Callable[[], bool] = lambda: False
    ) -> Slot | None:
        """A slot for one piece of ``kind``, or None when there is no room: at once, or with
        ``wait`` once ``give_up()`` says to stop waiting."""
        with self._room:
            while self._taken[kind] >= capacity(kind):
                if not wait or give_up():
                    return None
                self._room.wait(_WAIT_STEP)
            self._taken[kind] += 1
        return Slot(self, kind)

    def run(
        self, slot: Slot, work_id: str, work: Coroutine[Any, Any, str]
    ) -> concurrent.futures.Future[str]:
        """Run ``work`` in the engine's loop, in ``slot`` (given back when it ends)."""
        with self._room:
            self._running[work_id] = self._running.get(work_id, 0) + 1
        try:
            return asyncio.run_coroutine_threadsafe(
                self._held(slot, work_id, work), self._ensure_loop()
            )
        except BaseException:
            work.close()
            self._ended(slot, work_id)
            raise

    def running(self) -> list[str]:
        """The work running now (its ids), oldest first."""
        with self._room:
            return list(self._running)

    def taken(self, kind: Kind) -> int:
        with self._room:
            return self._taken[kind]

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no work runs; False if some still does after ``timeout`` seconds."""
        with self._room:
            return self._room.wait_for(lambda: not self._running, timeout)

    async def _held(self, slot: Slot, work_id: str, work: Coroutine[Any, Any, str]) -> str:
        try:
            return await work
        finally:
            self._ended(slot, work_id)

    def _ended(self, slot: Slot, work_id: str) -> None:
        with self._room:
            left = self._running.get(work_id, 1) - 1
            if left:
                self._running[work_id] = left
            else:
                self._running.pop(work_id, None)
            self._room.notify_all()
        slot.release()

    def _release(self, kind: Kind) -> None:
        with self._room:
            self._taken[kind] -= 1
            self._room.notify_all()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready: concurrent.futures.Future[None] = concurrent.futures.Future()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set_result, None)
                    loop.run_forever()

                threading.Thread(target=run, name="tarsy-engine", daemon=True).start()
                ready.result()
                self._loop = loop
            return self._loop

    def drain(self) -> None:
        """Wait for the work still running (a worker process about to exit)."""
        running = self.running()
        if running:
            logger.warning(
                "waiting for %d piece(s) of work to end before this worker exits: %s",
                len(running),
                ", ".join(running),
            )
            self.wait_idle()


_engine: Engine | None = None
_engine_lock = threading.Lock()


def busy() -> float:
    """How much of this process's room for investigations is taken, 0 to 1 (0 before its
    engine is made)."""
    current = _engine
    if current is None:
        return 0.0
    return min(1.0, current.taken(SESSION) / max(1, capacity(SESSION)))


def engine() -> Engine:
    """This process's engine (a forked child gets a fresh one)."""
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = Engine()
            if multiprocessing.parent_process() is not None:
                # A django-q2 worker: run on its way out, after its task loop has ended and
                # before the interpreter's threads (daemon ones, like the loop's) are dropped.
                multiprocessing.util.Finalize(None, _engine.drain, exitpriority=100)
        return _engine


def _forget_after_fork() -> None:
    global _engine, _engine_lock
    _engine = None
    _engine_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
