from __future__ import annotations

from django.urls import path

from web.views import chat as chat_views
from web.views import memories as memory_views
from web.views import review as review_views
from web.views import scoring as scoring_views
from web.views import sessions as views
from web.views import steering as steering_views
from web.views import trace as trace_views
from web.views import usage as usage_views

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/new/", views.session_new, name="new"),
    path("triage/", review_views.triage, name="triage"),
    path("triage/review/", review_views.triage_review, name="triage-review"),
    path("sessions/<uuid:session_id>/review/", review_views.session_review, name="review"),
    path("system/", views.system, name="system"),
    path("usage/", usage_views.usage_page, name="usage"),
    path("memories/", memory_views.memory_list, name="memories"),
    path("memories/<uuid:memory_id>/", memory_views.memory_detail, name="memory"),
    path("memories/<uuid:memory_id>/edit/", memory_views.memory_edit, name="memory-edit"),
    path(
        "memories/<uuid:memory_id>/deprecate/",
        memory_views.memory_deprecate,
        name="memory-deprecate",
    ),
    path("memories/<uuid:memory_id>/delete/", memory_views.memory_delete, name="memory-delete"),
    path("sessions/<uuid:session_id>/", views.session_detail, name="detail"),
    path("sessions/<uuid:session_id>/cancel/", views.session_cancel, name="cancel"),
    path("sessions/<uuid:session_id>/steer/", steering_views.session_steer, name="steer"),
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
    path(
        "sessions/<uuid:session_id>/trace/marks/",
        trace_views.trace_marks,
        name="trace-marks",
    ),
]
