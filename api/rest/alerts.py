"""``POST /api/v1/alerts`` (docs/api.md §1.1)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from api.rest import schemas
from api.rest.common import json_body, respond
from api.rest.docs import ERRORS, request_body
from sessions import services
from sessions.auth import ApiRejected, request_author
from sessions.intake import ALLOWED_FIELDS, validate_alert

router = Router(tags=["alerts"])


@router.post(
    "/alerts",
    response={202: schemas.AlertAccepted, **ERRORS, 413: schemas.Error},
    openapi_extra=request_body(schemas.AlertIn),
    summary="Submit an alert",
)
def alert_create(request: HttpRequest) -> JsonResponse:
    """Store the alert as a ``pending`` session and queue it; 202 at once. With the
    duplicate-alert cooldown on (``defaults.dedup``) a repeat of a recent alert is
    recorded on its session instead (``deduplicated: true``, that ``session_id``). ``data`` over
    1 MiB gets 413; an unknown ``alert_type``, runbook host or MCP server gets 400."""
    body = json_body(request, example='with a "data" field') or {}
    alert = validate_alert(
        data=body.get("data"),
        alert_type=body.get("alert_type"),
        runbook=body.get("runbook"),
        mcp=body.get("mcp"),
        slack_message_fingerprint=body.get("slack_message_fingerprint"),
        fingerprint=body.get("fingerprint"),
        force_new=body.get("force_new"),
        budget=body.get("budget"),
        unknown_fields=set(body) - set(ALLOWED_FIELDS),
    )
    try:
        accepted = services.alert_accept(
            alert_type=alert.alert_type,
            alert_data=alert.data,
            chain_id=alert.chain_id,
            runbook=alert.runbook,
            runbook_url=alert.runbook_url,
            slack_message_fingerprint=alert.slack_message_fingerprint,
            mcp_selection=alert.mcp_selection,
            author=request_author(request),
            fingerprint=alert.dedup_key,
            window=alert.dedup_window,
            force_new=alert.force_new,
            budget=alert.budget,
        )
    except services.SessionNotQueued as exc:
        raise ApiRejected(f"{exc}; nothing was stored, send the alert again", 503) from None
    session = accepted.session
    if accepted.deduplicated:
        # The duplicate-alert cooldown: recorded on the session it repeats, no new one.
        return respond(
            {
                "session_id": str(session.id),
                "status": "queued",
                "message": f"Alert repeated: recorded on session {session.id} "
                f"(\u00d7{accepted.repeat_count}); no new investigation started",
                "deduplicated": True,
                "repeat_count": accepted.repeat_count,
            },
            202,
        )
    return respond(
        {
            "session_id": str(session.id),
            "status": "queued",
            # TARSy's shape exactly: its clients compare it.
            "message": "Alert submitted for processing",
        },
        202,
    )
