from __future__ import annotations

from django.urls import path

from sessions import (
    api,
    chat_api,
    chat_views,
    review_api,
    review_views,
    scoring_views,
    trace_views,
    usage_views,
    views,
)

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/new/", views.session_new, name="new"),
    path("triage/", review_views.triage, name="triage"),
    path("triage/review/", review_views.triage_review, name="triage-review"),
    path("sessions/<uuid:session_id>/review/", review_views.session_review, name="review"),
    path("system/", views.system, name="system"),
    path("usage/", usage_views.usage_page, name="usage"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="detail"),
    path("sessions/<uuid:session_id>/cancel/", views.session_cancel, name="cancel"),
    path("sessions/<uuid:session_id>/chat/", chat_views.chat_box, name="chat-box"),
    path("sessions/<uuid:session_id>/chat/messages/", chat_views.chat_send, name="chat-send"),
    path("sessions/<uuid:session_id>/score/", scoring_views.session_rescore, name="score"),
    path("items/<int:item_id>/body/", views.item_body, name="item-body"),
    path(
        "sessions/<uuid:session_id>/executions/<int:execution_id>/cancel/",
        views.execution_cancel,
        name="cancel-execution",
    ),
    path("sessions/<uuid:session_id>/trace/", trace_views.session_trace, name="trace"),
    path(
        "sessions/<uuid:session_id>/trace/llm/<int:interaction_id>/",
        trace_views.trace_llm_interaction,
        name="trace-llm",
    ),
    path(
        "sessions/<uuid:session_id>/trace/mcp/<int:interaction_id>/",
        trace_views.trace_mcp_result,
        name="trace-mcp",
    ),
]

api_urlpatterns = [
    path("alerts", api.alert_create, name="api-alert-create"),
    path("sessions", api.session_list, name="api-session-list"),
    path(
        "sessions/<uuid:session_id>/score",
        scoring_views.api_session_score,
        name="api-session-score",
    ),
    path("sessions/review", review_api.review_update, name="api-review-update"),
    path("sessions/triage/<str:group>", review_api.triage_group, name="api-triage-group"),
    path(
        "sessions/<uuid:session_id>/review-activity",
        review_api.review_activity,
        name="api-review-activity",
    ),
    path("sessions/<uuid:session_id>", api.session_detail, name="api-session-detail"),
    path("sessions/<uuid:session_id>/timeline", api.session_timeline, name="api-session-timeline"),
    path("sessions/<uuid:session_id>/cancel", api.session_cancel, name="api-session-cancel"),
    path(
        "sessions/<uuid:session_id>/chat/messages",
        chat_api.chat_message_create,
        name="api-chat-message-create",
    ),
    path(
        "sessions/<uuid:session_id>/executions/<int:execution_id>/cancel",
        api.execution_cancel,
        name="api-execution-cancel",
    ),
    path("system/mcp-servers", api.system_mcp_servers, name="api-system-mcp-servers"),
    path("runbooks", api.runbook_list, name="api-runbooks"),
    path("health", api.health, name="api-health"),
]
