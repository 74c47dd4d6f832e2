"""The OpenAPI description of the API's bodies.

Routes build their JSON themselves (TARSy's null-versus-absent rules do not survive a
model round trip); these models only document it, and the fuzz test checks every
response against them. ``Opt[T]`` is TARSy's omitempty: the key is absent, never null.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

T = TypeVar("T")
Opt = Annotated[T | SkipJsonSchema[None], Field(default=None)]

SessionStatusName = Literal[
    "pending", "in_progress", "cancelling", "completed", "failed", "cancelled", "timed_out"
]
CostCompleteness = Literal["complete", "partial", "none"]


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- requests ---------------------------------------------------------------------------


class McpServerSelection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    tools: list[str] | None = None


class NativeTools(BaseModel):
    model_config = ConfigDict(extra="forbid")
    google_search: bool | None = None
    code_execution: bool | None = None
    url_context: bool | None = None


class McpSelection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    servers: list[McpServerSelection]
    native_tools: NativeTools | None = None


class BudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: int | None = Field(None, ge=1)
    cost_usd: float | None = Field(None, gt=0)
    wall_time: float | None = Field(None, gt=0, description="Seconds.")
    tool_calls: int | None = Field(None, ge=1)
    llm_calls: int | None = Field(None, ge=1)


class AlertIn(BaseModel):
    """``data`` is the alert's text; an object or array is accepted too and stored as
    indented JSON (our extension: TARSy takes a string only)."""

    model_config = ConfigDict(extra="forbid")
    data: str | dict[str, Any] | list[Any] = Field(
        description="The alert, at most 1 MiB (UTF-8 bytes)."
    )
    alert_type: str | None = Field(None, description="Empty: the configured default.")
    runbook: str | None = Field(None, description="A runbook URL on the allowlist, or text.")
    mcp: McpSelection | None = None
    slack_message_fingerprint: str | None = None
    fingerprint: str | None = Field(
        None,
        description="With the duplicate-alert cooldown on: what makes alerts the same, "
        "instead of the configured fields (at most 500 characters).",
    )
    force_new: bool | None = Field(
        None, description="Start a new investigation even if this alert repeats a recent one."
    )
    budget: BudgetIn | None = Field(
        None,
        description="Lower limits for this investigation than the configured budget "
        "(never higher).",
    )


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500)


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(description="The question, at most 100,000 characters.")


class ReviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_ids: list[str] = Field(min_length=1, max_length=50)
    action: Literal["claim", "unclaim", "complete", "reopen", "update_feedback", "acknowledge"]
    quality_rating: str | None = None
    action_taken: str | None = None
    investigation_feedback: str | None = None


# --- responses --------------------------------------------------------------------------


class Error(Model):
    message: str
    error: str = Field(description="The same text as message (kept for our first clients).")


class AlertAccepted(Model):
    session_id: str
    status: Literal["queued"]
    message: str
    # True: a repeat within the cooldown, recorded on ``session_id`` (defaults.dedup).
    deduplicated: bool = False
    repeat_count: int | None = None


class Pagination(Model):
    page: int
    page_size: int
    total_pages: int
    total_items: int


class ReviewFields(Model):
    review_status: str | None
    assignee: str | None
    quality_rating: str | None
    action_taken: str | None
    investigation_feedback: str | None
    feedback_edited: bool
    feedback_edited_by: str | None
    feedback_edited_at: datetime | None


class SessionListItem(ReviewFields):
    id: str
    alert_type: str | None
    chain_id: str | None
    status: SessionStatusName
    author: str | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    duration_ms: int | None
    error_message: str | None
    executive_summary: str | None
    llm_interaction_count: int
    mcp_interaction_count: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    estimated_cost_usd: Opt[float]
    cost_completeness: Opt[CostCompleteness]
    total_stages: int
    completed_stages: int
    has_parallel_stages: bool
    has_sub_agents: bool
    has_action_stages: bool
    actions_executed: bool | None
    chat_message_count: int
    provider_fallback_count: int
    current_stage_index: int | None
    current_stage_id: str | None
    matched_in_content: bool
    latest_score: int | None
    scoring_status: str | None


class SessionList(Model):
    sessions: list[SessionListItem]
    pagination: Pagination
    cost_estimation_enabled: bool


class ActiveSession(Model):
    id: str
    alert_type: str | None
    chain_id: str | None
    status: SessionStatusName
    author: str | None
    created_at: datetime
    started_at: datetime | None
    current_stage_index: int | None
    current_stage_id: str | None


class QueuedSession(Model):
    id: str
    alert_type: str | None
    chain_id: str | None
    status: Literal["pending"]
    author: str | None
    created_at: datetime
    queue_position: int


class ActiveSessions(Model):
    active: list[ActiveSession]
    queued: list[QueuedSession]


class FilterOptions(Model):
    alert_types: list[str]
    chain_ids: list[str]
    statuses: list[SessionStatusName]


class Execution(Model):
    execution_id: str
    agent_name: str
    agent_index: int
    status: str
    llm_backend: str | None
    llm_provider: str | None
    model_name: Opt[str]
    started_at: datetime | None
    completed_at: datetime | None
    duration_ms: int | None
    error_message: str | None
    input_tokens: int
    output_tokens: int
    total_tokens: int
    estimated_cost_usd: Opt[float]
    cost_completeness: Opt[CostCompleteness]
    unpriced_interaction_count: Opt[int]
    parent_execution_id: Opt[str]
    task: Opt[str]
    original_llm_provider: Opt[str]
    original_llm_backend: Opt[str]
    original_model_name: Opt[str]
    sub_agents: Opt[list[Execution]]


class StageOverview(Model):
    id: str
    stage_name: str
    stage_index: int
    stage_type: str
    status: str
    parallel_type: Literal["multi_agent", "replica"] | None
    expected_agent_count: int
    referenced_stage_id: Opt[str]
    started_at: datetime | None
    completed_at: datetime | None
    executions: Opt[list[Execution]]


class SessionDetail(ReviewFields):
    id: str
    alert_data: str
    alert_type: str | None
    status: SessionStatusName
    chain_id: str | None
    author: str | None
    error_message: str | None
    final_analysis: str | None
    executive_summary: str | None
    executive_summary_error: str | None
    runbook_url: str | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    duration_ms: int | None
    chat_enabled: bool
    chat_id: str | None
    chat_message_count: int
    total_stages: int
    completed_stages: int
    failed_stages: int
    has_parallel_stages: bool
    has_action_stages: bool
    actions_executed: bool | None
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_estimation_enabled: bool
    estimated_cost_usd: Opt[float]
    cost_completeness: Opt[CostCompleteness]
    unpriced_interaction_count: Opt[int]
    llm_interaction_count: int
    mcp_interaction_count: int
    current_stage_index: int | None
    current_stage_id: str | None
    latest_score: int | None
    scoring_status: str | None
    score_id: str | None
    slack_message_fingerprint: Opt[str]
    mcp_selection: Opt[dict[str, Any]]
    cancelled_by: Opt[str] = Field(None, description="Ours: who cancelled the session.")
    cancel_reason: Opt[str] = Field(None, description="Ours: the reason they gave.")
    repeat_count: int = Field(
        0, description="Ours: duplicate alerts recorded on this session (defaults.dedup)."
    )
    last_repeated_at: datetime | None = Field(
        None, description="Ours: when the last duplicate came in; null when none did."
    )
    budget: SessionBudgetOut | None = Field(
        None,
        description="Ours: the investigation's budget (limits, spent, which limit stopped "
        "it); null without one.",
    )
    stages: list[StageOverview]


class SessionBudgetOut(Model):
    limits: dict[str, float] = Field(
        description="tokens, cost_usd, wall_time (seconds), tool_calls, llm_calls: the "
        "configured ones, lowered where the alert asked."
    )
    spent: dict[str, float] = Field(
        description="The same keys: what the investigation spent (chat and scoring not counted)."
    )
    after_limit: str = Field(description="summarize or stop.")
    stopped_by: str | None = Field(
        description="The limit that stopped the investigation ('cost $0.50 of $0.50'), or null."
    )


class ChainStatistics(Model):
    total_stages: int
    completed_stages: int
    failed_stages: int
    current_stage_index: int | None


class SessionSummary(Model):
    session_id: str
    total_interactions: int
    llm_interactions: int
    mcp_interactions: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_estimation_enabled: bool
    estimated_cost_usd: Opt[float]
    cost_completeness: Opt[CostCompleteness]
    unpriced_interaction_count: Opt[int]
    total_duration_ms: int | None
    chain_statistics: ChainStatistics
    total_score: Opt[int]
    scoring_status: Opt[str]


class SessionStatusOut(Model):
    id: str
    status: SessionStatusName
    final_analysis: str | None
    executive_summary: str | None
    error_message: str | None


class TimelineItem(Model):
    id: str
    session_id: str
    stage_id: Opt[str]
    execution_id: Opt[str]
    parent_execution_id: Opt[str]
    sequence_number: Opt[int]
    created_at: datetime
    updated_at: datetime
    event_type: str
    status: str
    content: Opt[str]
    metadata: Opt[dict[str, Any]]
    edges: dict[str, Any]


class CancelOut(Model):
    session_id: str
    message: str


class ExecutionCancelOut(Model):
    session_id: str
    execution_id: str
    status: Literal["cancelling"]
    message: str


class ChatAccepted(Model):
    chat_id: str
    message_id: str
    stage_id: str | None


class ScoreAccepted(Model):
    score_id: str


class Score(Model):
    score_id: str
    total_score: int | None
    score_analysis: str | None
    tool_improvement_report: str | None
    failure_tags: list[str] | None
    prompt_hash: str | None
    score_triggered_by: str | None
    status: str
    stage_id: str | None
    started_at: datetime | None
    completed_at: datetime | None
    error_message: str | None


class ReviewResult(Model):
    session_id: str
    success: bool
    error: Opt[str]


class ReviewResults(Model):
    results: list[ReviewResult]


class TriagePage(Model):
    count: int
    page: int
    page_size: int
    total_pages: int
    sessions: list[SessionListItem]


class ReviewActivityItem(Model):
    id: str
    actor: str
    action: str
    from_status: str | None
    to_status: str
    quality_rating: Opt[str]
    note: Opt[str]
    investigation_feedback: Opt[str]
    created_at: datetime


class ReviewActivities(Model):
    activities: list[ReviewActivityItem]


class AlertType(Model):
    type: str
    chain_id: str
    description: str


class AlertTypes(Model):
    alert_types: list[AlertType]
    default_chain_id: str | None
    default_alert_type: str


class SystemWarningOut(Model):
    id: str
    category: str
    message: str
    details: str
    server_id: Opt[str]
    created_at: datetime


class SystemWarnings(Model):
    warnings: list[SystemWarningOut]


class McpTool(Model):
    name: str
    description: Opt[str]


class McpServerStatus(Model):
    id: str
    healthy: bool
    last_check: datetime | None
    tool_count: int
    tools: list[dict[str, Any]]
    error: str | None


class McpServers(Model):
    servers: list[McpServerStatus]


class HealthCheck(Model):
    status: Literal["healthy", "degraded", "unhealthy"]
    message: Opt[str]


class Health(Model):
    status: Literal["healthy", "degraded", "unhealthy"]
    version: str
    checks: dict[str, HealthCheck]
