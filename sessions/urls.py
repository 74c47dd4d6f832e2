from __future__ import annotations

from django.urls import path

from sessions import api, views

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/new/", views.session_new, name="new"),
    path("system/", views.system, name="system"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="detail"),
    path("sessions/<uuid:session_id>/cancel/", views.session_cancel, name="cancel"),
    path(
        "sessions/<uuid:session_id>/executions/<int:execution_id>/cancel/",
        views.execution_cancel,
        name="cancel-execution",
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
