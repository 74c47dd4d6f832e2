"""The session page's chat box: ask a follow-up question about an ended session.

The question and its answer appear in the timeline through the live socket, like any
agent's work; the box itself only takes questions, shows why it cannot, and offers to
stop the answer being written. The same partial renders it on load, after a post, and
in every live update (a chat stage starting or ending, the session ending).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST

from sessions import services
from sessions.models import OPEN_CHAT_MESSAGE_STATUSES, AlertSession, ChatMessage
from web.views import HtmxHttpRequest


def chat_box_html(
    session: AlertSession, *, live: bool = False, error: str = "", content: str = ""
) -> str:
    """The chat box as it is now; ``error`` and ``content``: a question that was refused,
    shown back with the reason."""
    answering = (
        ChatMessage.objects.filter(session=session, status__in=OPEN_CHAT_MESSAGE_STATUSES)
        .only("status", "cancelled_by")
        .first()
        if session.is_terminal
        else None
    )
    return render_to_string(
        "sessions/partials/_chat.html",
        {
            "session": session,
            "loaded": True,
            "live": live,
            "shown": session.is_terminal,
            "unavailable": services.chat_unavailable_reason(session) if session.is_terminal else "",
            "answering": answering,
            "error": error,
            "content": content,
            "limit": services.CHAT_CONTENT_LIMIT,
        },
    )


@require_GET
def chat_box(request: HttpRequest, session_id) -> HttpResponse:
    return HttpResponse(chat_box_html(get_object_or_404(AlertSession, id=session_id)))


@require_POST
def chat_send(request: HtmxHttpRequest, session_id) -> HttpResponse:
    """Ask a question. htmx gets the box back (200 even when the question was refused:
    htmx swaps only successful responses, and the reason belongs in the box); a plain
    form goes back to the session page, or gets the box with the reason."""
    session = get_object_or_404(AlertSession, id=session_id)
    content = request.POST.get("content", "")
    try:
        services.chat_message_send(
            session=session, content=content, author=request.user.get_username()
        )
    except services.ChatRejected as rejected:
        html = chat_box_html(session, error=str(rejected), content=content)
        return HttpResponse(html, status=200 if request.htmx else rejected.status)
    if request.htmx:
        return HttpResponse(chat_box_html(session))
    return redirect("sessions:detail", session_id=session.id)
