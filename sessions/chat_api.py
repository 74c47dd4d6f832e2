"""REST: ``POST /api/v1/sessions/{id}/chat/messages`` (TARSy's route and shapes)."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_POST

from sessions import services
from sessions.auth import api_error, api_view
from sessions.models import AlertSession


@api_view
@require_POST
def chat_message_create(request: HttpRequest, session_id) -> JsonResponse:
    """Ask a question about an ended session: 202 ``{chat_id, message_id, stage_id}``;
    the answer streams into the session's timeline as a ``chat`` stage. Checked in
    TARSy's order: the session, its chain, its status, chat enabled, the content, then
    an answer already running (409)."""
    session = get_object_or_404(AlertSession, id=session_id)
    if reason := services.chat_unavailable_reason(session):
        return api_error(reason, 400)
    try:
        content = _content(request)
        message = services.chat_message_send(
            session=session, content=content, author=request.user.get_username()
        )
    except services.ChatRejected as rejected:
        return api_error(str(rejected), rejected.status)
    return JsonResponse(
        {
            "chat_id": str(message.chat_id),
            "message_id": str(message.id),
            "stage_id": message.stage_id,
        },
        status=202,
    )


def _content(request: HttpRequest) -> Any:
    """The body's ``content``, as sent (the service checks it)."""
    try:
        body = json.loads(request.body or b"")
    except RequestDataTooBig:
        raise services.ChatRejected("request body is too large", 413) from None
    except (ValueError, RecursionError):
        raise services.ChatRejected(
            'request body is not valid JSON; send {"content": "your question"}'
        ) from None
    if not isinstance(body, dict):
        raise services.ChatRejected("request body must be a JSON object with a 'content' field")
    if unknown := set(body) - {"content"}:
        raise services.ChatRejected(
            f"unknown field(s): {', '.join(sorted(unknown))}; allowed: content"
        )
    return body.get("content")
