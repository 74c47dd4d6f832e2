"""Follow-up chat on ended sessions: the API's checks, answers that stream like an
investigation (tools included), one answer at a time, cancel, orphans and restarts.

Answers run for real: the task entry point, the scripted provider, the demo MCP server.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from agents.tools import mcp_hub
from config.loader import get_config
from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    Chat,
    ChatMessage,
    LLMInteraction,
    SessionEvent,
    Stage,
    TimelineEvent,
)
from sessions.selectors import latest_event_id
from sessions.services import ChatLease
from tarsy_site.routing import websocket_urlpatterns
from web import fragments as live
from worker.tasks import run_chat_message, run_session

pytestmark = pytest.mark.django_db(transaction=True)

ANALYSIS = "## Summary\nPod payments-api crashes.\n\n## Root cause\nDATABASE_URL is not set."
ALERT = "alert: PodCrashLooping\nnamespace: payments"
ANSWER = "The pod crashes because DATABASE_URL is not set; it is still crash-looping now."
TOOL_TURN = {
    "thinking": "Let me look at the pods as they are now.",
    "text": "Checking the pods.",
    "tool_calls": [{"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}],
}


def chat_script(scripted_provider, chat_turns, investigation=None, **extra):
    """A provider whose investigation says ``investigation`` and whose ChatAgent plays
    ``chat_turns`` (every question starts again at the first)."""
    return scripted_provider(
        investigation or [{"text": ANALYSIS}],
        agents={"ChatAgent": {"turns": chat_turns}},
        **extra,
    )


def ended_session(status: str = "completed") -> AlertSession:
    """An investigation that ran for real (on the current provider) to its end."""
    session = services.session_create(
        alert_type="PodCrashLooping",
        alert_data=ALERT,
        chain_id="kubernetes-investigation",
        author="alice",
    )
    assert run_session(str(session.id)) == status
    return AlertSession.objects.get(id=session.id)


def stored_session(status: str, **fields) -> AlertSession:
    """A session row in ``status``, without running anything (for the API's checks)."""
    return AlertSession.objects.create(
        alert_type="kubernetes",
        alert_data="d",
        chain_id=fields.pop("chain_id", "kubernetes-investigation"),
        status=status,
        **fields,
    )


def ask(client, session_id, token, body):
    return client.post(
        f"/api/v1/sessions/{session_id}/chat/messages",
        data=body if isinstance(body, str) else json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def cancel(client, session_id, token):
    return client.post(
        f"/api/v1/sessions/{session_id}/cancel",
        data="",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def chat_items(stage_id) -> list[tuple[str, str]]:
    return list(
        TimelineEvent.objects.filter(stage_id=stage_id)
        .order_by("id")
        .values_list("event_type", "status")
    )


def chat_request(message: ChatMessage) -> str:
    """What the chat agent's first model call was given, as one text."""
    interaction = LLMInteraction.objects.filter(execution__stage=message.stage).order_by("id")[0]
    return "\n".join(m["content"] for m in interaction.request_messages)


# --- a chat turn --------------------------------------------------------------------------------


def test_a_question_is_answered_with_a_tool_call_and_a_streamed_answer(
    client, api_token, scripted_provider, live_pieces
):
    # The answer streams over several flush intervals (15 words, 20 ms apart): with no
    # delay it could end inside the interval of the tool call's last piece, and then all
    # of it would reach the page with its completion instead (seen under load).
    chat_script(scripted_provider, [TOOL_TURN, {"text": ANSWER, "chunk_delay": 0.02}])
    session = ended_session()

    response = ask(client, session.id, api_token, {"content": "Why is payments-api crashing?"})
    assert response.status_code == 202
    body = response.json()
    message = ChatMessage.objects.get(id=body["message_id"])
    assert body == {
        "chat_id": str(message.chat_id),
        "message_id": str(message.id),
        "stage_id": str(message.stage_id),  # every id is a string
    }
    stage = message.stage
    assert (stage.stage_type, stage.name, stage.status) == ("chat", "Chat", "active")
    assert stage.index == Stage.objects.filter(session=session).count() - 1  # after the others
    question = TimelineEvent.objects.get(stage=stage, event_type="user_question")
    assert question.content == "Why is payments-api crashing?"
    assert question.metadata["author"] == "alice"
    assert question.execution_id is None  # the stage's own item, shown before the answer
    assert SessionEvent.objects.filter(
        session=session, type="chat.created", payload__chat_id=str(message.chat_id)
    ).exists()

    assert run_chat_message(str(message.id)) == "completed"

    message.refresh_from_db()
    stage.refresh_from_db()
    assert (message.status, message.lease_token, stage.status) == ("completed", None, "completed")
    execution = AgentExecution.objects.get(stage=stage)
    assert (execution.agent_name, execution.status) == ("ChatAgent", "completed")
    assert chat_items(stage.id) == [
        ("user_question", "completed"),
        ("llm_thinking", "completed"),
        ("llm_response", "completed"),
        ("llm_tool_call", "completed"),
        ("final_analysis", "completed"),
    ]
    tool = TimelineEvent.objects.get(stage=stage, event_type="llm_tool_call")
    assert tool.metadata["tool_name"] == "kubernetes.get_pods"
    assert "payments-api" in tool.content  # the demo cluster really answered
    answer = TimelineEvent.objects.get(stage=stage, event_type="final_analysis")
    assert answer.content == ANSWER
    # It streamed: the answer's text went out live before it completed (what was still
    # gathered when it completed is not sent: the completion carries it).
    streamed = "".join(piece.text for piece in live_pieces if piece.item_id == answer.id)
    assert streamed
    assert ANSWER.startswith(streamed)
    # The model read the investigation and the question; the session itself is untouched.
    request = chat_request(message)
    assert ALERT in request
    assert "DATABASE_URL is not set." in request
    assert "Why is payments-api crashing?" in request
    session.refresh_from_db()
    assert session.status == "completed"
    assert session.final_analysis == ANALYSIS


def test_the_answer_re_delivered_to_another_worker_does_nothing_the_second_time(
    client, api_token, scripted_provider
):
    chat_script(scripted_provider, [{"text": ANSWER}])
    session = ended_session()
    message_id = ask(client, session.id, api_token, {"content": "why?"}).json()["message_id"]
    assert run_chat_message(message_id) == "completed"
    events = SessionEvent.objects.filter(session=session).count()
    assert run_chat_message(message_id) == "skipped"
    assert SessionEvent.objects.filter(session=session).count() == events


def test_a_failed_session_takes_questions_and_its_failure_is_in_the_context(
    client, api_token, scripted_provider
):
    failing = [{"error": {"code": "quota", "message": "out of quota", "retryable": False}}]
    chat_script(scripted_provider, [{"text": "It failed on the model's quota."}], failing)
    session = ended_session("failed")

    response = ask(client, session.id, api_token, {"content": "What went wrong?"})
    assert response.status_code == 202
    message = ChatMessage.objects.get(id=response.json()["message_id"])
    assert run_chat_message(str(message.id)) == "completed"
    request = chat_request(message)
    assert "The investigation ended with status failed: " in request
    assert "out of quota" in request  # the failed agent's reason, as the stage's finding


def test_a_cancelled_session_takes_questions_too(client, api_token, scripted_provider):
    """A deliberate difference from TARSy: what a cancelled investigation found is worth
    asking about."""
    chat_script(scripted_provider, [{"text": ANSWER}])
    session = stored_session("cancelled", cancelled_by="bob")
    response = ask(client, session.id, api_token, {"content": "what did it find?"})
    assert response.status_code == 202
    assert run_chat_message(response.json()["message_id"]) == "completed"


def test_a_failed_answer_fails_its_message_and_stage_not_the_session(
    client, api_token, scripted_provider
):
    broken = [{"error": {"code": "quota", "message": "out of quota", "retryable": False}}]
    chat_script(scripted_provider, broken)
    session = ended_session()
    message_id = ask(client, session.id, api_token, {"content": "why?"}).json()["message_id"]
    assert run_chat_message(message_id) == "failed"
    message = ChatMessage.objects.get(id=message_id)
    assert message.status == "failed"
    assert "out of quota" in message.error_message
    assert message.stage.status == "failed"
    assert AlertSession.objects.get(id=session.id).status == "completed"
    # The box takes the next question.
    assert ask(client, session.id, api_token, {"content": "again?"}).status_code == 202


def test_an_answer_over_the_session_timeout_ends_timed_out_and_keeps_what_it_said(
    client, api_token, scripted_provider, settings
):
    chat_script(
        scripted_provider, [{"text": "Looking into it: " + "word " * 200, "chunk_delay": 0.05}]
    )
    session = ended_session()
    settings.TARSY_SESSION_TIMEOUT = 1
    message_id = ask(client, session.id, api_token, {"content": "why?"}).json()["message_id"]
    assert run_chat_message(message_id) == "timed_out"
    message = ChatMessage.objects.get(id=message_id)
    assert message.status == "timed_out"
    assert message.error_message == "The answer timed out: it exceeded its timeout of 1 s."
    assert message.stage.status == "timed_out"
    items = dict(chat_items(message.stage_id))
    assert items["llm_response"] == "failed"
    assert items["error"] == "failed"
    kept = TimelineEvent.objects.get(stage=message.stage, event_type="llm_response")
    assert kept.content.startswith("Looking into it:")


# --- one answer at a time ----------------------------------------------------------------------


def test_a_second_question_while_one_is_answered_gets_409(client, api_token):
    session = stored_session("completed")
    assert ask(client, session.id, api_token, {"content": "first"}).status_code == 202
    second = ask(client, session.id, api_token, {"content": "second"})
    assert second.status_code == 409
    assert second.json()["error"] == "a chat response is already being generated"
    assert ChatMessage.objects.filter(session=session).count() == 1
    assert Stage.objects.filter(session=session, stage_type="chat").count() == 1
    assert Chat.objects.filter(session=session).count() == 1


def test_the_database_refuses_a_second_open_answer_even_past_the_check(
    client, api_token, monkeypatch
):
    """Two requests that both passed the check: the constraint decides, and the loser
    gets the same 409 with nothing of it stored."""
    session = stored_session("completed")
    assert ask(client, session.id, api_token, {"content": "first"}).status_code == 202
    stored = (ChatMessage.objects.count(), Stage.objects.count(), SessionEvent.objects.count())
    monkeypatch.setattr("sessions.services.chat.OPEN_CHAT_MESSAGE_STATUSES", ())  # check misses
    second = ask(client, session.id, api_token, {"content": "second"})
    assert (second.status_code, second.json()["error"]) == (
        409,
        "a chat response is already being generated",
    )
    assert (ChatMessage.objects.count(), Stage.objects.count(), SessionEvent.objects.count()) == (
        stored
    )


@pytest.mark.django_db(transaction=True)
def test_a_question_waits_for_a_scoring_stage_being_added_and_takes_the_next_index():
    """A scoring adding its stage while a question comes in: both get a stage, with
    different indexes (the question waits for the scoring's transaction)."""
    from django.db import connection, transaction

    from sessions.services.records import next_stage_index

    session = stored_session("completed")
    added, release = threading.Event(), threading.Event()

    def add_a_stage() -> None:
        try:
            with transaction.atomic():
                index = next_stage_index(session.id)
                Stage.objects.create(session=session, name="Scoring", index=index)
                added.set()
                release.wait(5)
        finally:
            connection.close()

    scoring = threading.Thread(target=add_a_stage)
    scoring.start()
    assert added.wait(5)
    threading.Timer(0.3, release.set).start()  # the question has to wait for this commit
    message = services.chat_message_send(session=session, content="Why?", author="alice")
    scoring.join(5)
    assert sorted(Stage.objects.filter(session=session).values_list("index", flat=True)) == [
        0,
        1,
    ]
    assert message.stage.index == 1


# --- what the API refuses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [
        ("pending", "chat is not available while session is still processing"),
        ("in_progress", "chat is not available while session is still processing"),
        ("cancelling", "chat is not available while session is being cancelled"),
    ],
)
def test_a_session_still_running_refuses_questions(client, api_token, status, error):
    session = stored_session(status)
    response = ask(client, session.id, api_token, {"content": "why?"})
    assert (response.status_code, response.json()["error"]) == (400, error)
    assert not ChatMessage.objects.exists()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "content is required"),
        ({"content": ""}, "content is required"),
        ({"content": "   \n"}, "content is required"),
        ({"content": 42}, "content must be a string"),
        ({"content": "x" * 100_001}, "content exceeds maximum length of 100,000 characters"),
        ({"content": "why?", "author": "x"}, "unknown field(s): 'author'; allowed: content"),
        ("[1, 2]", 'request body must be a JSON object such as {"content": "your question"}'),
        ("{not json", "request body is not valid JSON: Expecting property name"),
    ],
)
def test_bad_content_is_refused_with_the_reason(client, api_token, body, error):
    session = stored_session("completed")
    response = ask(client, session.id, api_token, body)
    assert response.status_code == 400
    assert response.json()["message"].startswith(error)
    assert not ChatMessage.objects.exists()


