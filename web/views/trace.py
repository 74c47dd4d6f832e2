"""The trace page: what an engineer reads to debug an investigation, call by call.

The page itself lists summaries; each LLM conversation and each large tool result is a
partial that htmx loads when its line is opened (trace_selectors.py says why).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from sessions.models import AlertSession, LLMInteraction, MCPInteraction
from sessions.selectors import trace as trace_selectors


def session_trace(request: HttpRequest, session_id) -> HttpResponse:
    session = get_object_or_404(
        AlertSession.objects.defer("alert_data", "runbook", "final_analysis"), id=session_id
    )
    return render(
        request,
        "sessions/trace.html",
        {"session": session, "trace": trace_selectors.session_trace(session)},
    )


def trace_llm_interaction(request: HttpRequest, session_id, interaction_id: int) -> HttpResponse:
    interaction = get_object_or_404(LLMInteraction, id=interaction_id, session_id=session_id)
    return render(
        request,
        "sessions/partials/_trace_llm_body.html",
        {
            "interaction": interaction,
            "request_messages": trace_selectors.request_messages(interaction),
        },
    )


def trace_mcp_result(request: HttpRequest, session_id, interaction_id: int) -> HttpResponse:
    interaction = get_object_or_404(MCPInteraction, id=interaction_id, session_id=session_id)
    return render(request, "sessions/partials/_trace_mcp_result.html", {"interaction": interaction})
