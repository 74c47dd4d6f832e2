"""Score badges: ≥ 80 green, ≥ 60 amber, below red; ``scoring…`` while one runs."""

from __future__ import annotations

from django import template

from sessions.models import ScoreStatus
from sessions.selectors.scoring import latest_score, scoring_context

register = template.Library()

GOOD, FAIR = 80, 60


@register.filter
def score_tone(score) -> str:
    if score.status in (ScoreStatus.PENDING, ScoreStatus.IN_PROGRESS):
        return "score-running"
    if score.status != ScoreStatus.COMPLETED:
        return "score-failed"
    if score.total_score >= GOOD:
        return "score-high"
    return "score-mid" if score.total_score >= FAIR else "score-low"


@register.inclusion_tag("sessions/partials/_score_badge.html")
def score_badge(session):
    """A list row's badge: the session's newest score (attached to the page's rows in
    one query by ``scoring_selectors.attach_latest_scores``)."""
    return {"score": latest_score(session)}


@register.inclusion_tag("sessions/partials/_score_badge.html")
def session_score_badge(session):
    """The session page's badge, always present (hidden when never scored) so that a
    live update has an element to replace."""
    return {"score": latest_score(session), "badge_id": "score-badge"}


@register.inclusion_tag("sessions/partials/_score.html", takes_context=True)
def scoring_section(context, session):
    return {**scoring_context(session), "csrf_token": context.get("csrf_token")}