def test_content_of_exactly_the_limit_is_taken(client, api_token):
    session = stored_session("completed")
    assert ask(client, session.id, api_token, {"content": "é" * 100_000}).status_code == 202


def test_a_chain_without_chat_or_gone_from_the_config_refuses_questions(
    client, api_token, tarsy_config
):
    tarsy_config(
        lambda c: c["agent_chains"]["kubernetes-investigation"].update(chat={"enabled": False})
    )
    disabled = stored_session("completed")
    gone = stored_session("completed", chain_id="removed-chain")
    response = ask(client, disabled.id, api_token, {"content": "why?"})
    assert (response.status_code, response.json()["error"]) == (
        400,
        "chat is not enabled for this chain",
    )
    response = ask(client, gone.id, api_token, {"content": "why?"})
    assert (response.status_code, response.json()["error"]) == (
        400,
        "chain configuration not found",
    )


def test_an_unknown_session_is_404_and_an_anonymous_client_401(client, api_token):
    assert ask(client, uuid.uuid4(), api_token, {"content": "why?"}).status_code == 404
    session = stored_session("completed")
    anonymous = client.post(
        f"/api/v1/sessions/{session.id}/chat/messages",
        data=json.dumps({"content": "why?"}),
        content_type="application/json",
    )
    assert anonymous.status_code == 401


