"""The domain: an alert session and everything that happened while investigating it.

Every state change is a row, written progressively by the worker; the event log
(``SessionEvent``) records each change in the same transaction so that browsers can
follow along and catch up after a disconnect.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class SessionStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


TERMINAL_SESSION_STATUSES = (
    SessionStatus.COMPLETED,
    SessionStatus.FAILED,
    SessionStatus.CANCELLED,
    SessionStatus.TIMED_OUT,
)
# A worker holds these sessions (or should: the reaper looks for the ones it lost).
RUNNING_SESSION_STATUSES = (SessionStatus.IN_PROGRESS, SessionStatus.CANCELLING)


class ExecutionStatus(models.TextChoices):
    PENDING = "pending"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class ReviewStatus(models.TextChoices):
    """Where an ended session is in the team's review; null while it runs."""

    NEEDS_REVIEW = "needs_review"
    IN_PROGRESS = "in_progress"
    REVIEWED = "reviewed"


class QualityRating(models.TextChoices):
    ACCURATE = "accurate"
    PARTIALLY_ACCURATE = "partially_accurate"
    INACCURATE = "inaccurate"


class AlertSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    alert_type = models.CharField(max_length=100)
    # Opaque text (JSON, YAML, plain…), passed to the LLM verbatim.
    alert_data = models.TextField()
    runbook = models.TextField(blank=True)
    # The alert's ``mcp`` override: {"servers": [{"name", "tools"?}], "native_tools"?}.
    mcp_selection = models.JSONField(null=True, blank=True)
    chain_id = models.CharField(max_length=100)
    status = models.CharField(
        max_length=20, choices=SessionStatus.choices, default=SessionStatus.PENDING
    )
    author = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    final_analysis = models.TextField(blank=True)
    error_message = models.TextField(blank=True)
    # Written last, fail-open: a session completes even when its summary could not be made.
    executive_summary = models.TextField(blank=True)
    executive_summary_error = models.TextField(blank=True)
    # Who cancelled it and why, written with the cancel request (not by the worker).
    cancelled_by = models.CharField(max_length=150, blank=True)
    cancel_reason = models.TextField(blank=True)
    worker_id = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The lease of whoever may write about this session: set when a worker claims it,
    # taken over by the reaper, cleared at the terminal status. Every write a worker
    # makes is conditional on still holding it (sessions/services/leases.py).
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    # When a task to run this pending session was last queued; null while it waits for
    # room under TARSY_MAX_CONCURRENT_SESSIONS with no task queued.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # The index of the first stage of the session's current run: 0, unless a run was
    # interrupted by its worker's shutdown and the session queued again
    # (TARSY_SHUTDOWN_REQUEUE). The new run's stages come after the interrupted run's,
    # which stay on the page; stage counters count from here.
    first_stage_index = models.PositiveIntegerField(default=0)
    # Running totals of the session's LLM calls, kept with each call (records.py) so the
    # list can show and sort by them without adding up every interaction.
    total_tokens = models.PositiveBigIntegerField(default=0)
    estimated_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    # Where the runbook came from when it was fetched (the alert's, or defaults.runbook).
    runbook_url = models.CharField(max_length=2000, blank=True)
    slack_message_fingerprint = models.CharField(max_length=500, blank=True)
    # Review (sessions/services/review.py): "" while the session runs, set when it ends,
    # then moved by people.
    review_status = models.CharField(max_length=20, choices=ReviewStatus.choices, blank=True)
    assignee = models.CharField(max_length=150, blank=True)
    assigned_at = models.DateTimeField(null=True, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    quality_rating = models.CharField(max_length=30, choices=QualityRating.choices, blank=True)
    action_taken = models.TextField(blank=True)
    investigation_feedback = models.TextField(blank=True)
    feedback_edited_by = models.CharField(max_length=150, blank=True)
    feedback_edited_at = models.DateTimeField(null=True, blank=True)
    # The highest event-log id of this session deleted by the log's expiry
    # (services.event_log_prune): a client resuming from before it must reload.
    events_pruned_through = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="session_status_created"),
            models.Index(fields=["status", "heartbeat_at"], name="session_status_heartbeat"),
            models.Index(fields=["created_at"], name="session_created"),
            models.Index(fields=["alert_type"], name="session_alert_type"),
            # The history's sortable columns (sessions/listing.py).
            models.Index(fields=["author"], name="session_author"),
            models.Index(fields=["chain_id"], name="session_chain"),
            models.Index(fields=["total_tokens"], name="session_tokens"),
            models.Index(fields=["estimated_cost_usd"], name="session_cost"),
            models.Index(fields=["review_status", "created_at"], name="session_review_created"),
            models.Index(fields=["assignee"], name="session_assignee"),
            models.Index(fields=["quality_rating"], name="session_quality_rating"),
            models.Index(fields=["events_pruned_through"], name="session_events_pruned"),
        ]

    def __str__(self) -> str:
        return f"{self.alert_type} {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_SESSION_STATUSES

    @property
    def duration_seconds(self) -> float | None:
        if not self.started_at:
            return None
        if not self.completed_at:
            return None
        return (self.completed_at - self.started_at).total_seconds()


