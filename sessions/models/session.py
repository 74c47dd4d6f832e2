"""Alert sessions and what happened in them: stages, agent executions, timeline items and
the conversation messages."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.db import models

if TYPE_CHECKING:
    from sessions.models.followups import SessionScore


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
    # SQLite: the id of this session's search row (its rowid in the full-text index), set
    # by a trigger when that row is written (migration 0013), never by the ORM. With it in
    # the indexes below, a search walks and counts sessions without looking each one's
    # search row up (sessions/search.py). Empty on PostgreSQL, whose search needs none.
    search_rowid = models.BigIntegerField(null=True, blank=True, editable=False)
    # Where the runbook came from when it was fetched (the alert's, or defaults.runbook).
    runbook_url = models.CharField(max_length=2000, blank=True)
    slack_message_fingerprint = models.CharField(max_length=500, blank=True)
    # What the investigation may spend (agents/budget.py): the configured limits the
    # alert accepted, as {"tokens", "cost_usd", "wall_time", "tool_calls", "llm_calls",
    # "after_limit"}; null: no limits. ``budget_stop`` says which one stopped it, when
    # one did ("cost $0.50 of $0.50"). Both nullable so that adding them leaves the table
    # as it is (SQLite copies every row to add a NOT NULL column); null reads as "".
    budget = models.JSONField(null=True, blank=True)
    budget_stop = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
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

    # Not columns: set on listed sessions by the selectors that list them, for their
    # templates, and absent otherwise (sessions/selectors/).
    latest_score_row: SessionScore | None
    current_stage: Stage | None
    current_stage_number: int
    queue_position: int

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # Each ends with search_rowid: a search filtered by these finds whether each
            # session matches from the index alone (sessions.search.matching_in_order).
            models.Index(
                fields=["status", "created_at", "search_rowid"], name="session_status_created"
            ),
            models.Index(fields=["created_at", "search_rowid"], name="session_created"),
            models.Index(
                fields=["alert_type", "created_at", "search_rowid"], name="session_alert_type"
            ),
            # From a search's few matches to their sessions (search.matching_gathered).
            models.Index(fields=["search_rowid"], name="session_search_rowid"),
            models.Index(fields=["status", "heartbeat_at"], name="session_status_heartbeat"),
            # The history's sortable columns (web/listing.py).
            models.Index(fields=["author", "created_at", "search_rowid"], name="session_author"),
            models.Index(fields=["chain_id"], name="session_chain"),
            models.Index(fields=["total_tokens"], name="session_tokens"),
            models.Index(fields=["estimated_cost_usd"], name="session_cost"),
            models.Index(
                fields=["review_status", "created_at", "search_rowid"],
                name="session_review_created",
            ),
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

    @property
    def label(self) -> str:
        """How a page names it: by its name, numbered where agents of its stage share a
        name (replicas of sessions stored before replicas were named ``Agent-1``…)."""
        if self.agent_name.endswith(f"-{self.agent_index}"):
            return self.agent_name
        if self.agent_index > 1 or self.stage.parallel_type == ParallelType.REPLICA:
            return f"{self.agent_name} #{self.agent_index}"
        return self.agent_name


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
    TASK_ASSIGNED = "task_assigned"  # what a dispatched sub-agent was asked to do
    SKILL_LOADED = "skill_loaded"  # a skill's text in the agent's prompt from the start
    MEMORY_INJECTED = "memory_injected"  # lessons of past investigations in its prompt
    WARNING = "warning"  # something went wrong around the investigation, which went on
    ALERT_REPEATED = "alert_repeated"  # duplicates of the alert, counted (defaults.dedup)
    STEERING = "steering"  # an SRE's note to the running agents (sessions/services/steering.py)


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
        indexes = [
            models.Index(fields=["session", "id"], name="timeline_session_id"),
            # The REST timeline's order, read a page at a time (selectors.session_timeline_page).
            models.Index(
                fields=["session", "sequence_number", "id"], name="timeline_session_order"
            ),
            # A page of sessions counts its fallbacks without reading long timelines.
            models.Index(fields=["session", "event_type"], name="timeline_session_type"),
        ]
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