def test_secrets_in_a_question_are_masked_before_they_are_stored(client, api_token):
    session = stored_session("completed")
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    response = ask(client, session.id, api_token, {"content": f"is token {secret} leaked?"})
    message = ChatMessage.objects.get(id=response.json()["message_id"])
    assert secret not in message.content
    assert not TimelineEvent.objects.filter(content__contains=secret).exists()


def test_a_question_that_cannot_be_queued_stores_nothing(client, api_token, monkeypatch):
    def broken_broker(*args, **kwargs):
        raise RuntimeError("broker down")

    monkeypatch.setattr("sessions.services.chat.async_task", broken_broker)
    session = stored_session("completed")
    response = ask(client, session.id, api_token, {"content": "why?"})
    assert response.status_code == 503
    assert "broker down" in response.json()["error"]
    assert not ChatMessage.objects.exists()
    assert not Stage.objects.filter(session=session).exists()
    assert not Chat.objects.exists()


# --- cancel --------------------------------------------------------------------------------------


def run_in_thread(message_id: str) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(run_chat_message(message_id)), daemon=True
    )
    thread.start()
    return thread, result


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_cancel_stops_a_running_answer_within_a_second_and_keeps_what_it_said(
    client, api_token, scripted_provider, settings
):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.1
    slow = {"text": "Looking into it: " + "word " * 200, "chunk_delay": 0.05}
    chat_script(scripted_provider, [slow])
    session = ended_session()
    message_id = ask(client, session.id, api_token, {"content": "why?"}).json()["message_id"]
    thread, result = run_in_thread(message_id)
    stage_id = ChatMessage.objects.get(id=message_id).stage_id
    answer_items = TimelineEvent.objects.filter(stage_id=stage_id).values("id")
    wait_for(
        lambda: (
            SessionEvent.objects.filter(
                type="stream.chunk", timeline_event_id__in=answer_items
            ).count()
            > 5
        )
    )

    response = cancel(client, session.id, api_token)
    asked_at = time.monotonic()
    assert response.status_code == 200
    assert response.json()["message"] == "Session cancellation requested"
    thread.join(timeout=10)
    assert result == ["cancelled"]
    assert time.monotonic() - asked_at < 1.5

    message = ChatMessage.objects.get(id=message_id)
    assert (message.status, message.cancelled_by, message.lease_token) == (
        "cancelled",
        "alice",
        None,
    )
    assert message.stage.status == "cancelled"
    kept = TimelineEvent.objects.get(stage=message.stage, event_type="llm_response")
    assert kept.status == "cancelled"
    assert kept.content.startswith("Looking into it:")  # what had streamed stays
    assert AlertSession.objects.get(id=session.id).status == "completed"
    # Nothing is running any more: a second cancel is refused, a new question taken.
    assert cancel(client, session.id, api_token).status_code == 409
    assert ask(client, session.id, api_token, {"content": "again"}).status_code == 202


