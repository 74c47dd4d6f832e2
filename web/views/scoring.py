"""Scores on the session page (its Scoring section and badge) and the Re-score button
(TARSy's ``/api/v1/sessions/{id}/score`` is in ``api.rest.followups``)."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from sessions import services
from sessions.models import AlertSession
from sessions.selectors import scoring as scoring_selectors
from web.views import HtmxHttpRequest

__all__ = ["score_fragments", "session_rescore"]


def score_fragments(session_id: Any) -> str:
    """What a ``session.score_updated`` event changes on the session page: the Scoring
    section and the header's badge, from the same partials as the page."""
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        return ""
    context = {**scoring_selectors.scoring_context(session), "live": True}
    return render_to_string("sessions/partials/_score.html", context) + render_to_string(
        "sessions/partials/_score_badge.html", {**context, "badge_id": "score-badge"}
    )


@require_POST
def session_rescore(request: HtmxHttpRequest, session_id) -> HttpResponse:
    """The Re-score button: queue a new scoring (the earlier ones stay as history). htmx
    gets the Scoring section back, with the reason when it was refused."""
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        return HttpResponse("This session does not exist.", status=404)
    problem, status = "", 200
    try:
        services.score_request(session_id=session.id, triggered_by=request.user.get_username())
    except services.NotScorable as refused:
        problem, status = f"Not re-scored: {refused}.", 409
    if not request.htmx:
        return redirect(reverse("sessions:detail", args=[session.id]) + "#scoring")
    return HttpResponse(
        render_to_string(
            "sessions/partials/_score.html",
            scoring_selectors.scoring_context(session, problem),
            request=request,
        ),
        status=status,
    )
