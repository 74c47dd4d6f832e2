"""An investigation's budget, enforced (issue 23).

One ``SessionBudget`` per session run, shared by every agent of it: stage agents,
parallel agents, sub-agents, fallbacks, synthesis and summary. The recorder adds each
model call and tool call to it as it records them (agents/recorder.py); the iterating
controller asks ``exhausted`` before each model call and each tool call. The first to
find a limit reached records the stop (the session's ``budget_stop`` and a timeline
warning); from then on every running agent gets one forced conclusion without tools,
and the executor skips the rest of the chain (agents/executor.py, agents/stages.py).

It starts from what the session has already spent (a run resumed after a lost worker
counts the calls made before), and wall time counts from the session's start.
"""

from __future__ import annotations

import time

from agents.recorder import db
from sessions import services
from sessions.budget import Spent, limits_of, spent, stop_reason
from sessions.models import AlertSession


class SessionBudget:
    def __init__(
        self,
        limits: dict[str, float],
        *,
        lease: services.Lease,
        after_limit: str = "summarize",
        used: Spent | None = None,
        clock=time.monotonic,
    ) -> None:
        used = used or Spent()
        self.limits = limits
        self.after_limit = after_limit
        self.lease = lease
        self.tokens = used.tokens
        self.cost_usd = used.cost_usd
        self.tool_calls = used.tool_calls
        self.llm_calls = used.llm_calls
        self._clock = clock
        self._started = clock() - used.wall_time
        self.stopped = ""  # which limit stopped the investigation, in words

    @classmethod
    def of(cls, session: AlertSession, lease: services.Lease) -> SessionBudget | None:
        """The session's budget with what it has spent so far; None without one. Reads
        the database: call it through ``db``."""
        limits = limits_of(session)
        if not limits:
            return None
        after = (session.budget or {}).get("after_limit") or "summarize"
        return cls(limits, lease=lease, after_limit=after, used=spent(session))

    def spend_call(self, tokens: int, cost_usd: float | None) -> None:
        self.llm_calls += 1
        self.tokens += tokens or 0
        self.cost_usd += cost_usd or 0.0

    def spend_tool_call(self) -> None:
        self.tool_calls += 1

    def used(self, kind: str) -> float:
        if kind == "wall_time":
            return self._clock() - self._started
        return float(getattr(self, kind))

    async def exhausted(self) -> str:
        """Which limit is reached (``cost $0.50 of $0.50``), or "". The first caller to
        find one records the stop; the answer never changes back."""
        if self.stopped:
            return self.stopped
        for kind, limit in self.limits.items():
            used = self.used(kind)
            if used >= limit:
                # Set before the write: parallel agents of the same loop record it once.
                self.stopped = stop_reason(kind, used, limit)
                await db(services.session_budget_stop)(
                    lease=self.lease,
                    kind=kind,
                    reason=self.stopped,
                    after_limit=self.after_limit,
                )
                break
        return self.stopped

    @property
    def summarize_after(self) -> bool:
        """Whether the synthesis and executive summary still run after a stop."""
        return self.after_limit != "stop"