def test_cancel_of_a_queued_answer_ends_it_at_once_and_its_task_does_nothing(client, api_token):
    session = stored_session("completed")
    message_id = ask(client, session.id, api_token, {"content": "why?"}).json()["message_id"]
    assert cancel(client, session.id, api_token).status_code == 200
    message = ChatMessage.objects.get(id=message_id)
    assert (message.status, message.stage.status) == ("cancelled", "cancelled")
    assert message.stage.error_message == "Cancelled by alice"
    assert run_chat_message(message_id) == "skipped"


def test_cancel_of_an_ended_session_with_nothing_running_is_still_409(client, api_token):
    session = stored_session("completed")
    response = cancel(client, session.id, api_token)
    assert response.status_code == 409
    assert "already ended (completed)" in response.json()["error"]


# --- leases, orphans, restarts --------------------------------------------------------------------


def claimed(session: AlertSession) -> ChatLease:
    message = services.chat_message_send(session=session, content="why?", author="alice")
    lease = services.chat_message_claim(message_id=message.id, worker_id="w1")
    assert lease is not None
    return lease


def test_a_worker_that_lost_its_answer_writes_nothing():
    session = stored_session("completed")
    lease = claimed(session)
    assert services.chat_message_claim(message_id=lease.message_id, worker_id="w2") is None
    ChatMessage.objects.filter(id=lease.message_id).update(lease_token=uuid.uuid4())
    items = TimelineEvent.objects.count()
    with pytest.raises(services.LeaseLost):
        services.timeline_event_add(lease=lease, event_type="llm_response", content="late")
    with pytest.raises(services.LeaseLost):
        services.chat_message_end(lease=lease, status="completed")
    assert TimelineEvent.objects.count() == items
    assert services.session_lease_status(lease=lease) is None


