"""The trace: every LLM call and MCP call, as recorded."""

from __future__ import annotations

from typing import Any

from django.db import models

from sessions.models.session import AgentExecution, AlertSession


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
    # A model is sent the whole conversation on every call, so storing each request
    # whole made an investigation's storage grow with the square of its steps. A call
    # that continues an earlier one of its execution (``extends``) stores only what it
    # adds: its request is the first ``shared_messages`` messages of the earlier call's
    # request followed by that call's answer (``answer_message``), then
    # ``request_messages``. Without ``extends``, ``request_messages`` is the whole request
    # (as in every row written before this field). ``sessions.selectors.trace.
    # request_messages`` puts a request back together.
    request_messages = models.JSONField(default=list)
    extends = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        # Only with its whole execution: a later call cannot be read without it.
        on_delete=models.RESTRICT,
        related_name="+",
    )
    # Null without ``extends``. Both fields are nullable so that adding them leaves the
    # (large) table as it is: SQLite would copy every row to add a NOT NULL column.
    shared_messages = models.PositiveIntegerField(null=True, blank=True)
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
            # The usage page filters every call by a time window (sessions/selectors/usage.py).
            models.Index(fields=["created_at"], name="llm_interaction_created"),
            # /metrics reads these columns of every call (api/metrics.py): an index
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
            # A page of sessions adds up its sessions' calls from the index alone, not
            # from rows that hold whole conversations (api/rest/shapes.session_stats).
            models.Index(
                fields=[
                    "session",
                    "input_tokens",
                    "output_tokens",
                    "total_tokens",
                    "estimated_cost_usd",
                ],
                name="llm_interaction_session_totals",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_name} {self.interaction_type}"


def answer_message(response_text: str, tool_calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A call's answer as the next request of its conversation carries it: the assistant
    message the controller appends (``agents/recorder.py``, ``message_to_json``)."""
    return {
        "role": "assistant",
        "content": response_text,
        "tool_calls": list(tool_calls),
        "tool_call_id": "",
        "tool_name": "",
    }


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