class StageType(models.TextChoices):
    INVESTIGATION = "investigation"
    SYNTHESIS = "synthesis"
    ACTION = "action"
    EXEC_SUMMARY = "exec_summary"
    CHAT = "chat"
    SCORING = "scoring"


class ParallelType(models.TextChoices):
    NONE = "", "single agent"
    MULTI_AGENT = "multi_agent"
    REPLICA = "replica"


class Stage(models.Model):
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="stages")
    name = models.CharField(max_length=200)
    index = models.PositiveIntegerField()
    stage_type = models.CharField(
        max_length=20, choices=StageType.choices, default=StageType.INVESTIGATION
    )
    parallel_type = models.CharField(
        max_length=20, choices=ParallelType.choices, default=ParallelType.NONE, blank=True
    )
    success_policy = models.CharField(max_length=10, blank=True)
    expected_agent_count = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=20, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING
    )
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    error_message = models.TextField(blank=True)

    class Meta:
        ordering = ["session", "index"]
        constraints = [
            models.UniqueConstraint(fields=["session", "index"], name="stage_unique_index")
        ]

    def __str__(self) -> str:
        return f"{self.index}: {self.name} ({self.status})"


class AgentExecution(models.Model):
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="executions")
    stage = models.ForeignKey(Stage, on_delete=models.CASCADE, related_name="executions")
    agent_name = models.CharField(max_length=200)
    agent_index = models.PositiveIntegerField(default=1)
    # A sub-agent: the execution that dispatched it, and the task it was given.
    parent_execution = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="sub_agents"
    )
    task = models.TextField(blank=True)
    status = models.CharField(
        max_length=20, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING
    )
    # Set by a request to stop this execution alone; its worker notices and stops it.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(blank=True)
    llm_backend = models.CharField(max_length=50, blank=True)
    llm_provider = models.CharField(max_length=100, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    # Set when the agent fell back to another provider: what it started on.
    original_llm_provider = models.CharField(max_length=100, blank=True)
    original_llm_backend = models.CharField(max_length=50, blank=True)
    original_model_name = models.CharField(max_length=200, blank=True)
    iterations = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    final_analysis = models.TextField(blank=True)
    error_message = models.TextField(blank=True)

    class Meta:
        ordering = ["stage", "agent_index"]

    def __str__(self) -> str:
        return f"{self.agent_name} #{self.agent_index} ({self.status})"


class TimelineEventType(models.TextChoices):
    LLM_THINKING = "llm_thinking"
    LLM_RESPONSE = "llm_response"
    LLM_TOOL_CALL = "llm_tool_call"
    MCP_TOOL_SUMMARY = "mcp_tool_summary"
    CODE_EXECUTION = "code_execution"
    ERROR = "error"
    USER_QUESTION = "user_question"
    FINAL_ANALYSIS = "final_analysis"
    EXECUTIVE_SUMMARY = "executive_summary"
    PROVIDER_FALLBACK = "provider_fallback"
    WARNING = "warning"  # something went wrong around the investigation, which went on


class TimelineEventStatus(models.TextChoices):
    STREAMING = "streaming"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TimelineEvent(models.Model):
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="timeline")
    stage = models.ForeignKey(Stage, null=True, blank=True, on_delete=models.CASCADE)
    execution = models.ForeignKey(AgentExecution, null=True, blank=True, on_delete=models.CASCADE)
    sequence_number = models.PositiveIntegerField()
    event_type = models.CharField(max_length=30, choices=TimelineEventType.choices)
    status = models.CharField(
        max_length=20, choices=TimelineEventStatus.choices, default=TimelineEventStatus.COMPLETED
    )
    content = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["session", "id"], name="timeline_session_id")]
        constraints = [
            models.UniqueConstraint(
                fields=["execution", "sequence_number"], name="timeline_unique_sequence"
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.sequence_number} ({self.status})"


class MessageRole(models.TextChoices):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class Message(models.Model):
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="messages")
    execution = models.ForeignKey(AgentExecution, on_delete=models.CASCADE, related_name="messages")
    sequence_number = models.PositiveIntegerField()
    role = models.CharField(max_length=20, choices=MessageRole.choices)
    content = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    tool_name = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["execution", "sequence_number"]
        constraints = [
            models.UniqueConstraint(
                fields=["execution", "sequence_number"], name="message_unique_sequence"
            )
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.sequence_number}"