def test_the_reaper_times_out_an_answer_whose_worker_died():
    session = stored_session("completed")
    lease = claimed(session)
    ChatMessage.objects.filter(id=lease.message_id).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    assert services.chat_messages_time_out_orphans(threshold_seconds=60) == [lease.message_id]
    message = ChatMessage.objects.get(id=lease.message_id)
    assert (message.status, message.lease_token) == ("timed_out", None)
    assert "w1 stopped reporting progress" in message.error_message
    assert message.stage.status == "timed_out"
    error = TimelineEvent.objects.get(stage=message.stage, event_type="error")
    assert "stopped reporting progress" in error.content
    # The dead worker, should it wake up, writes nothing.
    with pytest.raises(services.LeaseLost):
        services.timeline_event_add(lease=lease, event_type="llm_response", content="late")
    # A healthy answer is left alone.
    assert services.chat_messages_time_out_orphans(threshold_seconds=60) == []


def test_a_worker_whose_answer_was_reaped_stops_at_once_and_writes_nothing_more(
    client, api_token, scripted_provider, settings
):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    chat_script(
        scripted_provider, [{"text": "Looking into it: " + "word " * 200, "chunk_delay": 0.05}]
    )
    session = ended_session()
    message_id = ask(client, session.id, api_token, {"content": "why?"}).json()["message_id"]
    stage_id = ChatMessage.objects.get(id=message_id).stage_id
    thread, result = run_in_thread(message_id)
    wait_for(lambda: TimelineEvent.objects.filter(stage_id=stage_id, status="streaming").exists())

    # As if it had stalled: the reaper takes the answer over and ends it (retried: a
    # write of the worker in between renews its heartbeat, and the reaper backs off).
    wait_for(
        lambda: (
            services.chat_messages_time_out_orphans(threshold_seconds=0.001)
            == [uuid.UUID(message_id)]
        )
    )
    reaped_at = time.monotonic()
    before = SessionEvent.objects.filter(session=session).count()
    thread.join(timeout=10)
    assert result == ["lease_lost"]
    assert time.monotonic() - reaped_at < 2
    time.sleep(0.3)
    assert SessionEvent.objects.filter(session=session).count() == before
    assert ChatMessage.objects.get(id=message_id).status == "timed_out"
    assert not TimelineEvent.objects.filter(stage_id=stage_id, event_type="final_analysis").exists()


