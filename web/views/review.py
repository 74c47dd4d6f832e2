"""The review pages: the review panel of a session page, and the triage page (``/triage/``)
where reviewers work through ended sessions, one at a time or in bulk."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.paginator import Paginator
from django.db.models import F, QuerySet
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sessions import services
from sessions.models import AlertSession, QualityRating, ReviewAction, ReviewStatus
from sessions.selectors import review as review_selectors
from sessions.services import (
    ReviewChange,
    ReviewConflict,
    ReviewNotFound,
    ReviewRejected,
    ReviewResult,
)
from web.views import HtmxHttpRequest

TRIAGE_PAGE_SIZE = 20
MAX_BULK = 50
CONFLICT_HINT = "someone changed this review first; what you see now is its current state"


@dataclass(frozen=True)
class Tab:
    key: str
    label: str
    status: str  # the review status of its sessions: what a bulk action expects
    actions: tuple[tuple[str, str], ...]  # the bulk actions offered: (action, label)


TABS = {
    tab.key: tab
    for tab in (
        Tab(
            "needs_review",
            "Needs review",
            ReviewStatus.NEEDS_REVIEW,
            (("claim", "Claim"), ("acknowledge", "Acknowledge"), ("complete", "Complete")),
        ),
        Tab(
            "in_progress",
            "In progress",
            ReviewStatus.IN_PROGRESS,
            (
                ("complete", "Complete"),
                ("acknowledge", "Acknowledge"),
                ("unclaim", "Unclaim"),
                ("claim", "Take over"),
            ),
        ),
        Tab(
            "mine",
            "Mine",
            ReviewStatus.IN_PROGRESS,
            (("complete", "Complete"), ("acknowledge", "Acknowledge"), ("unclaim", "Unclaim")),
        ),
        Tab(
            "reviewed",
            "Reviewed",
            ReviewStatus.REVIEWED,
            (("reopen", "Reopen"), ("update_feedback", "Update feedback")),
        ),
    )
}
DEFAULT_TAB = "needs_review"
RATINGS = [
    (QualityRating.ACCURATE, "Accurate"),
    (QualityRating.PARTIALLY_ACCURATE, "Partially accurate"),
    (QualityRating.INACCURATE, "Inaccurate"),
]
ACTION_DONE: dict[str, str] = {
    ReviewAction.CLAIM: "claimed",
    ReviewAction.UNCLAIM: "unclaimed",
    ReviewAction.COMPLETE: "completed",
    ReviewAction.REOPEN: "reopened",
    ReviewAction.UPDATE_FEEDBACK: "updated",
    ReviewAction.ACKNOWLEDGE: "acknowledged",
}


def _change_from_form(data: QueryDict) -> ReviewChange:
    """The action a form asks for. Only the fields its action takes are read: the forms
    carry every field, and an empty rating select means "not rated"."""
    action = data.get("action", "")
    if action not in (ReviewAction.COMPLETE, ReviewAction.UPDATE_FEEDBACK):
        return ReviewChange(action=action)
    rating = data.get("quality_rating") or None
    if action == ReviewAction.COMPLETE and rating is None:
        raise ReviewRejected("Choose a quality rating to complete a review.")
    return ReviewChange(
        action=action,
        quality_rating=rating,
        action_taken=data.get("action_taken"),
        investigation_feedback=data.get("investigation_feedback"),
    )


@require_POST
def session_review(request: HtmxHttpRequest, session_id) -> HttpResponse:
    """One action from a session page's review panel; htmx swaps the panel in place."""
    session = get_object_or_404(AlertSession, id=session_id)
    problem = done = ""
    try:
        change = _change_from_form(request.POST)
        session = services.review_apply(
            session_id=session.id,
            change=change,
            actor=request.user.get_username(),
            expected=request.POST.get("expected"),
        )
        done = f"Review {ACTION_DONE[change.action]}."
    except ReviewRejected as rejected:
        problem = str(rejected)
    except ReviewConflict:
        problem = f"Not done: {CONFLICT_HINT}."
        session.refresh_from_db()
    except ReviewNotFound:
        problem = "This session no longer exists."
    context = {"session": session, "review_problem": problem, "review_done": done}
    if request.htmx:
        return render(request, "sessions/partials/_review.html", context)
    if not problem:
        return redirect("sessions:detail", session_id=session.id)
    return render(request, "sessions/partials/_review_page.html", context, status=409)