class LLMInteraction(models.Model):
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="llm_interactions"
    )
    execution = models.ForeignKey(
        AgentExecution, on_delete=models.CASCADE, related_name="llm_interactions"
    )
    interaction_type = models.CharField(max_length=30, default="iteration")
    provider = models.CharField(max_length=100)
    backend = models.CharField(max_length=50)
    model_name = models.CharField(max_length=200, blank=True)
    request_messages = models.JSONField(default=list)
    tools = models.JSONField(default=list, blank=True)
    response_text = models.TextField(blank=True)
    thinking = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    thinking_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    # From system.cost_estimation.model_rates; null when the model has no configured rate.
    estimated_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    error_code = models.CharField(max_length=50, blank=True)
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "LLM interaction"
        indexes = [
            # The usage page filters every call by a time window (sessions/usage.py).
            models.Index(fields=["created_at"], name="llm_interaction_created"),
            # /metrics reads these columns of every call (sessions/metrics.py): an index
            # holding them all spares it the rows' large prompts.
            models.Index(
                fields=[
                    "provider",
                    "model_name",
                    "error_code",
                    "duration_ms",
                    "input_tokens",
                    "output_tokens",
                    "thinking_tokens",
                ],
                name="llm_interaction_metrics",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_name} {self.interaction_type}"


class MCPInteraction(models.Model):
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="mcp_interactions"
    )
    execution = models.ForeignKey(
        AgentExecution, on_delete=models.CASCADE, related_name="mcp_interactions"
    )
    interaction_type = models.CharField(max_length=20, default="tool_call")  # or tool_list
    server_name = models.CharField(max_length=100)
    tool_name = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    result = models.TextField(blank=True)
    is_error = models.BooleanField(default=False)
    available_tools = models.JSONField(default=list, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "MCP interaction"
        indexes = [
            models.Index(
                fields=["interaction_type", "server_name", "tool_name", "duration_ms", "is_error"],
                name="mcp_interaction_metrics",
            )
        ]

    def __str__(self) -> str:
        return f"{self.server_name}.{self.tool_name} ({self.interaction_type})"


class SessionEventType(models.TextChoices):
    """What an event-log row says happened (the outbox's vocabulary)."""

    SESSION_STATUS = "session.status"
    STAGE_STATUS = "stage.status"
    EXECUTION_STATUS = "execution.status"
    TIMELINE_CREATED = "timeline_event.created"
    TIMELINE_COMPLETED = "timeline_event.completed"
    STREAM_CHUNK = "stream.chunk"
    REVIEW_STATUS = "review.status"
    SCORE_UPDATED = "session.score_updated"
    CHAT_CREATED = "chat.created"
    SLACK_STATUS = "slack.status"  # a Slack message of the session was posted, or failed


class SessionEvent(models.Model):
    """The outbox every live update flows through.

    ``id`` is the cursor clients resume from. Persistent events are written in the
    transaction of the change they describe; transient ones (stream chunks) are written
    on their own and expire after a TTL.
    """

    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=50)
    payload = models.JSONField(default=dict)
    transient = models.BooleanField(default=False)
    # Set on stream chunks so a page render can rebuild a streaming item's text.
    timeline_event_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["session", "id"], name="event_session_id"),
            models.Index(fields=["timeline_event_id", "id"], name="event_timeline_chunks"),
            models.Index(fields=["transient", "created_at"], name="event_transient_created"),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.type}"


class WorkerCluster(models.Model):
    """A running ``manage.py qcluster``: its supervisor beats here every
    ``TARSY_RECOVERY_INTERVAL``, so /health can tell whether anyone is taking work."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    workers = models.PositiveIntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField()

    class Meta:
        ordering = ["-heartbeat_at"]
        indexes = [models.Index(fields=["heartbeat_at"], name="cluster_heartbeat")]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"


class MCPServerHealth(models.Model):
    """The last health check of one MCP server: its tools, or why it could not list them.
    Written by the workers that use it (every 15 s) and the qcluster at start-up."""

    server_id = models.CharField(max_length=100, primary_key=True)
    healthy = models.BooleanField(default=False)
    tools = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    checked_at = models.DateTimeField()

    class Meta:
        ordering = ["server_id"]
        verbose_name = "MCP server health"
        verbose_name_plural = "MCP server health"

    def __str__(self) -> str:
        return f"{self.server_id} ({'healthy' if self.healthy else 'unhealthy'})"


class ApiToken(models.Model):
    """A bearer token for API clients. Only its SHA-256 is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class SessionSearch(models.Model):
    """What full-text search reads for one session: its alert, analysis, executive summary
    and timeline, written at submission and again when the session ends.

    The index is the database's own (sessions/search.py): an FTS5 table kept by triggers
    on SQLite, a GIN expression index on PostgreSQL; both created in migration 0006.
    """

    session = models.OneToOneField(AlertSession, on_delete=models.CASCADE, related_name="search")
    body = models.TextField()

    def __str__(self) -> str:
        return f"search text of {self.session_id}"


