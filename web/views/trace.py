"""The trace page: what an engineer reads to debug an investigation, call by call.

The page itself lists summaries; each LLM conversation and each large tool result is a
partial that htmx loads when its line is opened (trace_selectors.py says why).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from sessions.models import AlertSession, LLMInteraction, MCPInteraction
from sessions.selectors import trace as trace_selectors
from sessions.selectors import trace_marks as marks_selectors


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


def trace_marks(request: HttpRequest, session_id) -> HttpResponse:
    """What memory and skills each model call carried: loaded by the page once it is shown
    (it reads every stored request of the session), each line swapped in next to its
    interaction."""
    session = get_object_or_404(
        AlertSession.objects.only("id", "alert_type", "status"), id=session_id
    )
    return render(
        request,
        "sessions/partials/_trace_marks.html",
        {"marks": sorted(marks_selectors.session_trace_marks(session).items())},
    )
