"""Mid-run steering (ours, docs/api.md): an SRE's note to the running agents of a session."""

from __future__ import annotations

from uuid import UUID

from django.http import HttpRequest, JsonResponse
from ninja import Router
from pydantic import BaseModel, ConfigDict, Field

from api.rest import schemas
from api.rest.common import NOT_FOUND, iso, json_body, only_fields, respond
from api.rest.docs import ERRORS, request_body
from sessions import services
from sessions.auth import ApiRejected, api_error, request_author
from sessions.models import AlertSession

router = Router(tags=["sessions"])


class SteerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(
        description=f"The note, at most {services.STEERING_TEXT_LIMIT:,} characters; masked "
        "like the alert before it is stored or sent to a model."
    )


class SteerAccepted(schemas.Model):
    note_id: str
    session_id: str
    event_id: str = Field(description="The note's `steering` timeline item.")
    author: str
    text: str = Field(description="As stored: masked.")
    created_at: str


@router.post(
    "/sessions/{uuid:session_id}/steer",
    response={
        202: SteerAccepted,
        **ERRORS,
        404: schemas.Error,
        409: schemas.Error,
        429: schemas.Error,
    },
    openapi_extra=request_body(SteerIn),
    summary="Steer a running investigation (ours)",
)
def session_steer(request: HttpRequest, session_id: UUID) -> JsonResponse:
    """Add a note for the running agents: it shows in the timeline at once, and each
    running agent (and any that starts later) gets it at its next model call as
    "Guidance from <author>: …". Taken while the session is pending or in progress;
    409 once it is being cancelled or has ended; 429 (with ``Retry-After``) past 10 notes
    a minute per session and author."""
    if not AlertSession.objects.filter(id=session_id).exists():
        raise ApiRejected(NOT_FOUND, 404)
    body = json_body(request, example='such as {"text": "the deploy at 14:02 changed …"}')
    if body is None:
        raise ApiRejected("validation error on field 'text': send a body such as {\"text\": …}")
    only_fields(body, ("text",))
    try:
        note = services.steering_note_add(
            session_id=session_id, text=body.get("text"), author=request_author(request)
        )
    except services.SteeringRejected as rejected:
        if rejected.retry_after is None:
            raise ApiRejected(str(rejected), rejected.status) from None
        response = api_error(str(rejected), rejected.status, retry_after=rejected.retry_after)
        response["Retry-After"] = str(rejected.retry_after)
        return response
    return respond(
        {
            "note_id": str(note.id),
            "session_id": str(note.session_id),
            "event_id": str(note.item_id),
            "author": note.author,
            "text": note.text,
            "created_at": iso(note.created_at),
        },
        202,
    )