class ReviewAction(models.TextChoices):
    CLAIM = "claim"
    UNCLAIM = "unclaim"
    COMPLETE = "complete"
    REOPEN = "reopen"
    UPDATE_FEEDBACK = "update_feedback"
    ACKNOWLEDGE = "acknowledge"


class ReviewActivity(models.Model):
    """One step of a session's review, in the order they happened."""

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="review_activities"
    )
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=20, choices=ReviewAction.choices)
    from_status = models.CharField(max_length=20, blank=True)  # "": none yet
    to_status = models.CharField(max_length=20)
    quality_rating = models.CharField(max_length=30, blank=True)
    note = models.TextField(blank=True)  # the action taken, as written with this step
    investigation_feedback = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["session", "created_at"], name="review_session_created")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.from_status} -> {self.to_status}"


class Chat(models.Model):
    """A session's follow-up conversation; one per session, made by its first question."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.OneToOneField(AlertSession, on_delete=models.CASCADE, related_name="chat")
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"chat on {self.session_id}"


class ChatMessageStatus(models.TextChoices):
    PENDING = "pending"  # queued for a worker
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


OPEN_CHAT_MESSAGE_STATUSES = (
    ChatMessageStatus.PENDING,
    ChatMessageStatus.RUNNING,
    ChatMessageStatus.CANCELLING,
)


class ChatMessage(models.Model):
    """A question asked in a chat, and the state of its answer (a ``chat`` stage)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="chat_messages"
    )
    content = models.TextField()
    author = models.CharField(max_length=150, blank=True)
    stage = models.OneToOneField(
        Stage, null=True, blank=True, on_delete=models.SET_NULL, related_name="chat_message"
    )
    status = models.CharField(
        max_length=20, choices=ChatMessageStatus.choices, default=ChatMessageStatus.PENDING
    )
    error_message = models.TextField(blank=True)
    cancelled_by = models.CharField(max_length=150, blank=True)
    # The worker answering it holds this lease, as a session's worker holds the session's.
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="chat_status_heartbeat")]
        constraints = [
            # One answer at a time per session: the database refuses a second open one.
            models.UniqueConstraint(
                fields=["chat"],
                condition=models.Q(status__in=["pending", "running", "cancelling"]),
                name="chat_one_open_message",
            )
        ]

    def __str__(self) -> str:
        return f"chat message {self.id} ({self.status})"


class ScoreStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class SessionScore(models.Model):
    """One scoring of a session; re-scoring adds a row, earlier ones stay as history."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(AlertSession, on_delete=models.CASCADE, related_name="scores")
    status = models.CharField(
        max_length=20, choices=ScoreStatus.choices, default=ScoreStatus.PENDING
    )
    total_score = models.PositiveSmallIntegerField(null=True, blank=True)
    score_analysis = models.TextField(blank=True)
    tool_improvement_report = models.TextField(blank=True)
    failure_tags = models.JSONField(default=list, blank=True)
    prompt_hash = models.CharField(max_length=64, blank=True)
    score_triggered_by = models.CharField(max_length=150, blank=True)
    stage = models.OneToOneField(
        Stage, null=True, blank=True, on_delete=models.SET_NULL, related_name="score"
    )
    error_message = models.TextField(blank=True)
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["session", "created_at"], name="score_session_created"),
            models.Index(fields=["status", "heartbeat_at"], name="score_status_heartbeat"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status__in=["pending", "in_progress"]),
                name="score_one_open_per_session",
            )
        ]

    def __str__(self) -> str:
        return f"score of {self.session_id}: {self.total_score} ({self.status})"


class SlackMessage(models.Model):
    """What TARSy posted to Slack about a session (or why it could not)."""

    class Kind(models.TextChoices):
        START = "start"
        END = "end"

    class Status(models.TextChoices):
        SENT = "sent"
        FAILED = "failed"

    session = models.ForeignKey(
        AlertSession, on_delete=models.CASCADE, related_name="slack_messages"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices)
    channel = models.CharField(max_length=100, blank=True)
    thread_ts = models.CharField(max_length=50, blank=True)
    ts = models.CharField(max_length=50, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # A re-run task finds its message posted and does not post it again.
            models.UniqueConstraint(fields=["session", "kind"], name="slack_one_per_kind")
        ]

    def __str__(self) -> str:
        return f"slack {self.kind} for {self.session_id} ({self.status})"
