"""Scores on the session page (its Scoring section and badge), the Re-score button,
and TARSy's ``/api/v1/sessions/{id}/score``."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from sessions import scoring_selectors, services
from sessions.auth import api_error, api_view
from sessions.models import AlertSession

__all__ = ["api_session_score", "score_fragments", "session_rescore"]


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
def session_rescore(request: HttpRequest, session_id) -> HttpResponse:
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


@api_view
@require_http_methods(["GET", "POST"])
def api_session_score(request: HttpRequest, session_id) -> JsonResponse:
    """TARSy's route. GET: the newest score (any status), 404 when never scored. POST (no
    body): score again, whatever the chain's ``scoring.enabled`` says; 202 ``{score_id}``,
    409 while the session runs or a scoring is already queued or running."""
    session = AlertSession.objects.filter(id=session_id).first()
    if session is None:
        return api_error("resource not found", 404)
    if request.method == "GET":
        score = session.scores.first()
        if score is None:
            return api_error("resource not found", 404)
        return JsonResponse(scoring_selectors.score_json(score))
    try:
        score = services.score_request(
            session_id=session.id, triggered_by=request.user.get_username()
        )
    except services.NotScorable as refused:
        return api_error(str(refused), 409)
    return JsonResponse({"score_id": str(score.id)}, status=202)
