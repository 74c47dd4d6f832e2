"""An investigation stopped by its budget (agents/budget.py decides when): the session
keeps which limit stopped it, and its timeline says so at once, in the same transaction."""

from __future__ import annotations

from django.db import transaction

from sessions.models import AlertSession, TimelineEvent, TimelineEventStatus, TimelineEventType
from sessions.services.leases import Lease, hold
from sessions.services.records import item_create

# What happens after the stop, as the timeline says it (``budget.after_limit``).
AFTER_LIMIT_WORDS = {
    "summarize": "the rest of the chain is skipped; the synthesis and executive summary still run",
    "stop": "the rest of the chain is skipped, synthesis and executive summary included",
}


def session_budget_stop(*, lease: Lease, kind: str, reason: str, after_limit: str) -> TimelineEvent:
    """``reason``: ``cost $0.50 of $0.50``. Kept on the session (the first stop only) and
    told on the timeline as a warning item."""
    with transaction.atomic():
        hold(lease)
        AlertSession.objects.filter(id=lease.session_id, budget_stop__isnull=True).update(
            budget_stop=reason
        )
        return item_create(
            session_id=lease.session_id,
            execution=None,
            sequence_number=None,
            event_type=TimelineEventType.WARNING,
            content=f"Stopped by budget: {reason}. The running agents conclude now without "
            f"tools; {AFTER_LIMIT_WORDS.get(after_limit, AFTER_LIMIT_WORDS['summarize'])}.",
            metadata={"source": "budget", "budget_limit": kind, "reason": reason},
            status=TimelineEventStatus.COMPLETED,
        )


def session_budget_skipped(*, lease: Lease, stages: list[str]) -> TimelineEvent:
    """The stages a budget stop left out, said once the chain has ended."""
    with transaction.atomic():
        hold(lease)
        return item_create(
            session_id=lease.session_id,
            execution=None,
            sequence_number=None,
            event_type=TimelineEventType.WARNING,
            content="Skipped by budget: " + ", ".join(stages),
            metadata={"source": "budget", "skipped_stages": stages},
            status=TimelineEventStatus.COMPLETED,
        )
