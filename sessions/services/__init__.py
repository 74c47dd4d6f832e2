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
clusters), ``records`` (what a worker writes while it runs), ``chat`` (follow-up
questions on ended sessions and their answers), ``review`` (the review workflow of
ended sessions), ``shutdown`` (what a stopping cluster hands back), ``leases``,
``events``.
"""

from sessions.services.budget import session_budget_skipped, session_budget_stop
from sessions.services.chat import (
    CHAT_CONTENT_LIMIT,
    ChatRejected,
    chat_message_claim,
    chat_message_end,
    chat_message_send,
    chat_messages_requeue_lost,
    chat_messages_time_out_orphans,
    chat_unavailable_reason,
)
from sessions.services.dedup import AlertAccepted, alert_accept
from sessions.services.events import event_publish, serialize_transaction
from sessions.services.leases import (
    ChatLease,
    FeedbackLease,
    Lease,
    LeaseLost,
    LeaseState,
    ScoreLease,
    leases_status,
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
    session_defer,
    session_end,
    sessions_time_out_orphans,
)
from sessions.services.memory import (
    MemoryRejected,
    memories_injected,
    memory_create,
    memory_deprecate,
    memory_edit,
    memory_reflection_apply,
    memory_reinforce,
    memory_remove,
    memory_review_rating,
)
from sessions.services.queue import (
    SessionNotQueued,
    event_log_prune,
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
    RecordedCall,
    as_stored,
    execution_finish,
    execution_progress,
    execution_start,
    execution_switch_provider,
    llm_interaction_create,
    mcp_interaction_create,
    message_create,
    stage_finish,
    stage_start,
    timeline_event_add,
    timeline_event_chunk,
    timeline_event_chunks,
    timeline_event_complete,
    timeline_payload,
)
from sessions.services.reflection import (
    feedback_reflection_claim,
    feedback_reflection_requeue_unstarted,
)
from sessions.services.review import (
    ReviewChange,
    ReviewConflict,
    ReviewNotFound,
    ReviewRejected,
    ReviewResult,
    review_apply,
    reviews_apply,
)
from sessions.services.scoring import (
    NotScorable,
    ScoringInProgress,
    score_claim,
    score_request,
    scores_requeue_lost,
    scores_time_out_orphans,
)
from sessions.services.shutdown import (
    chat_message_requeue,
    chat_message_requeue_unstarted,
    score_requeue,
    score_requeue_unstarted,
    session_requeue,
    session_requeue_unstarted,
    work_requeue_pulled,
)
from sessions.services.slack import slack_message_record
from sessions.services.steering import (
    STEERING_TEXT_LIMIT,
    SteeringRejected,
    steering_note_add,
    steering_notes_take,
)

__all__ = [
    "CANCEL_REASON_LIMIT",
    "CHAT_CONTENT_LIMIT",
    "STEERING_TEXT_LIMIT",
    "AlertAccepted",
    "ChatLease",
    "ChatRejected",
    "Claim",
    "FeedbackLease",
    "Lease",
    "LeaseLost",
    "LeaseState",
    "MemoryRejected",
    "NotCancellable",
    "NotScorable",
    "RecordedCall",
    "ReviewChange",
    "ReviewConflict",
    "ReviewNotFound",
    "ReviewRejected",
    "ReviewResult",
    "ScoreLease",
    "ScoringInProgress",
    "SessionNotQueued",
    "SteeringRejected",
    "alert_accept",
    "as_stored",
    "chat_message_claim",
    "chat_message_end",
    "chat_message_requeue",
    "chat_message_requeue_unstarted",
    "chat_message_send",
    "chat_messages_requeue_lost",
    "chat_messages_time_out_orphans",
    "chat_unavailable_reason",
    "event_log_prune",
    "event_publish",
    "execution_cancel",
    "execution_finish",
    "execution_progress",
    "execution_start",
    "execution_switch_provider",
    "feedback_reflection_claim",
    "feedback_reflection_requeue_unstarted",
    "leases_status",
    "llm_interaction_create",
    "mcp_interaction_create",
    "mcp_server_health_record",
    "memories_injected",
    "memory_create",
    "memory_deprecate",
    "memory_edit",
    "memory_reflection_apply",
    "memory_reinforce",
    "memory_remove",
    "memory_review_rating",
    "message_create",
    "review_apply",
    "reviews_apply",
    "score_claim",
    "score_request",
    "score_requeue",
    "score_requeue_unstarted",
    "scores_requeue_lost",
    "scores_time_out_orphans",
    "serialize_transaction",
    "session_budget_skipped",
    "session_budget_stop",
    "session_cancel",
    "session_claim",
    "session_create",
    "session_defer",
    "session_end",
    "session_enqueue",
    "session_heartbeat",
    "session_lease_status",
    "session_requeue",
    "session_requeue_unstarted",
    "sessions_dispatch_waiting",
    "sessions_requeue_lost",
    "sessions_time_out_orphans",
    "slack_message_record",
    "stage_finish",
    "stage_start",
    "steering_note_add",
    "steering_notes_take",
    "timeline_event_add",
    "timeline_event_chunk",
    "timeline_event_chunks",
    "timeline_event_complete",
    "timeline_payload",
    "transient_events_purge",
    "work_requeue_pulled",
    "worker_cluster_beat",
    "worker_cluster_stopped",
    "worker_clusters_bury",
]