@dataclass
class TriageView:
    tab: Tab
    page_number: int = 1
    problems: list[str] = field(default_factory=list)
    done: str = ""
    failures: list[tuple[AlertSession | None, str, str]] = field(default_factory=list)

    @classmethod
    def from_query(cls, params: QueryDict) -> TriageView:
        problems = []
        key = params.get("tab") or DEFAULT_TAB
        if key not in TABS:
            problems.append(
                f"Unknown tab {key[:30]!r}; the tabs are {', '.join(TABS)}. Showing needs review."
            )
            key = DEFAULT_TAB
        try:
            page = max(int(params.get("page") or 1), 1)
        except ValueError:
            problems.append("The page is a number; showing the first.")
            page = 1
        return cls(TABS[key], page, problems)

    def sessions(self, user: str) -> QuerySet[AlertSession]:
        if self.tab.key == "mine":
            return review_selectors.triage_sessions("in_progress", assignee=user)
        sessions = review_selectors.triage_sessions(self.tab.key)
        if self.tab.key == "reviewed":  # the latest reviews first
            return sessions.order_by(F("reviewed_at").desc(nulls_last=True), "-created_at")
        return sessions


def _render_triage(request: HtmxHttpRequest, view: TriageView, status: int = 200) -> HttpResponse:
    user = request.user.get_username()
    page = Paginator(view.sessions(user), TRIAGE_PAGE_SIZE).get_page(view.page_number)
    context: dict[str, Any] = {
        "view": view,
        "page": page,
        "tabs": TABS.values(),
        "counts": review_selectors.triage_counts(user=user),
        "ratings": RATINGS,
        "max_bulk": MAX_BULK,
    }
    if request.htmx:
        # htmx swaps only a 2xx answer; the problems are in the fragment itself.
        return render(request, "sessions/partials/_review_triage.html", context)
    return render(request, "sessions/triage.html", context, status=status)


@require_GET
def triage(request: HtmxHttpRequest) -> HttpResponse:
    return _render_triage(request, TriageView.from_query(request.GET))


@require_POST
def triage_review(request: HtmxHttpRequest) -> HttpResponse:
    """A row's action, or a bulk action on the ticked sessions of the current tab."""
    view = TriageView.from_query(request.POST)
    session_ids = request.POST.getlist("session_ids")
    if not session_ids:
        view.problems.append("Select at least one session.")
        return _render_triage(request, view, status=400)
    if len(session_ids) > MAX_BULK:
        view.problems.append(f"Select at most {MAX_BULK} sessions at a time.")
        return _render_triage(request, view, status=400)
    try:
        change = _change_from_form(request.POST)
        change.check()
    except ReviewRejected as rejected:
        view.problems.append(str(rejected))
        return _render_triage(request, view, status=400)
    results = services.reviews_apply(
        session_ids=session_ids,
        change=change,
        actor=request.user.get_username(),
        expected=request.POST.get("expected") or view.tab.status,
    )
    succeeded = sum(r.success for r in results)
    view.done = f"{succeeded} session{'s' if succeeded != 1 else ''} {ACTION_DONE[change.action]}."
    failed = [r for r in results if not r.success]
    by_id = {str(s.id): s for s in AlertSession.objects.filter(id__in=_uuids(failed))}
    for result in failed:
        reason = {
            "state conflict": CONFLICT_HINT,
            "resource not found": "no such session",
        }.get(result.error, result.error)
        view.failures.append((by_id.get(result.session_id), result.session_id, reason))
    return _render_triage(request, view, status=409 if failed else 200)


def _uuids(results: list[ReviewResult]) -> list[uuid.UUID]:
    ids = []
    for result in results:
        with contextlib.suppress(ValueError):
            ids.append(uuid.UUID(result.session_id))
    return ids