def test_the_reaper_ends_a_cancelling_answer_whose_worker_died_cancelled(client, api_token):
    session = stored_session("completed")
    lease = claimed(session)
    assert cancel(client, session.id, api_token).status_code == 200
    ChatMessage.objects.filter(id=lease.message_id).update(heartbeat_at=None)
    assert services.chat_messages_time_out_orphans(threshold_seconds=60) == [lease.message_id]
    assert ChatMessage.objects.get(id=lease.message_id).status == "cancelled"


def test_a_question_whose_task_was_lost_is_queued_again_once(settings):
    from worker.supervision import recover

    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    session = stored_session("completed")
    message = services.chat_message_send(session=session, content="why?", author="alice")
    assert services.chat_messages_requeue_lost(older_than_seconds=60) == []
    ChatMessage.objects.filter(id=message.id).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    assert recover()["requeued"] == 1
    assert services.chat_messages_requeue_lost(older_than_seconds=60) == []


def test_after_a_worker_restart_the_next_answer_reads_the_earlier_turns_from_the_database(
    client, api_token, scripted_provider
):
    chat_script(scripted_provider, [{"text": ANSWER}])
    session = ended_session()
    first = ask(client, session.id, api_token, {"content": "Why is it crashing?"}).json()
    assert run_chat_message(first["message_id"]) == "completed"

    # A new worker process: no configuration, MCP servers or clients kept from before.
    get_config.cache_clear()
    if mcp_hub._hub is not None:
        mcp_hub._hub.close()
        mcp_hub._hub = None

    second = ask(client, session.id, api_token, {"content": "And how do I fix it?"}).json()
    assert run_chat_message(second["message_id"]) == "completed"
    request = chat_request(ChatMessage.objects.get(id=second["message_id"]))
    assert "**Q1** (alice): Why is it crashing?" in request
    assert f"**A1:** {ANSWER}" in request
    assert "And how do I fix it?" in request
    assert "DATABASE_URL is not set." in request


# --- the session page ------------------------------------------------------------------------


@pytest.fixture
def page_client(client, user):
    client.force_login(user)
    return client


