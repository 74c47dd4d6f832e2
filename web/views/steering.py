"""The session page's steering form: a note for the running agents (sessions/services/steering.py)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST

from sessions import services
from sessions.models import AlertSession
from web.views import HtmxHttpRequest


def steer_box_html(
    session: AlertSession, *, error: str = "", text: str = "", sent: bool = False, request=None
) -> str:
    return render_to_string(
        "sessions/partials/_steer.html",
        {"session": session, "steer_error": error, "steer_text": text, "steer_sent": sent},
        request=request,
    )


@require_POST
def session_steer(request: HtmxHttpRequest, session_id) -> HttpResponse:
    """Add a note. htmx gets the box back (200 even when the note was refused: htmx swaps
    only successful responses, and the reason belongs in the box, with the text kept); a
    plain form goes back to the session page, or gets the box with the reason."""
    session = get_object_or_404(AlertSession, id=session_id)
    text = request.POST.get("text", "")
    try:
        services.steering_note_add(
            session_id=session.id, text=text, author=request.user.get_username()
        )
    except services.SteeringRejected as rejected:
        session.refresh_from_db()
        html = steer_box_html(session, error=str(rejected), text=text, request=request)
        response = HttpResponse(html, status=200 if request.htmx else rejected.status)
        if rejected.retry_after is not None and not request.htmx:
            response["Retry-After"] = str(rejected.retry_after)
        return response
    if request.htmx:
        return HttpResponse(steer_box_html(session, sent=True, request=request))
    return redirect("sessions:detail", session_id=session.id)
