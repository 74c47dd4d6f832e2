"""Admin views of the domain. History is read-only: editing it would corrupt the record."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from sessions.models import (
    AgentExecution,
    AlertSession,
    ApiToken,
    LLMInteraction,
    MCPInteraction,
    Message,
    SessionEvent,
    Stage,
    TimelineEvent,
    WorkerCluster,
)
from sessions.selectors import trace


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(AlertSession)
class AlertSessionAdmin(ReadOnlyAdmin):
    list_display = ("id", "alert_type", "status", "author", "created_at", "completed_at")
    list_filter = ("status", "alert_type")
    search_fields = ("id", "alert_data", "final_analysis")
    date_hierarchy = "created_at"


@admin.register(Stage)
class StageAdmin(ReadOnlyAdmin):
    list_display = ("session", "index", "name", "status", "started_at", "completed_at")
    list_filter = ("status",)


@admin.register(AgentExecution)
class AgentExecutionAdmin(ReadOnlyAdmin):
    list_display = ("session", "agent_name", "status", "llm_provider", "llm_backend", "model_name")
    list_filter = ("status", "llm_backend")


@admin.register(TimelineEvent)
class TimelineEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "session", "sequence_number", "event_type", "status", "created_at")
    list_filter = ("event_type", "status")


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "execution", "sequence_number", "role", "tool_name")
    list_filter = ("role",)


@admin.register(LLMInteraction)
class LLMInteractionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "session",
        "provider",
        "model_name",
        "interaction_type",
        "input_tokens",
        "output_tokens",
        "duration_ms",
        "error_code",
    )
    list_filter = ("provider", "backend", "interaction_type")
    # A call that continues an earlier one stores only what it adds; the page shows the
    # whole request it was sent, put back together.
    exclude = ("request_messages", "extends", "shared_messages")
    readonly_fields = ("whole_request",)

    @admin.display(description="Request messages")
    def whole_request(self, interaction: LLMInteraction) -> str:
        messages = trace.request_messages(interaction)
        return format_html("<pre>{}</pre>", json.dumps(messages, indent=2, ensure_ascii=False))


@admin.register(MCPInteraction)
class MCPInteractionAdmin(ReadOnlyAdmin):
    list_display = ("id", "session", "server_name", "tool_name", "is_error", "duration_ms")
    list_filter = ("server_name", "is_error")


@admin.register(SessionEvent)
class SessionEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "session", "type", "transient", "created_at")
    list_filter = ("type", "transient")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are created with ``manage.py create_api_token``; delete one here to revoke it."""

    list_display = ("prefix", "user", "created_at", "last_used_at")
    fields = ("prefix", "user", "created_at", "last_used_at")


@admin.register(WorkerCluster)
class WorkerClusterAdmin(ReadOnlyAdmin):
    """Running qclusters, as their supervisors last reported them."""

    list_display = ("host", "pid", "workers", "started_at", "heartbeat_at")