def test_the_page_of_an_ended_session_loads_a_chat_box_that_takes_questions(page_client):
    session = stored_session("completed")
    page = page_client.get(f"/sessions/{session.id}/").content.decode()
    assert f'hx-get="/sessions/{session.id}/chat/"' in page  # the box loads itself
    box = page_client.get(f"/sessions/{session.id}/chat/").content.decode()
    assert 'id="chat-form"' in box
    assert f'hx-post="/sessions/{session.id}/chat/messages/"' in box
    assert 'maxlength="100000"' in box
    assert "disabled" not in box


def test_a_running_sessions_chat_box_stays_hidden(page_client):
    box = page_client.get(f"/sessions/{stored_session('in_progress').id}/chat/").content.decode()
    assert "hidden" in box
    assert "chat-form" not in box


def test_a_chain_without_chat_says_so_in_the_box(page_client, tarsy_config):
    tarsy_config(
        lambda c: c["agent_chains"]["kubernetes-investigation"].update(chat={"enabled": False})
    )
    box = page_client.get(f"/sessions/{stored_session('completed').id}/chat/").content.decode()
    assert "Chat is not enabled for this chain." in box
    assert "chat-form" not in box


def test_sending_from_the_box_disables_it_and_offers_to_stop(page_client):
    session = stored_session("completed")
    response = page_client.post(
        f"/sessions/{session.id}/chat/messages/", {"content": "Why?"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    box = response.content.decode()
    assert "TARSy is answering (waiting for a worker)" in box
    assert 'id="chat-send" disabled' in box
    assert f'hx-post="/sessions/{session.id}/cancel/"' in box
    message = ChatMessage.objects.get(session=session)
    assert (message.content, message.author) == ("Why?", "alice")
    # The Stop button goes through the page's cancel view.
    assert (
        page_client.post(f"/sessions/{session.id}/cancel/", HTTP_HX_REQUEST="true").status_code
        == 200
    )
    assert ChatMessage.objects.get(id=message.id).status == "cancelled"


def test_a_refused_question_is_shown_back_in_the_box_with_the_reason(page_client):
    session = stored_session("completed")
    services.chat_message_send(session=session, content="first", author="bob")
    response = page_client.post(
        f"/sessions/{session.id}/chat/messages/", {"content": "second?"}, HTTP_HX_REQUEST="true"
    )
    box = response.content.decode()
    assert 'id="chat-error"' in box
    assert "a chat response is already being generated" in box
    assert ">second?</textarea>" in box
    empty = page_client.post(f"/sessions/{session.id}/chat/messages/", {"content": " "})
    assert empty.status_code == 400  # a plain form post gets the status too
    assert "content is required" in empty.content.decode()


def test_a_plain_form_post_goes_back_to_the_session_page(page_client):
    session = stored_session("completed")
    response = page_client.post(f"/sessions/{session.id}/chat/messages/", {"content": "Why?"})
    assert response.status_code == 302
    assert response["Location"] == f"/sessions/{session.id}/"


def test_the_page_shows_the_question_in_its_chat_stage_before_the_answer(page_client):
    session = stored_session("completed")
    message = services.chat_message_send(session=session, content="Why is it down?", author="bob")
    page = page_client.get(f"/sessions/{session.id}/").content.decode()
    stage = page.split(f'id="stage-{message.stage_id}"', 1)[1]
    items = stage.split(f'id="stage-{message.stage_id}-items"', 1)[1]
    assert "Question from bob" in items.split(f'id="stage-{message.stage_id}-executions"')[0]
    assert "Why is it down?" in items


# --- live -----------------------------------------------------------------------------------------


async def receive_until_quiet(communicator, quiet_for: float = 0.5) -> list[str]:
    # receive_from() kills the application when it times out; receive_nothing() doesn't.
    messages = []
    while not await communicator.receive_nothing(timeout=quiet_for):
        messages.append(await communicator.receive_from(timeout=10))
    return messages


async def test_a_question_and_its_end_reach_the_page_live(user):
    session = await sync_to_async(stored_session)("completed")
    cursor = await sync_to_async(latest_event_id)()
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/sessions/{session.id}/"
    )
    communicator.scope["user"] = user
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"action": "subscribe", "last_event_id": cursor})

    message = await sync_to_async(services.chat_message_send)(
        session=session, content="Why is it down?", author="bob"
    )
    asked = "".join(await receive_until_quiet(communicator))
    stage = f"stage-{message.stage_id}"
    assert f'<section id="{stage}" class="stage chat"' in asked
    assert 'data-upsert-into="#stages"' in asked  # a new stage appears at the end
    assert f'data-upsert-into="#{stage}-items"' in asked  # the question, inside it
    assert "Question from bob" in asked
    assert 'id="chat-box" class="chat-box" hx-swap-oob="true"' in asked
    assert "TARSy is answering" in asked

    lease = await sync_to_async(services.chat_message_claim)(message_id=message.id, worker_id="w")
    await sync_to_async(services.chat_message_end)(lease=lease, status="completed")
    answered = "".join(await receive_until_quiet(communicator))
    assert f'id="{stage}-header"' in answered
    assert 'data-status="completed"' in answered
    assert 'id="chat-send">Send' in answered  # the box takes the next question
    assert "TARSy is answering" not in answered
    await communicator.disconnect()


