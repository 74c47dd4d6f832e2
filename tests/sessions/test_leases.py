"""Ownership of a running session: a worker writes only while it holds the session's
lease; the reaper decides first and writes after; a worker that lost its session (or
its cluster) stops at once."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import OrmQ

from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    LLMInteraction,
    Message,
    SessionEvent,
    Stage,
    TimelineEvent,
)
from sessions.services import Lease, LeaseLost
from tests.conftest import running_session
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)


def submit() -> AlertSession:
    return services.session_create(
        alert_type="kubernetes",
        alert_data="pod down",
        chain_id="kubernetes-investigation",
        author="t",
    )


def make_stale(session: AlertSession, seconds: float = 3600) -> None:
    AlertSession.objects.filter(id=session.id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=seconds)
    )


def rows(session: AlertSession) -> dict[str, int]:
    return {
        "items": TimelineEvent.objects.filter(session=session).count(),
        "events": SessionEvent.objects.filter(session=session).count(),
        "messages": Message.objects.filter(session=session).count(),
        "llm_calls": LLMInteraction.objects.filter(session=session).count(),
    }


# --- the reaper --------------------------------------------------------------------------


def test_orphaned_sessions_are_timed_out_and_their_open_work_closed():
    session, lease = running_session(worker_id="dead-worker")
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    half_said = services.timeline_event_add(
        lease=lease, event_type="llm_thinking", status="streaming"
    )
    services.timeline_event_chunk(lease=lease, event=half_said, delta="The pods are ")
    services.timeline_event_chunk(lease=lease, event=half_said, delta="crash")
    make_stale(session)

    assert services.sessions_time_out_orphans(threshold_seconds=60) == [session.id]

    session.refresh_from_db()
    assert session.status == "timed_out"
    assert session.lease_token is None
    assert "dead-worker" in TimelineEvent.objects.get(session=session, event_type="error").content
    half_said.refresh_from_db()
    assert (half_said.status, half_said.content) == ("failed", "The pods are crash")
    stage.refresh_from_db()
    assert stage.status == "timed_out"
    # The dead worker's lease is worth nothing now.
    with pytest.raises(LeaseLost):
        services.timeline_event_add(lease=lease, event_type="final_analysis", content="done")


def test_the_reaper_decides_first_and_a_session_it_loses_gets_nothing():
    """The worker heart-beats between the reaper's read and its UPDATE: no timeout, no
    error item, no closed stage (docs/architecture.md, "Decide first, then act")."""
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    make_stale(session)
    fired = []

    def worker_beats_first(execute, sql, params, many, context):
        if (
            not fired
            and sql.startswith("UPDATE")
            and "lease_token" in sql
            and "heartbeat_at" in sql
        ):
            fired.append(sql)
            AlertSession.objects.filter(id=session.id).update(heartbeat_at=timezone.now())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(worker_beats_first):
        assert services.sessions_time_out_orphans(threshold_seconds=60) == []
    assert fired
    session.refresh_from_db()
    assert (session.status, session.lease_token) == ("in_progress", lease.token)
    assert not TimelineEvent.objects.filter(session=session, event_type="error").exists()
    stage.refresh_from_db()
    assert stage.status == "active"


def test_a_cancelling_session_whose_worker_died_ends_cancelled():
    session, _ = running_session(status="cancelling")
    make_stale(session)
    services.sessions_time_out_orphans(threshold_seconds=60)
    session.refresh_from_db()
    assert session.status == "cancelled"


# --- a worker that lost its session ------------------------------------------------------------


def run_in_thread(session_id: str) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(run_session(session_id)), daemon=True)
    thread.start()
    return thread, result


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_a_worker_that_lost_its_session_stops_and_writes_nothing(scripted_provider, settings):
    """The zombie finding: reaped while it stalled, the worker went on to write six items,
    a final analysis and completed statuses, and kept calling the LLM."""
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    scripted_provider(
        [
            {
                "thinking": "Looking at the pods " * 4,
                "tool_calls": [
                    {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
                ],
            },
            {"text": "The root cause is " + "very " * 40 + "clear.", "chunk_delay": 0.05},
        ]
    )
    session = submit()
    thread, result = run_in_thread(str(session.id))
    wait_for(
        lambda: TimelineEvent.objects.filter(session=session, event_type="llm_response").exists()
    )

    # What the reaper does to a stalled worker's session: take the lease, end it.
    lease = Lease(session.id, uuid.uuid4())
    AlertSession.objects.filter(id=session.id).update(lease_token=lease.token)
    services.session_end(lease=lease, status="timed_out", error_message="reaped", explain=True)
    taken_at = time.monotonic()
    before = rows(session)

    thread.join(timeout=10)
    assert result == ["lease_lost"]
    assert time.monotonic() - taken_at < 2  # it noticed within the lease checks
    time.sleep(0.3)
    assert rows(session) == before  # not one write after the lease was taken
    session.refresh_from_db()
    assert session.status == "timed_out"
    assert session.final_analysis == ""
    assert not AgentExecution.objects.filter(session=session, status="completed").exists()
    assert not Stage.objects.filter(session=session, status="completed").exists()


def test_a_worker_whose_cluster_died_ends_its_session_with_the_reason(
    scripted_provider, settings, live_pieces
):
    from worker import supervision

    settings.TARSY_LEASE_CHECK_INTERVAL = 0.05
    scripted_provider([{"text": "one two three four five six seven eight", "chunk_delay": 0.2}])
    session = submit()
    thread, result = run_in_thread(str(session.id))
    # The answer's first words have streamed (not only its item been created).
    wait_for(lambda: live_pieces.reached(session.id))
    supervision._parent_lost.set()  # what the parent watch does when the cluster dies
    try:
        thread.join(timeout=10)
    finally:
        supervision._parent_lost.clear()

    assert result == ["failed"]
    session.refresh_from_db()
    assert session.status == "failed"
    assert session.error_message.startswith("The worker's cluster process died")
    assert session.lease_token is None
    item = TimelineEvent.objects.get(session=session, event_type="llm_response")
    assert item.status == "failed"
    assert item.content.startswith("one")  # what streamed is kept
    assert TimelineEvent.objects.filter(session=session, event_type="error").count() == 1


def test_a_worker_whose_cluster_died_takes_no_new_session():
    from worker import supervision

    session = submit()
    supervision._parent_lost.set()
    try:
        assert run_session(str(session.id)).startswith("skipped")
    finally:
        supervision._parent_lost.clear()
    session.refresh_from_db()
    assert session.status == "pending"


# --- the queue ---------------------------------------------------------------------------------


def test_the_claim_defers_at_the_concurrency_limit_and_a_freed_slot_dispatches(settings):
    settings.TARSY_MAX_CONCURRENT_SESSIONS = 1
    _, running_lease = running_session()
    waiting = submit()
    queued = OrmQ.objects.count()

    claim = services.session_claim(session_id=waiting.id, worker_id="w")
    assert (claim.outcome, claim.lease) == ("deferred", None)
    waiting.refresh_from_db()
    assert (waiting.status, waiting.enqueued_at) == ("pending", None)
    assert services.sessions_dispatch_waiting() == []  # still no room

    services.session_end(lease=running_lease, status="completed", final_analysis="ok")
    waiting.refresh_from_db()
    assert waiting.enqueued_at is not None  # its task was queued the moment room appeared
    assert OrmQ.objects.count() == queued + 1
    assert services.session_claim(session_id=waiting.id, worker_id="w").outcome == "claimed"


def test_a_claim_is_idempotent():
    session = submit()
    first = services.session_claim(session_id=session.id, worker_id="a")
    second = services.session_claim(session_id=session.id, worker_id="b")
    assert (first.outcome, second.outcome) == ("claimed", "skipped")
    assert second.lease is None


def test_pending_sessions_whose_task_was_lost_are_queued_again_once():
    session = submit()
    AlertSession.objects.filter(id=session.id).update(
        enqueued_at=timezone.now() - timedelta(seconds=120)
    )
    queued = OrmQ.objects.count()
    assert services.sessions_requeue_lost(older_than_seconds=60) == [session.id]
    assert services.sessions_requeue_lost(older_than_seconds=60) == []
    assert OrmQ.objects.count() == queued + 1
    # The duplicate task runs nothing twice: whichever comes second is skipped.
    assert services.session_claim(session_id=session.id, worker_id="a").outcome == "claimed"
    assert services.session_claim(session_id=session.id, worker_id="b").outcome == "skipped"


def test_a_dead_clusters_pending_sessions_are_queued_again_once_it_is_known_dead():
    from sessions.models import WorkerCluster

    died = uuid.uuid4()
    services.worker_cluster_beat(cluster_id=died, host="h", pid=1, workers=2)
    WorkerCluster.objects.filter(id=died).update(
        heartbeat_at=timezone.now() - timedelta(seconds=40)
    )
    pulled_before_it_died = submit()
    AlertSession.objects.filter(id=pulled_before_it_died.id).update(
        enqueued_at=timezone.now() - timedelta(seconds=45)
    )
    queued_after = submit()
    alive = uuid.uuid4()
    services.worker_cluster_beat(cluster_id=alive, host="h", pid=2, workers=2)

    assert services.worker_clusters_bury(silent_for_seconds=30) == [pulled_before_it_died.id]
    assert list(WorkerCluster.objects.values_list("id", flat=True)) == [alive]
    assert services.worker_clusters_bury(silent_for_seconds=30) == []  # buried once
    queued_after.refresh_from_db()
    assert queued_after.status == "pending"


def test_recover_runs_every_step(settings):
    from worker.supervision import recover

    stale, _ = running_session()
    make_stale(stale)
    lost = submit()
    AlertSession.objects.filter(id=lost.id).update(enqueued_at=timezone.now() - timedelta(hours=1))
    done = recover()
    assert (done["timed_out"], done["requeued"]) == (1, 1)


def test_many_leases_are_read_at_once_as_one_by_one():
    held, cancelled, lost = (running_session()[1] for _ in range(3))
    stage = services.stage_start(lease=cancelled, name="investigation", index=1)
    execution = services.execution_start(
        lease=cancelled,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    services.execution_cancel(
        session_id=cancelled.session_id, execution_id=execution.id, by="sre", reason="noise"
    )
    services.session_cancel(session_id=cancelled.session_id, by="sre", reason="dup")
    AlertSession.objects.filter(id=lost.session_id).update(lease_token=uuid.uuid4())
    stranger = Lease(held.session_id, uuid.uuid4())  # the right session, another token
    leases = [held, cancelled, lost, stranger]
    with connection.execute_wrapper(counting := QueryCount()):
        states = services.leases_status(leases=leases)
    assert counting.count == 2
    assert states == {lease: services.session_lease_status(lease=lease) for lease in leases}
    assert states[held].status == "in_progress"
    assert states[cancelled].status == "cancelling"
    assert states[cancelled].cancelled_executions == ((execution.id, "Cancelled by sre: noise"),)
    assert states[lost] is None
    assert states[stranger] is None


class QueryCount:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)
