"""A worker process runs many sessions at once in its engine (worker/engine.py): the
task hands its work to the engine's loop and returns, within the room the process has;
each session keeps its own lease, cancel, fencing and stop.

Here the tasks run as they do in a qcluster worker (``in_cluster``): they return once the
work has started. The work is real: the task entry points, the executor's lease keeper,
the scripted provider. Killing a real worker running ten sessions is in
tests/e2e/test_faults.py.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest
from django_q.models import OrmQ

from sessions import services
from sessions.models import AlertSession, ChatMessage, SessionEvent, TimelineEvent
from sessions.services import Lease
from tests.conftest import running_session
from worker import engine, supervision
from worker.tasks import run_chat_message, run_session

pytestmark = pytest.mark.django_db(transaction=True)

# About a second of streaming: long enough for several sessions to overlap.
SLOW = {"text": " ".join(f"w{n:02d}" for n in range(20)), "chunk_delay": 0.05}


@pytest.fixture
def in_a_worker(monkeypatch, settings):
    """Tasks behave as in a qcluster worker: they hand their work over and return."""
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    monkeypatch.setattr(supervision, "in_cluster", lambda: True)
    yield
    assert engine.engine().wait_idle(timeout=30), engine.engine().running()


def submit() -> AlertSession:
    return services.session_create(
        alert_type="kubernetes",
        alert_data="pod down",
        chain_id="kubernetes-investigation",
        author="t",
    )


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def status(session: AlertSession) -> str:
    return AlertSession.objects.values_list("status", flat=True).get(id=session.id)


def streaming(session: AlertSession) -> bool:
    return TimelineEvent.objects.filter(
        session=session, event_type="llm_response", status="streaming"
    ).exists()


def ended(*sessions: AlertSession) -> bool:
    return all(status(s) not in ("pending", "in_progress", "cancelling") for s in sessions)


# --- many at once ----------------------------------------------------------------------------


def test_sessions_handed_to_one_worker_run_at_once(scripted_provider, in_a_worker):
    scripted_provider([SLOW])
    sessions = [submit() for _ in range(4)]
    handed = time.monotonic()
    assert [run_session(str(s.id)) for s in sessions] == ["started"] * 4
    assert time.monotonic() - handed < 2  # the tasks did not wait for their sessions
    wait_for(lambda: ended(*sessions), timeout=30)

    runs = AlertSession.objects.filter(id__in=[s.id for s in sessions])
    assert {r.status for r in runs} == {"completed"}
    assert len({r.worker_id for r in runs}) == 1  # one process ran them all
    # Every run began before any ended: they overlapped, not queued one behind another.
    assert max(r.started_at for r in runs) < min(r.completed_at for r in runs)


def test_a_full_worker_leaves_the_next_session_waiting_for_room(
    scripted_provider, in_a_worker, settings
):
    settings.TARSY_WORKER_SESSIONS = 2
    scripted_provider([SLOW])
    first, second, third = submit(), submit(), submit()
    assert run_session(str(first.id)) == "started"
    assert run_session(str(second.id)) == "started"
    queued = OrmQ.objects.count()

    assert run_session(str(third.id)) == "deferred: this worker runs 2 already"
    third.refresh_from_db()
    assert (third.status, third.enqueued_at) == ("pending", None)
    assert engine.engine().taken(engine.SESSION) == 2

    # The first session to end frees room, and the waiting one gets a task at once.
    wait_for(lambda: ended(first, second), timeout=30)
    third.refresh_from_db()
    assert third.enqueued_at is not None
    assert OrmQ.objects.count() > queued
    assert run_session(str(third.id)) == "started"
    wait_for(lambda: ended(third), timeout=30)
    assert status(third) == "completed"


def test_a_worker_full_of_sessions_still_answers_questions(
    scripted_provider, in_a_worker, settings
):
    settings.TARSY_WORKER_SESSIONS = 1
    scripted_provider([SLOW], agents={"ChatAgent": {"turns": [{"text": "Because."}]}})
    investigating = submit()
    assert run_session(str(investigating.id)) == "started"
    wait_for(lambda: streaming(investigating))
    done, _ = running_session(status="completed")
    message = services.chat_message_send(session=done, content="why?", author="alice")

    assert run_chat_message(str(message.id)) == "started"
    wait_for(lambda: ChatMessage.objects.get(id=message.id).status == "completed")
    assert status(investigating) == "in_progress"  # answered while the session ran
    wait_for(lambda: ended(investigating), timeout=30)


def test_a_duplicate_task_of_a_running_session_does_nothing(scripted_provider, in_a_worker):
    scripted_provider([SLOW])
    session = submit()
    assert run_session(str(session.id)) == "started"
    assert run_session(str(session.id)) == "skipped"
    assert engine.engine().taken(engine.SESSION) == 1
    wait_for(lambda: ended(session), timeout=30)
    statuses = [
        e.payload["status"]
        for e in SessionEvent.objects.filter(session=session, type="session.status")
    ]
    assert statuses == ["pending", "in_progress", "completed"]


# --- one of them stopped, the others not -----------------------------------------------------


def test_a_cancel_stops_its_session_within_a_second_and_leaves_the_others(
    scripted_provider, in_a_worker
):
    scripted_provider([SLOW])
    sessions = [submit() for _ in range(3)]
    for session in sessions:
        run_session(str(session.id))
    wait_for(lambda: all(streaming(s) for s in sessions))

    services.session_cancel(session_id=sessions[1].id, by="alice")
    asked = time.monotonic()
    wait_for(lambda: status(sessions[1]) == "cancelled", timeout=5)
    assert time.monotonic() - asked < 1

    wait_for(lambda: ended(*sessions), timeout=30)
    assert [status(s) for s in sessions] == ["completed", "cancelled", "completed"]


def test_a_lost_lease_fences_only_its_session(scripted_provider, in_a_worker):
    scripted_provider([SLOW])
    sessions = [submit() for _ in range(3)]
    for session in sessions:
        run_session(str(session.id))
    wait_for(lambda: all(streaming(s) for s in sessions))

    # What the reaper does to a session whose worker stalled: take its lease, end it.
    reaped = sessions[0]
    lease = Lease(reaped.id, uuid.uuid4())
    AlertSession.objects.filter(id=reaped.id).update(lease_token=lease.token)
    services.session_end(lease=lease, status="timed_out", error_message="reaped", explain=True)
    time.sleep(0.5)  # ten lease checks: the worker has let it go
    writes = SessionEvent.objects.filter(session=reaped).count()

    wait_for(lambda: ended(*sessions[1:]), timeout=30)
    assert [status(s) for s in sessions] == ["timed_out", "completed", "completed"]
    assert SessionEvent.objects.filter(session=reaped).count() == writes
    reaped.refresh_from_db()
    assert reaped.final_analysis == ""


# --- the worker stopped or orphaned with several sessions ------------------------------------


@pytest.fixture
def stopping(monkeypatch):
    def stop(*, grace_left: float = 0.0) -> None:
        shared = [time.monotonic() + grace_left, time.time(), float(signal.SIGTERM)]
        monkeypatch.setattr(supervision, "_shutdown", shared)

    return stop


def test_at_the_deadline_every_session_of_the_worker_ends_failed_saying_why(
    scripted_provider, in_a_worker, stopping, settings, live_pieces
):
    settings.TARSY_SHUTDOWN_GRACE = 3
    scripted_provider([{**SLOW, "chunk_delay": 0.2}])
    sessions = [submit() for _ in range(3)]
    for session in sessions:
        run_session(str(session.id))
    # Each answer has begun: its item exists and its first word has streamed (an item
    # can exist a moment before its first word; stopped then, it has no text to keep).
    wait_for(lambda: all(streaming(s) for s in sessions))
    wait_for(lambda: live_pieces.reached(*(s.id for s in sessions)))
    stopping(grace_left=0)

    wait_for(lambda: ended(*sessions), timeout=10)
    for session in AlertSession.objects.filter(id__in=[s.id for s in sessions]):
        assert (session.status, session.lease_token) == ("failed", None)
        assert "was stopped (SIGTERM) before the session finished" in session.error_message
        item = TimelineEvent.objects.get(session=session, event_type="llm_response")
        assert item.status == "failed"
        assert item.content.startswith("w00")  # what streamed is kept


def test_at_the_deadline_with_requeue_every_session_goes_back_to_the_queue(
    scripted_provider, in_a_worker, stopping, settings
):
    settings.TARSY_SHUTDOWN_REQUEUE = True
    scripted_provider([{**SLOW, "chunk_delay": 0.2}])
    sessions = [submit() for _ in range(3)]
    for session in sessions:
        run_session(str(session.id))
    wait_for(lambda: all(streaming(s) for s in sessions))
    stopping(grace_left=0)

    assert engine.engine().wait_idle(timeout=10)
    assert [status(s) for s in sessions] == ["pending"] * 3
    queued = [q.task["args"][0] for q in OrmQ.objects.all()]
    for session in sessions:
        assert queued.count(str(session.id)) == 2  # its first task, and the new one
        error = TimelineEvent.objects.get(session=session, event_type="error")
        assert "queued again" in error.content


def test_a_stopping_worker_waiting_for_room_gives_the_work_back(
    scripted_provider, in_a_worker, stopping, settings
):
    """A chat answer waits for room of its own kind; a stop ends the wait, and the answer
    goes back to the queue unstarted."""
    settings.TARSY_WORKER_FOLLOWUPS = 1
    done, _ = running_session(status="completed")
    message = services.chat_message_send(session=done, content="why?", author="alice")
    held = engine.engine().reserve(engine.FOLLOWUP)
    assert held is not None
    try:
        result: list[str] = []
        waiting = threading.Thread(
            target=lambda: result.append(run_chat_message(str(message.id))), daemon=True
        )
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive()  # no room: it waits
        stopping(grace_left=20)
        waiting.join(timeout=5)
    finally:
        held.release()
    assert result == ["skipped: this worker's cluster is stopping"]
    message.refresh_from_db()
    assert message.status == "pending"


def test_when_the_cluster_dies_every_session_of_the_worker_ends_failed(
    scripted_provider, in_a_worker
):
    scripted_provider([{**SLOW, "chunk_delay": 0.2}])
    sessions = [submit() for _ in range(3)]
    for session in sessions:
        run_session(str(session.id))
    wait_for(lambda: all(streaming(s) for s in sessions))
    assert sorted(supervision.running_work()) == sorted(str(s.id) for s in sessions)

    supervision._parent_lost.set()  # what the parent watch does when the cluster dies
    try:
        wait_for(lambda: ended(*sessions), timeout=10)
        wait_for(lambda: not supervision.running_work(), timeout=5)  # the watch may exit now
    finally:
        supervision._parent_lost.clear()
    for session in AlertSession.objects.filter(id__in=[s.id for s in sessions]):
        assert session.status == "failed"
        assert session.error_message.startswith("The worker's cluster process died")


# --- the engine itself ---------------------------------------------------------------------


def test_room_is_counted_by_kind_and_given_back_once(settings):
    settings.TARSY_WORKER_SESSIONS = 1
    settings.TARSY_WORKER_FOLLOWUPS = 1
    pool = engine.Engine()
    session = pool.reserve(engine.SESSION)
    assert session is not None
    assert pool.reserve(engine.SESSION) is None
    followup = pool.reserve(engine.FOLLOWUP)  # room of its own
    assert followup is not None
    session.release()
    session.release()  # a second release gives nothing more back
    assert pool.taken(engine.SESSION) == 0
    again = pool.reserve(engine.SESSION)
    assert again is not None
    assert pool.reserve(engine.SESSION) is None


def test_a_waiting_reservation_gets_the_room_as_soon_as_it_is_given_back(settings):
    settings.TARSY_WORKER_FOLLOWUPS = 1
    pool = engine.Engine()
    held = pool.reserve(engine.FOLLOWUP)
    assert held is not None
    threading.Timer(0.3, held.release).start()
    began = time.monotonic()
    assert pool.reserve(engine.FOLLOWUP, wait=True) is not None
    assert 0.2 < time.monotonic() - began < 2


def test_the_work_runs_in_the_engines_loop_and_its_room_comes_back(settings):
    pool = engine.Engine()
    slot = pool.reserve(engine.SESSION)
    assert slot is not None
    threads: list[str] = []

    async def work() -> str:
        threads.append(threading.current_thread().name)
        return "done"

    assert pool.run(slot, "w1", work()).result(timeout=5) == "done"
    assert threads == ["tarsy-engine"]
    assert pool.wait_idle(timeout=1)
    assert (pool.taken(engine.SESSION), pool.running()) == (0, [])


def test_a_session_left_waiting_is_queued_again_by_the_next_recovery_pass(settings):
    from worker.supervision import recover

    session = submit()
    assert services.session_defer(session_id=session.id)
    session.refresh_from_db()
    assert session.enqueued_at is None
    recover()
    session.refresh_from_db()
    assert session.enqueued_at is not None
