"""Every write to the domain goes through here (``from sessions import services``).

Each state change and the ``SessionEvent`` describing it are written in one
transaction, so the event log never claims something that did not commit and never
misses something that did. ``event_publish`` is the only writer of the log.

**Leases.** A worker that claims a session gets a ``Lease``; every write it makes about
that session (items, chunks, messages, interactions, statuses) first renews the lease
inside the same transaction (``leases.hold``) and raises ``LeaseLost`` when someone else
has taken the session over: the reaper (a stalled worker), a timeout, a cancel. So a
worker that wakes up after losing its session writes nothing, however long it slept.
The reaper decides with one conditional UPDATE that takes the lease, then writes the
consequences under it, in the same transaction.

Modules: ``lifecycle`` (create, claim, end, reap), ``queue`` (tasks, recovery, worker
clusters), ``records`` (what a worker writes while it runs), ``leases``, ``events``.
"""

from sessions.services.events import event_publish, serialize_transaction
from sessions.services.leases import (
    Lease,
    LeaseLost,
    LeaseState,
    session_heartbeat,
    session_lease_status,
)
from sessions.services.lifecycle import (
    CANCEL_REASON_LIMIT,
    Claim,
    NotCancellable,
    execution_cancel,
    session_cancel,
    session_claim,
    session_create,
    session_end,
    sessions_time_out_orphans,
)
from sessions.services.queue import (
    SessionNotQueued,
    mcp_server_health_record,
    session_enqueue,
    sessions_dispatch_waiting,
    sessions_requeue_lost,
    transient_events_purge,
    worker_cluster_beat,
    worker_cluster_stopped,
    worker_clusters_bury,
)
from sessions.services.records import (
    execution_finish,
    execution_start,
    execution_switch_provider,
    llm_interaction_create,
    mcp_interaction_create,
    message_create,
    stage_finish,
    stage_start,
    timeline_event_add,
    timeline_event_chunk,
    timeline_event_complete,
    timeline_payload,
)

__all__ = [
    "CANCEL_REASON_LIMIT",
    "Claim",
    "Lease",
    "LeaseLost",
    "LeaseState",
    "NotCancellable",
    "SessionNotQueued",
    "event_publish",
    "execution_cancel",
    "execution_finish",
    "execution_start",
    "execution_switch_provider",
    "llm_interaction_create",
    "mcp_interaction_create",
    "mcp_server_health_record",
    "message_create",
    "serialize_transaction",
    "session_cancel",
    "session_claim",
    "session_create",
    "session_end",
    "session_enqueue",
    "session_heartbeat",
    "session_lease_status",
    "sessions_dispatch_waiting",
    "sessions_requeue_lost",
    "sessions_time_out_orphans",
    "stage_finish",
    "stage_start",
    "timeline_event_add",
    "timeline_event_chunk",
    "timeline_event_complete",
    "timeline_payload",
    "transient_events_purge",
    "worker_cluster_beat",
    "worker_cluster_stopped",
    "worker_clusters_bury",
]
