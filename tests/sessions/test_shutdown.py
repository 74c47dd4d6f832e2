"""A worker cluster told to stop (worker/supervision.py, services/shutdown.py): it
starts nothing more and queues again what it had pulled; at the deadline its workers end
what still runs, failed with the reason or back in the queue, keeping what streamed.

The cluster's shared stop state is faked in this process (``stopping``); the work runs
for real: the task entry points, the executor's lease keeper, the scripted provider.
The end-to-end stop of a real qcluster is in tests/e2e/test_shutdown.py.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    ChatMessage,
    SessionEvent,
    SessionScore,
    Stage,
    TimelineEvent,
)
from sessions.selectors import session_panels, stage_progress
from sessions.services import Lease, LeaseLost
from tests.conftest import running_session
from worker import supervision
from worker.tasks import run_chat_message, run_session, score_session

pytestmark = pytest.mark.django_db(transaction=True)

REASON = "The worker h:1 was stopped (SIGTERM) before the session finished."
SLOW = {"text": "The pods " + "are crash-looping " * 100, "chunk_delay": 0.03}


@pytest.fixture
def stopping(monkeypatch):
    """Makes this process one of a cluster told to stop, ``grace_left`` seconds before
    its deadline (0: the deadline has come)."""

    def stop(*, grace_left: float = 0.0) -> None:
        shared = [time.monotonic() + grace_left, time.time(), float(signal.SIGTERM)]
        monkeypatch.setattr(supervision, "_shutdown", shared)

    return stop


def submit() -> AlertSession:
    return services.session_create(
        alert_type="kubernetes",
        alert_data="pod down",
        chain_id="kubernetes-investigation",
        author="t",
    )


def tasks(name: str) -> list[str]:
    """The arguments of the queued django-q2 tasks running ``name``."""
    return [q.task["args"][0] for q in OrmQ.objects.all() if q.task["func"] == name]


def in_thread(task, work_id: str) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(task(work_id)), daemon=True)
    thread.start()
    return thread, result


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def streaming(session_id) -> bool:
    return TimelineEvent.objects.filter(
        session_id=session_id, event_type="llm_response", status="streaming"
    ).exists()


def interrupted_run(session: AlertSession) -> Lease:
    """A worker's run of ``session`` as the deadline finds it: a stage, an agent, an
    answer half streamed."""
    claim = services.session_claim(session_id=session.id, worker_id="h:1")
    assert claim.lease is not None
    lease = claim.lease
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )
    item = services.timeline_event_add(
        lease=lease, event_type="llm_response", status="streaming", execution=execution
    )
    services.timeline_event_chunk(lease=lease, event=item, delta="The pods are ")
    services.timeline_event_chunk(lease=lease, event=item, delta="crash")
    return lease


# --- the stop itself -----------------------------------------------------------------------


def test_a_stop_is_asked_once_and_a_second_signal_changes_nothing(monkeypatch, settings):
    settings.TARSY_SHUTDOWN_GRACE = 20
    monkeypatch.setattr(supervision, "_shutdown", [0.0, 0.0, 0.0])
    assert not supervision.stopping()
    supervision.request_stop(signal.SIGINT)
    deadline = supervision._shutdown[0]
    assert supervision.stopping()
    assert 19 < deadline - time.monotonic() <= 20
    supervision.request_stop(signal.SIGTERM)
    assert supervision._shutdown[0] == deadline
    assert supervision._shutdown[2] == signal.SIGINT


def test_the_worker_is_told_to_stop_only_at_the_deadline_and_why(stopping, settings):
    settings.TARSY_SHUTDOWN_GRACE = 20
    assert supervision.stop_reason() is None  # not stopping
    stopping(grace_left=5)
    assert supervision.stop_reason() is None  # still has time
    stopping(grace_left=0)
    interruption = supervision.stop_reason("answer")
    assert interruption is not None
    assert not interruption.requeue
    worker = f"{socket.gethostname()}:{os.getpid()}"
    assert interruption.reason == (
        f"The worker {worker} was stopped (SIGTERM) before the answer finished: it had 20 s "
        "to finish (TARSY_SHUTDOWN_GRACE)."
    )
    settings.TARSY_SHUTDOWN_REQUEUE = True
    interruption = supervision.stop_reason()
    assert interruption.requeue
    assert interruption.reason.endswith(
        "The session was queued again and runs from the start on the next free worker."
    )


# --- work pulled but not started ---------------------------------------------------------


def test_a_stopping_worker_starts_no_session_and_queues_it_again_once(stopping):
    session = submit()
    stopping(grace_left=20)
    assert run_session(str(session.id)) == "skipped: this worker's cluster is stopping"
    session.refresh_from_db()
    assert session.status == "pending"
    assert tasks("worker.tasks.run_session") == [str(session.id)] * 2  # the held one, and anew
    # The same task handed to another stopping worker: queued again already.
    assert run_session(str(session.id)).startswith("skipped")
    assert len(tasks("worker.tasks.run_session")) == 2


def test_a_stopping_worker_starts_no_answer_and_no_scoring(stopping):
    ended, _ = running_session(status="completed")
    message = services.chat_message_send(session=ended, content="why?", author="alice")
    score = services.score_request(session_id=ended.id, triggered_by="alice")
    stopping(grace_left=20)
    assert run_chat_message(str(message.id)).startswith("skipped")
    assert score_session(str(score.id)).startswith("skipped")
    assert ChatMessage.objects.get(id=message.id).status == "pending"
    assert SessionScore.objects.get(id=score.id).status == "pending"
    assert tasks("worker.tasks.run_chat_message") == [str(message.id)] * 2
    assert tasks("worker.tasks.score_session") == [str(score.id)] * 2


def test_the_work_a_stopping_cluster_pulled_is_queued_again_once():
    pulled, waiting, running = submit(), submit(), submit()
    services.session_claim(session_id=running.id, worker_id="w")
    locked = timezone.now() + timedelta(hours=1)
    for session in (pulled, running):
        row = next(q for q in OrmQ.objects.all() if q.task["args"][0] == str(session.id))
        OrmQ.objects.filter(id=row.id).update(lock=locked)  # what a pusher's pull does
    began = timezone.now()

    assert services.work_requeue_pulled(queued_before=began) == 1
    assert services.work_requeue_pulled(queued_before=began) == 0
    queued = tasks("worker.tasks.run_session")
    assert queued.count(str(pulled.id)) == 2
    assert queued.count(str(waiting.id)) == 1  # its task is still there for anyone
    assert queued.count(str(running.id)) == 1


def test_a_stopping_clusters_broker_pulls_nothing_and_hands_back_a_pull_in_flight(
    monkeypatch, stopping
):
    session = submit()
    broker = supervision.Broker()
    monkeypatch.setattr(supervision.Conf, "POLL", 0.01)
    stopping(grace_left=20)
    assert broker.dequeue() is None
    assert OrmQ.objects.get().lock <= timezone.now()

    # The stop begins while the pusher is pulling: what it pulled goes back at once.
    monkeypatch.setattr(supervision, "_shutdown", None)
    pull = supervision.ORM.dequeue

    def pull_as_the_stop_begins(self):
        pulled = pull(self)
        stopping(grace_left=20)
        return pulled

    monkeypatch.setattr(supervision.ORM, "dequeue", pull_as_the_stop_begins)
    assert broker.dequeue() is None
    assert OrmQ.objects.get().lock <= timezone.now()
    assert tasks("worker.tasks.run_session") == [str(session.id)]


# --- work running at the deadline ----------------------------------------------------------


def test_at_the_deadline_a_running_session_ends_failed_saying_why(
    scripted_provider, settings, stopping, live_pieces
):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    settings.TARSY_SHUTDOWN_GRACE = 3
    scripted_provider([SLOW])
    session = submit()
    thread, result = in_thread(run_session, str(session.id))
    wait_for(lambda: streaming(session.id))
    wait_for(lambda: live_pieces.reached(session.id))
    stopping(grace_left=0)
    thread.join(timeout=10)

    assert result == ["failed"]
    session.refresh_from_db()
    assert (session.status, session.lease_token) == ("failed", None)
    assert "was stopped (SIGTERM) before the session finished" in session.error_message
    assert "it had 3 s to finish (TARSY_SHUTDOWN_GRACE)" in session.error_message
    item = TimelineEvent.objects.get(session=session, event_type="llm_response")
    assert item.status == "failed"
    assert item.content.startswith("The")  # what streamed is kept
    error = TimelineEvent.objects.get(session=session, event_type="error")
    assert error.content == session.error_message
    assert not Stage.objects.filter(session=session, status="active").exists()


def test_at_the_deadline_with_requeue_a_running_session_goes_back_to_the_queue(
    scripted_provider, settings, stopping
):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    settings.TARSY_SHUTDOWN_REQUEUE = True
    scripted_provider([SLOW])
    session = submit()
    thread, result = in_thread(run_session, str(session.id))
    wait_for(lambda: streaming(session.id))
    stopping(grace_left=0)
    thread.join(timeout=10)

    assert result == ["pending"]
    session.refresh_from_db()
    assert (session.status, session.lease_token, session.error_message) == ("pending", None, "")
    assert tasks("worker.tasks.run_session") == [str(session.id)] * 2
    error = TimelineEvent.objects.get(session=session, event_type="error")
    assert "queued again" in error.content
    assert error.stage.status == "failed"
    assert TimelineEvent.objects.get(session=session, event_type="llm_response").status == "failed"


def test_a_session_queued_again_keeps_what_it_streamed_and_closes_its_run():
    session = submit()
    lease = interrupted_run(session)
    started_at = AlertSession.objects.get(id=session.id).started_at

    assert services.session_requeue(lease=lease, reason=REASON)

    session.refresh_from_db()
    assert (session.status, session.lease_token, session.worker_id) == ("pending", None, "")
    assert session.first_stage_index == 1
    assert session.started_at == started_at
    assert tasks("worker.tasks.run_session") == [str(session.id)] * 2
    stage = Stage.objects.get(session=session)
    assert (stage.status, stage.error_message) == ("failed", REASON)
    assert AgentExecution.objects.get(session=session).status == "failed"
    said = TimelineEvent.objects.get(session=session, event_type="llm_response")
    assert (said.status, said.content) == ("failed", "The pods are crash")
    error = TimelineEvent.objects.get(session=session, event_type="error")
    assert (error.stage_id, error.content, error.metadata) == (stage.id, REASON, {"requeued": True})
    statuses = [
        e.payload["status"]
        for e in SessionEvent.objects.filter(session=session, type="session.status")
    ]
    assert statuses == ["pending", "in_progress", "pending"]
    # The interrupted worker's lease is worth nothing now.
    with pytest.raises(LeaseLost):
        services.timeline_event_add(lease=lease, event_type="final_analysis", content="done")


def test_the_requeue_decides_first_and_a_session_it_lost_gets_nothing():
    session = submit()
    lease = interrupted_run(session)
    AlertSession.objects.filter(id=session.id).update(lease_token=uuid.uuid4())  # the reaper
    items = TimelineEvent.objects.count()

    with pytest.raises(LeaseLost):
        services.session_requeue(lease=lease, reason=REASON)

    assert TimelineEvent.objects.count() == items
    assert Stage.objects.get(session=session).status == "active"
    assert len(tasks("worker.tasks.run_session")) == 1


def test_a_session_being_cancelled_is_not_queued_again():
    session, lease = running_session(status="cancelling")
    assert not services.session_requeue(lease=lease, reason=REASON)
    session.refresh_from_db()
    assert (session.status, session.lease_token) == ("cancelling", lease.token)


def test_the_second_run_comes_after_the_interrupted_one_and_the_counters_count_it(
    scripted_provider, client, api_token
):
    scripted_provider([{"text": "The root cause is a missing DATABASE_URL."}])
    session = submit()
    lease = interrupted_run(session)
    services.session_requeue(lease=lease, reason=REASON)

    assert run_session(str(session.id)) == "completed"

    session.refresh_from_db()
    stages = list(
        Stage.objects.filter(session=session).values_list("index", "stage_type", "status")
    )
    assert stages == [
        (0, "investigation", "failed"),
        (1, "investigation", "completed"),
        (2, "exec_summary", "completed"),
    ]
    assert stage_progress(session) == "stage 1 of 1"
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"}
    detail = client.get(f"/api/v1/sessions/{session.id}", **auth).json()
    assert (detail["status"], detail["final_analysis"]) == (
        "completed",
        "The root cause is a missing DATABASE_URL.",
    )
    assert (detail["total_stages"], detail["completed_stages"], detail["failed_stages"]) == (
        2,  # the investigation and its executive summary (TARSy counts every stage)
        2,
        0,
    )
    assert [(s["stage_index"], s["status"]) for s in detail["stages"]] == [
        (1, "failed"),
        (2, "completed"),
        (3, "completed"),
    ]
    timeline = client.get(f"/api/v1/sessions/{session.id}/timeline", **auth).json()
    kinds = [e["event_type"] for e in timeline]
    assert kinds.index("error") < kinds.index("final_analysis")  # the story in order
    assert timeline[kinds.index("llm_response")]["content"] == "The pods are crash"


def test_the_pages_count_the_stages_of_the_current_run():
    session = submit()
    services.session_requeue(lease=interrupted_run(session), reason=REASON)
    lease = services.session_claim(session_id=session.id, worker_id="h:2").lease
    services.stage_start(lease=lease, name="investigation", index=1)

    (active,) = session_panels().active
    assert (active.id, active.current_stage_number) == (session.id, 1)
    assert stage_progress(AlertSession.objects.get(id=session.id)) == "stage 1 of 1"


def test_at_the_deadline_a_chat_answer_ends_failed_saying_why(
    scripted_provider, settings, stopping, live_pieces
):
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    scripted_provider([], agents={"ChatAgent": {"turns": [SLOW]}})
    ended, _ = running_session(status="completed")
    message = services.chat_message_send(session=ended, content="why?", author="alice")
    thread, result = in_thread(run_chat_message, str(message.id))
    wait_for(lambda: streaming(ended.id))
    wait_for(lambda: live_pieces.reached(ended.id))
    stopping(grace_left=0)
    thread.join(timeout=10)

    assert result == ["failed"]
    message.refresh_from_db()
    assert message.status == "failed"
    assert "was stopped (SIGTERM) before the answer finished" in message.error_message
    assert message.stage.status == "failed"
    said = TimelineEvent.objects.get(stage=message.stage, event_type="llm_response")
    assert (said.status, said.content.startswith("The")) == ("failed", True)
    assert AlertSession.objects.get(id=ended.id).status == "completed"


def test_an_answer_queued_again_is_written_again_in_its_stage(scripted_provider):
    scripted_provider([], agents={"ChatAgent": {"turns": [{"text": "Because of the config."}]}})
    ended, _ = running_session(status="completed")
    message = services.chat_message_send(session=ended, content="why?", author="alice")
    lease = services.chat_message_claim(message_id=message.id, worker_id="h:1")
    stage = Stage.objects.get(chat_message__id=message.id)
    services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="ChatAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )

    assert services.chat_message_requeue(lease=lease, reason=REASON)

    message.refresh_from_db()
    assert (message.status, message.lease_token, message.started_at) == ("pending", None, None)
    stage.refresh_from_db()
    assert stage.status == "active"  # as while any question waits
    assert AgentExecution.objects.get(stage=stage).status == "failed"
    assert TimelineEvent.objects.filter(stage=stage, event_type="error").count() == 1
    assert tasks("worker.tasks.run_chat_message") == [str(message.id)] * 2

    assert run_chat_message(str(message.id)) == "completed"
    executions = list(AgentExecution.objects.filter(stage=stage).order_by("id"))
    assert [e.status for e in executions] == ["failed", "completed"]
    assert executions[-1].final_analysis == "Because of the config."


def test_a_scoring_queued_again_closes_its_stage_and_scores_again(scripted_provider):
    ended, _ = running_session(status="completed")
    score = services.score_request(session_id=ended.id, triggered_by="alice")
    lease = services.score_claim(score_id=score.id, worker_id="h:1")
    from sessions.services.scoring import score_stage_start

    score_stage_start(
        lease=lease, agent_name="ScoringAgent", llm_provider="p", llm_backend="b", model_name="m"
    )

    assert services.score_requeue(lease=lease, reason=REASON)

    score.refresh_from_db()
    assert (score.status, score.lease_token) == ("pending", None)
    assert Stage.objects.get(session=ended, stage_type="scoring").status == "failed"
    assert tasks("worker.tasks.score_session") == [str(score.id)] * 2
    with pytest.raises(LeaseLost):
        services.score_requeue(lease=lease, reason=REASON)