def test_the_answer_is_labelled_as_the_answer_on_load_and_live(page_client, scripted_provider):
    chat_script(scripted_provider, [{"text": ANSWER}])
    session = ended_session()
    message = services.chat_message_send(session=session, content="Why?", author="alice")
    assert run_chat_message(str(message.id)) == "completed"
    page = page_client.get(f"/sessions/{session.id}/").content.decode()
    assert page.count("<header>Final analysis") == 1  # the investigation's
    assert page.count("<header>Answer") == 1  # the chat stage's
    answer = TimelineEvent.objects.get(stage=message.stage, event_type="final_analysis")
    live_html = live.render_item(live.TimelineItem.from_model(answer), live=True)
    assert "<header>Answer" in live_html


def test_a_chat_turn_is_found_by_search(client, api_token, scripted_provider):
    chat_script(scripted_provider, [{"text": "Rolling back restores the zebracrossing image."}])
    session = ended_session()
    message = services.chat_message_send(session=session, content="Rollback?", author="alice")
    assert run_chat_message(str(message.id)) == "completed"
    body = client.get(
        "/api/v1/sessions?search=zebracrossing", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    ).json()
    assert [s["id"] for s in body["sessions"]] == [str(session.id)]
    assert body["sessions"][0]["matched_in_content"] is True  # in the chat, not the alert


def test_one_agent_of_a_running_answer_can_be_stopped_alone():
    """ "Stop this agent" on a chat answer's sub-agent: the request is taken while the
    answer runs, and the answer's keeper is told (as a session's keeper is)."""
    session = stored_session("completed")
    message = services.chat_message_send(session=session, content="Why?", author="alice")
    lease = services.chat_message_claim(message_id=message.id, worker_id="w")
    parent = AgentExecution.objects.create(
        session=session, stage=message.stage, agent_name="ChatAgent", status="active"
    )
    child = AgentExecution.objects.create(
        session=session,
        stage=message.stage,
        agent_name="LogAgent",
        parent_execution=parent,
        status="active",
    )
    services.execution_cancel(session_id=session.id, execution_id=child.id, by="sre")
    state = services.session_lease_status(lease=lease)
    assert state.cancelled_executions == ((child.id, "Cancelled by sre"),)

    ChatMessage.objects.filter(id=message.id).update(status="completed")
    other = AgentExecution.objects.create(
        session=session, stage=message.stage, agent_name="EventsAgent", status="active"
    )
    with pytest.raises(services.NotCancellable):  # the answer has ended: nothing to stop
        services.execution_cancel(session_id=session.id, execution_id=other.id, by="sre")
