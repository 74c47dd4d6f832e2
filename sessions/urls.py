from __future__ import annotations

from django.urls import path

from sessions import api, trace_views, usage_views, views

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/new/", views.session_new, name="new"),
    path("system/", views.system, name="system"),
    path("usage/", usage_views.usage_page, name="usage"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="detail"),
    path("sessions/<uuid:session_id>/cancel/", views.session_cancel, name="cancel"),
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
    path("sessions/<uuid:session_id>", api.session_detail, name="api-session-detail"),
    path("sessions/<uuid:session_id>/timeline", api.session_timeline, name="api-session-timeline"),
    path("sessions/<uuid:session_id>/cancel", api.session_cancel, name="api-session-cancel"),
    path(
        "sessions/<uuid:session_id>/executions/<int:execution_id>/cancel",
        api.execution_cancel,
        name="api-execution-cancel",
    ),
    path("system/mcp-servers", api.system_mcp_servers, name="api-system-mcp-servers"),
    path("health", api.health, name="api-health"),
]
