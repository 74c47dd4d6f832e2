"""An LLM call stores only what it adds to the conversation, and every reader still sees
each request whole (sessions/services/records.py, sessions/selectors/trace.py)."""

from __future__ import annotations

import html
import json

import pytest
from django.test import Client

from sessions import services
from sessions.models import AlertSession, LLMInteraction, Message
from sessions.selectors.trace import request_messages
from tests.sessions.test_trace import REQUEST, parse, recorded
from worker.tasks import run_session

POD_CALL = {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
BODY_FIELDS = ("request_messages", "tools", "response_text", "thinking", "tool_calls")


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def stored_bytes(interaction: LLMInteraction) -> int:
    """What one call keeps of its conversation and answer, as JSON."""
    row = LLMInteraction.objects.values(*BODY_FIELDS).get(id=interaction.id)
    return len(json.dumps(row, ensure_ascii=False).encode())


def conversation_as_messages_keep_it(interaction: LLMInteraction) -> list[dict]:
    """The execution's conversation from its ``Message`` rows (written as it happened,
    independently of the interactions), cut to the length of this call's request."""
    whole = [
        {
            "role": m.role,
            "content": m.content,
            "tool_calls": m.tool_calls,
            "tool_call_id": m.tool_call_id,
            "tool_name": m.tool_name,
        }
        for m in Message.objects.filter(execution_id=interaction.execution_id).order_by(
            "sequence_number"
        )
    ]
    return whole[: len(request_messages(interaction))]


def shown_on_the_trace(client: Client, interaction: LLMInteraction) -> list[tuple[str, str]]:
    response = client.get(f"/sessions/{interaction.session_id}/trace/llm/{interaction.id}/")
    assert response.status_code == 200
    return [
        (m.attrs["data-role"], m.one("pre", "message-content").text() if m.all("pre") else "")
        for m in parse(response).all("li", "trace-message")
    ]


# --- a real investigation -----------------------------------------------------------------


@pytest.fixture
def twenty_steps(scripted_provider) -> AlertSession:
    """An investigation that calls the real demo MCP server on each of its 20 steps,
    then is made to conclude."""
    scripted_provider(
        [{"text": f"Step {n:02d}: listing pods.", "tool_calls": [POD_CALL]} for n in range(20)]
        + [{"text": "payments-api is crash-looping."}]
    )
    session = services.session_create(
        alert_type="kubernetes",
        alert_data="namespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
    )
    assert run_session(str(session.id)) == "completed"
    return session


def agent_calls(session: AlertSession) -> list[LLMInteraction]:
    return list(
        LLMInteraction.objects.filter(
            session=session, interaction_type__in=["iteration", "forced_conclusion"]
        ).order_by("id")
    )


@pytest.mark.django_db(transaction=True)
def test_over_twenty_steps_each_call_stores_the_same_bytes_and_reads_back_whole(twenty_steps, user):
    calls = agent_calls(twenty_steps)
    assert len(calls) == 21
    sizes = [stored_bytes(call) for call in calls[1:20]]  # the 2nd to the 20th step
    whole = [len(json.dumps(request_messages(call)).encode()) for call in calls[1:20]]

    # The conversation sent grows by an answer and a tool result each step...
    assert whole[-1] > whole[0] + 15 * (whole[1] - whole[0]) > whole[0]
    # ...but each call keeps only what it added: the same bytes at step 2 as at step 20.
    assert max(sizes) - min(sizes) <= 4, sizes
    assert sizes[-1] < whole[-1] / 5
    assert calls[0].extends_id is None
    assert [call.extends_id for call in calls[1:]] == [call.id for call in calls[:-1]]

    # Each call reads back as the whole conversation it was sent, as the execution's
    # messages (written as it happened) have it: on the trace page too.
    for call in calls:
        assert request_messages(call) == conversation_as_messages_keep_it(call)
    last = calls[-1]
    # The system prompt, the alert, 20 answers with their tool calls and 20 results, and
    # the order to conclude.
    assert len(request_messages(last)) == 2 + 20 * 2 + 1
    client = Client()
    client.force_login(user)
    assert shown_on_the_trace(client, last) == [
        (m["role"], m["content"]) for m in conversation_as_messages_keep_it(last)
    ]


# --- how a call is stored -----------------------------------------------------------------


def record(run, execution, request, earlier=(), **fields) -> LLMInteraction:
    return run.llm(execution, request_messages=request, earlier=earlier, **fields)


@pytest.mark.django_db
def test_a_request_that_does_not_start_with_the_earlier_one_is_stored_whole():
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    first = record(run, execution, REQUEST)
    earlier = [services.RecordedCall.of(first, REQUEST)]
    summary = [
        {**REQUEST[0], "content": "Summarise this tool result."},
        *REQUEST[1:],
    ]
    shorter = REQUEST[:2]

    for request in (summary, shorter):
        call = record(run, execution, request, earlier)
        assert (call.extends_id, call.shared_messages) == (None, None)
        assert call.request_messages == request
        assert request_messages(call) == request


@pytest.mark.django_db
def test_a_retry_of_the_same_request_stores_nothing_of_it_again():
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    failed = record(run, execution, REQUEST, response_text="", error_code="timeout")
    retry = record(run, execution, REQUEST, [services.RecordedCall.of(failed, REQUEST)])

    assert (retry.extends_id, retry.shared_messages, retry.request_messages) == (
        failed.id,
        len(REQUEST),
        [],
    )
    assert request_messages(retry) == REQUEST


@pytest.mark.django_db
def test_a_continuing_request_stores_what_follows_the_earlier_answer():
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    first = record(run, execution, REQUEST, response_text="Now the logs.")
    answer = {
        "role": "assistant",
        "content": "Now the logs.",
        "tool_calls": [],
        "tool_call_id": "",
        "tool_name": "",
    }
    result = {**REQUEST[3], "content": "OOMKilled", "tool_call_id": "call-2"}
    second = record(
        run,
        execution,
        # As the controller builds it: tuples, as ``dataclasses.asdict`` leaves them.
        [*REQUEST, {**answer, "tool_calls": ()}, result],
        [services.RecordedCall.of(first, REQUEST)],
    )

    assert (second.extends_id, second.shared_messages) == (first.id, len(REQUEST) + 1)
    assert second.request_messages == [result]
    assert request_messages(second) == [*REQUEST, answer, result]


@pytest.mark.django_db
def test_a_row_stored_whole_before_chaining_still_reads_whole(client):
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    old = LLMInteraction.objects.create(
        session=run.session,
        execution=execution,
        provider="openai-main",
        backend="langchain",
        request_messages=REQUEST,
    )

    assert (old.extends_id, old.shared_messages) == (None, None)
    assert request_messages(old) == REQUEST
    assert shown_on_the_trace(client, old) == [(m["role"], m["content"]) for m in REQUEST]


@pytest.mark.django_db
def test_admin_shows_a_chained_call_whole(admin_client):
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    first = record(run, execution, REQUEST[:2], response_text="Listing.")
    second = record(
        run,
        execution,
        [*REQUEST[:2], {**REQUEST[2], "content": "Listing.", "tool_calls": []}, REQUEST[3]],
        [services.RecordedCall.of(first, REQUEST[:2])],
    )
    assert second.request_messages == [REQUEST[3]]

    response = admin_client.get(f"/admin/alert_sessions/llminteraction/{second.id}/change/")

    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert json.dumps(REQUEST[1]["content"]) in page  # the alert, stored only in the first call
    assert json.dumps(REQUEST[3]["content"]) in page


@pytest.mark.django_db
def test_deleting_a_session_deletes_its_chained_calls():
    run = recorded()
    execution = run.agent(run.stage("Investigation"), "KubernetesAgent")
    first = record(run, execution, REQUEST)
    record(run, execution, [*REQUEST, REQUEST[1]], [services.RecordedCall.of(first, REQUEST)])

    AlertSession.objects.filter(id=run.session.id).delete()

    assert not LLMInteraction.objects.exists()


@pytest.mark.django_db
def test_a_call_of_another_execution_is_not_continued():
    run = recorded()
    stage = run.stage("Investigation")
    one, other = run.agent(stage, "KubernetesAgent"), run.agent(stage, "LogAgent", index=2)
    first = record(run, one, REQUEST)

    call = record(run, other, [*REQUEST, REQUEST[1]], [services.RecordedCall.of(first, REQUEST)])

    assert call.extends_id is None
    assert request_messages(call) == [*REQUEST, REQUEST[1]]
