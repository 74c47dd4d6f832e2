"""The review workflow of ended sessions: who looks at each, and what they found.

A session enters review when it ends (``review_on_end``); people then move it with the
actions of ``ReviewAction`` (``review_apply``). Each action is a compare-and-set UPDATE
on ``review_status``, tried from each state the action allows in turn: the row count
decides, so two reviewers racing for one state get one success and one
``ReviewConflict``. The change, its ``ReviewActivity`` rows and its ``review.status``
event are written in one transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from masking import mask_alert
from sessions.models import (
    AlertSession,
    QualityRating,
    ReviewAction,
    ReviewActivity,
    ReviewStatus,
    SessionEventType,
    SessionStatus,
)
from sessions.services.events import event_publish
from sessions.services.memory import memory_review_rating
from sessions.services.reflection import feedback_reflection_request

# Per text field (action taken, feedback): a review note, not a document.
REVIEW_TEXT_LIMIT = 20_000
SYSTEM_ACTOR = "system"
NOT_IN_REVIEW = ""  # review_status while the session runs (TARSy's NULL)


class ReviewRejected(Exception):
    """The request itself is wrong (a rating that does not exist, nothing to update…)."""


class ReviewConflict(Exception):
    """The session is not in a state the action applies to (any more)."""

    def __init__(self) -> None:
        super().__init__("state conflict")


class ReviewNotFound(Exception):
    def __init__(self) -> None:
        super().__init__("resource not found")


@dataclass(frozen=True)
class ReviewChange:
    """One action and its fields; ``None`` means the field was not sent."""

    action: str
    quality_rating: str | None = None
    action_taken: str | None = None
    investigation_feedback: str | None = None

    def check(self) -> None:
        """Raise ``ReviewRejected`` naming what is wrong with the request."""
        if self.action not in ReviewAction.values:
            raise ReviewRejected(
                f'unknown action "{self.action}"; one of {", ".join(ReviewAction.values)}'
            )
        if self.quality_rating is not None and self.quality_rating not in QualityRating.values:
            raise _field_error(
                "quality_rating",
                f'invalid value "{self.quality_rating}"; one of {", ".join(QualityRating.values)}',
            )
        if self.action == ReviewAction.COMPLETE and self.quality_rating is None:
            raise ReviewRejected("quality_rating is required for complete action")
        texts = {
            "action_taken": self.action_taken,
            "investigation_feedback": self.investigation_feedback,
        }
        if (
            self.action == ReviewAction.UPDATE_FEEDBACK
            and self.quality_rating is None
            and not any(value is not None for value in texts.values())
        ):
            raise _field_error("update_feedback", "at least one field must be provided")
        if self.action == ReviewAction.ACKNOWLEDGE:
            for name, value in {"quality_rating": self.quality_rating, **texts}.items():
                if value is not None:
                    raise _field_error(name, "must not be set for acknowledge action")
        for name, value in texts.items():
            if value is not None and len(value) > REVIEW_TEXT_LIMIT:
                raise _field_error(
                    name, f"{len(value)} characters; the limit is {REVIEW_TEXT_LIMIT}"
                )


def _field_error(name: str, message: str) -> ReviewRejected:
    return ReviewRejected(f"validation error on field '{name}': {message}")


@dataclass
class _Step:
    """One compare-and-set: from ``from_status`` to ``to_status``, writing ``fields``."""

    from_status: str
    to_status: str
    fields: dict[str, Any] = field(default_factory=dict)
    # Completing or acknowledging an unclaimed session claims it for the actor first:
    # the log then says who took it as well as who finished it.
    implicit_claim: bool = False


def _steps(change: ReviewChange, actor: str) -> list[_Step]:
    """What ``change`` does from each review state it applies to, in the order tried."""
    now = timezone.now()
    claimed = {"assignee": actor, "assigned_at": now}
    cleared = {
        "assignee": "",
        "assigned_at": None,
        "reviewed_at": None,
        "quality_rating": "",
        "action_taken": "",
        "investigation_feedback": "",
        "feedback_edited_by": "",
        "feedback_edited_at": None,
    }
    texts = {
        name: mask_alert(value)
        for name, value in (
            ("action_taken", change.action_taken),
            ("investigation_feedback", change.investigation_feedback),
        )
        if value is not None
    }
    needs, progress, reviewed = (
        ReviewStatus.NEEDS_REVIEW,
        ReviewStatus.IN_PROGRESS,
        ReviewStatus.REVIEWED,
    )
    match change.action:
        case ReviewAction.CLAIM:
            return [
                _Step(needs, progress, claimed),
                _Step(progress, progress, claimed),  # taking it over from someone
                _Step(NOT_IN_REVIEW, progress, claimed),
            ]
        case ReviewAction.UNCLAIM:
            return [_Step(progress, needs, {"assignee": "", "assigned_at": None})]
        case ReviewAction.COMPLETE:
            done = {"reviewed_at": now, "quality_rating": change.quality_rating, **texts}
            return [
                _Step(progress, reviewed, done),
                _Step(needs, reviewed, {**done, **claimed}, implicit_claim=True),
                _Step(reviewed, reviewed, done),  # rating an acknowledged session
                _Step(NOT_IN_REVIEW, reviewed, {**done, **claimed}),
            ]
        case ReviewAction.REOPEN:
            return [_Step(reviewed, needs, cleared)]
        case ReviewAction.UPDATE_FEEDBACK:
            rating = {"quality_rating": change.quality_rating} if change.quality_rating else {}
            edited = {"feedback_edited_by": actor, "feedback_edited_at": now}
            return [_Step(reviewed, reviewed, {**rating, **texts, **edited})]
        case ReviewAction.ACKNOWLEDGE:
            seen = {"reviewed_at": now}
            unrated = {
                "quality_rating": "",
                "action_taken": "",
                "investigation_feedback": "",
                "feedback_edited_by": "",
                "feedback_edited_at": None,
            }
            return [
                _Step(progress, reviewed, seen),
                _Step(needs, reviewed, {**seen, **claimed}, implicit_claim=True),
                _Step(reviewed, reviewed, {**seen, **unrated}),
                _Step(NOT_IN_REVIEW, reviewed, {**seen, **claimed}),
            ]
    raise ReviewRejected(f'unknown action "{change.action}"')


def review_apply(
    *, session_id: Any, change: ReviewChange, actor: str, expected: str | None = None
) -> AlertSession:
    """Apply ``change`` to one session, in its own transaction, and return the session.

    ``expected``: the review status the actor saw (a page's button); only the step
    from that state is tried, so an action on a stale page conflicts instead of doing
    something else (claiming an in-progress review takes it over, for one)."""
    change.check()
    try:
        session_id = uuid.UUID(str(session_id))
    except ValueError:
        raise ReviewNotFound() from None
    steps = [s for s in _steps(change, actor) if expected is None or s.from_status == expected]
    with transaction.atomic():
        before = (
            AlertSession.objects.select_for_update()
            .filter(id=session_id)
            .values_list("quality_rating", "investigation_feedback")
            .first()
        )
        rated, feedback = before or ("", "")
        for step in steps:
            updated = AlertSession.objects.filter(
                id=session_id, review_status=step.from_status
            ).update(review_status=step.to_status, **step.fields)
            if updated:
                session = AlertSession.objects.get(id=session_id)
                _record(session, change.action, step, actor)
                # The lessons the session taught are trusted as much as it now is.
                memory_review_rating(
                    session=session, old=rated or "", new=session.quality_rating, actor=actor
                )
                if session.investigation_feedback and (
                    session.investigation_feedback != feedback or session.quality_rating != rated
                ):
                    # What the reviewer wrote is worth remembering (TARSy's feedback Reflector).
                    feedback_reflection_request(session=session, triggered_by=actor)
                return session
        if not AlertSession.objects.filter(id=session_id).exists():
            raise ReviewNotFound()
        raise ReviewConflict()


def _record(session: AlertSession, action: str, step: _Step, actor: str) -> None:
    """The activity rows and the event of a step that has just been applied."""
    from_status = step.from_status
    if step.implicit_claim:
        ReviewActivity.objects.create(
            session=session,
            actor=actor,
            action=ReviewAction.CLAIM,
            from_status=from_status,
            to_status=ReviewStatus.IN_PROGRESS,
        )
        from_status = ReviewStatus.IN_PROGRESS
    snapshot = action in (ReviewAction.COMPLETE, ReviewAction.UPDATE_FEEDBACK)
    ReviewActivity.objects.create(
        session=session,
        actor=actor,
        action=action,
        from_status=from_status,
        to_status=step.to_status,
        quality_rating=session.quality_rating if snapshot else "",
        note=session.action_taken if snapshot else "",
        investigation_feedback=session.investigation_feedback if snapshot else "",
    )
    _publish(session, actor)


def _publish(session: AlertSession, actor: str) -> None:
    """TARSy's ``review.status`` payload: each field absent when empty, and who did it."""
    fields = {
        "review_status": session.review_status,
        "assignee": session.assignee,
        "quality_rating": session.quality_rating,
        "action_taken": session.action_taken,
        "investigation_feedback": session.investigation_feedback,
    }
    payload = {name: value for name, value in fields.items() if value}
    event_publish(
        session_id=session.id,
        type=SessionEventType.REVIEW_STATUS,
        payload={**payload, "actor": actor},
    )


@dataclass(frozen=True)
class ReviewResult:
    session_id: str
    success: bool
    error: str = ""


def reviews_apply(
    *, session_ids: list[str], change: ReviewChange, actor: str, expected: str | None = None
) -> list[ReviewResult]:
    """``review_apply`` on each session, each in its own transaction: one failing leaves
    the others done. A wrong request fails every session with the same message."""
    try:
        change.check()
    except ReviewRejected as rejected:
        return [ReviewResult(str(sid), False, str(rejected)) for sid in session_ids]
    results = []
    for session_id in session_ids:
        try:
            review_apply(session_id=session_id, change=change, actor=actor, expected=expected)
        except (ReviewConflict, ReviewNotFound) as failure:
            results.append(ReviewResult(str(session_id), False, str(failure)))
        else:
            results.append(ReviewResult(str(session_id), True))
    return results


def review_on_end(session_id: Any, status: str) -> None:
    """An ended session waits for review; a cancelled one was someone's decision already.

    Only a session nobody has taken into review yet: a reviewer may claim (or even
    complete) a review while the investigation still runs."""
    ending = (
        ReviewStatus.REVIEWED if status == SessionStatus.CANCELLED else ReviewStatus.NEEDS_REVIEW
    )
    fields: dict[str, Any] = {"review_status": ending}
    if ending == ReviewStatus.REVIEWED:
        fields["reviewed_at"] = timezone.now()
    if AlertSession.objects.filter(id=session_id, review_status=NOT_IN_REVIEW).update(**fields):
        _publish(AlertSession.objects.get(id=session_id), SYSTEM_ACTOR)
