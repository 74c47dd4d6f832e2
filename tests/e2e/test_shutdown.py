"""A container stop, on real daphne and qcluster processes: SIGTERM to the qcluster's
main process (what ``docker stop`` and Kubernetes send) or to its whole process group
(systemd, ``kill -TERM -<pgid>``) with a session running and others queued behind it,
then SIGKILL if it is still there after 30 s.

The promises: the cluster exits on its own well before the SIGKILL, with status 0 and
no process left; it starts nothing after the signal; the session it could not finish
ends ``failed`` saying why (or, with ``TARSY_SHUTDOWN_REQUEUE``, runs again from the
start after the restart); nothing is left ``in_progress`` for the orphan reaper; and the
sessions waiting for room run after a restart at once: ``TARSY_PENDING_RECOVERY_AFTER``
is set to an hour here, so the recovery of lost tasks cannot be what starts them.

Most tests give the worker room for one session (``TARSY_WORKER_SESSIONS``), so that one
runs and the others wait; one stops a worker running several at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pytest

from tests.e2e.harness import Deployment, deployment, process_group
from tests.e2e.test_faults import TERMINAL, slow_provider, statuses, submit, wait_until

pytestmark = pytest.mark.e2e

GRACE = 3.0
KILL_AFTER = 30.0  # a container's stop timeout (docker's is 10 s, Kubernetes' 30 s)
ENV = {
    "TARSY_WORKERS": "1",
    "TARSY_WORKER_SESSIONS": "1",
    "TARSY_SHUTDOWN_GRACE": str(GRACE),
    "TARSY_PENDING_RECOVERY_AFTER": "3600",
}


def stop_like_a_container(tarsy: Deployment, *, whole_group: bool = False) -> float:
    """SIGTERM, then SIGKILL after ``KILL_AFTER``; returns how long the cluster took to
    exit, and fails if it needed the SIGKILL or left a process behind."""
    cluster = tarsy.processes[list(tarsy.commands).index("qcluster")]
    sent = time.monotonic()
    if whole_group:
        os.killpg(cluster.pid, signal.SIGTERM)
    else:
        os.kill(cluster.pid, signal.SIGTERM)
    try:
        code = cluster.wait(timeout=KILL_AFTER)
    except subprocess.TimeoutExpired:
        os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait(timeout=10)
        raise AssertionError(f"the cluster needed the SIGKILL\n{tarsy.log_tail()}") from None
    took = time.monotonic() - sent
    assert code == 0, tarsy.log_tail()
    wait_until(lambda: process_group(cluster.pid) == [], 5, "no process of it left", tarsy)
    return took


def running_and_waiting(tarsy: Deployment, token: str, count: int) -> tuple[str, list[str]]:
    """Submit ``count`` sessions to a one-worker cluster with room for one; returns the
    one it runs (once its answer is streaming) and those waiting for room."""
    ids = submit(tarsy, token, count)
    wait_until(
        lambda: (
            tarsy.query(
                "SELECT COUNT(*) FROM alert_sessions_timelineevent "
                "WHERE event_type = 'llm_response' AND status = 'streaming'"
            )[0][0]
            == 1
        ),
        60,  # from submission: the cluster's start-up (its MCP servers) comes first
        "an answer streaming",
        tarsy,
    )
    current = statuses(tarsy)
    (running,) = [i for i in ids if current[i] == "in_progress"]
    return running, [i for i in ids if i != running]


def waiting_for_room(tarsy: Deployment) -> int:
    """Pending sessions a full worker left waiting, with no task, for room."""
    return tarsy.query(
        "SELECT COUNT(*) FROM alert_sessions_alertsession "
        "WHERE status = 'pending' AND enqueued_at IS NULL"
    )[0][0]


def stages(tarsy: Deployment, session_id: str) -> list[tuple]:
    return tarsy.query(
        'SELECT s."index", s.stage_type, s.status FROM alert_sessions_stage s '
        'WHERE s.session_id = %s ORDER BY s."index"',
        (session_id,),
    )


def error_of(tarsy: Deployment, session_id: str) -> str:
    return dict(tarsy.query("SELECT id, error_message FROM alert_sessions_alertsession"))[
        session_id
    ]


def assert_nothing_running_and_no_cluster(tarsy: Deployment) -> None:
    assert "in_progress" not in statuses(tarsy).values()
    assert tarsy.query("SELECT COUNT(*) FROM alert_sessions_workercluster") == [(0,)]
    assert tarsy.query(
        "SELECT COUNT(*) FROM alert_sessions_timelineevent WHERE status = 'streaming'"
    ) == [(0,)]
    assert tarsy.query(
        "SELECT COUNT(*) FROM alert_sessions_agentexecution WHERE status IN ('pending', 'active')"
    ) == [(0,)]


def test_sigterm_ends_the_running_session_failed_and_the_queue_runs_after_a_restart(tmp_path):
    provider = slow_provider(tmp_path, words=100, delay=0.1)
    with deployment(tmp_path, provider=provider, extra_env=ENV) as tarsy:
        token = tarsy.api_token()
        running, waiting = running_and_waiting(tarsy, token, 3)
        # One worker, full: it has left the next two waiting for room.
        wait_until(lambda: waiting_for_room(tarsy) == 2, 10, "the next two waiting", tarsy)

        took = stop_like_a_container(tarsy)

        assert took < GRACE + 7, took
        final = statuses(tarsy)
        assert final[running] == "failed"
        error = error_of(tarsy, running)
        assert "was stopped (SIGTERM) before the session finished" in error, error
        assert f"it had {GRACE:g} s to finish (TARSY_SHUTDOWN_GRACE)" in error, error
        said = tarsy.query(
            "SELECT status, content FROM alert_sessions_timelineevent "
            "WHERE event_type = 'llm_response'"
        )
        assert [status for status, _ in said] == ["failed"]
        assert said[0][1].startswith("w000")  # what streamed is kept
        assert [final[i] for i in waiting] == ["pending", "pending"]
        for session_id in waiting:
            assert stages(tarsy, session_id) == []  # never started
        assert_nothing_running_and_no_cluster(tarsy)

        tarsy.restart("qcluster")
        wait_until(
            lambda: all(statuses(tarsy)[i] == "completed" for i in waiting),
            90,
            "the waiting sessions completed",
            tarsy,
        )
        assert statuses(tarsy)[running] == "failed"
        for session_id in waiting:
            assert stages(tarsy, session_id) == [
                (0, "investigation", "completed"),
                (1, "exec_summary", "completed"),
            ]
        print(f"\nSIGTERM → cluster exited: {took:.1f} s (grace {GRACE:g} s)")


def test_sigterm_with_requeue_runs_the_interrupted_session_again_after_a_restart(tmp_path):
    provider = slow_provider(tmp_path, words=60, delay=0.1)
    env = {**ENV, "TARSY_SHUTDOWN_REQUEUE": "true"}
    with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
        token = tarsy.api_token()
        running, (waiting,) = running_and_waiting(tarsy, token, 2)

        took = stop_like_a_container(tarsy)

        assert took < GRACE + 7, took
        assert statuses(tarsy)[running] == "pending"
        assert statuses(tarsy)[waiting] == "pending"
        assert error_of(tarsy, running) == ""
        assert stages(tarsy, running) == [(0, "investigation", "failed")]
        (item,) = tarsy.query(
            "SELECT content FROM alert_sessions_timelineevent "
            "WHERE session_id = %s AND event_type = 'error'",
            (running,),
        )
        assert "was stopped (SIGTERM) before the session finished" in item[0]
        assert "queued again" in item[0]
        assert_nothing_running_and_no_cluster(tarsy)

        restarted = time.time()
        tarsy.restart("qcluster")
        wait_until(
            lambda: all(statuses(tarsy)[i] == "completed" for i in (running, waiting)),
            90,
            "both sessions completed",
            tarsy,
        )
        assert stages(tarsy, running) == [
            (0, "investigation", "failed"),
            (1, "investigation", "completed"),
            (2, "exec_summary", "completed"),
        ]
        said = tarsy.query(
            "SELECT status FROM alert_sessions_timelineevent "
            "WHERE session_id = %s AND event_type IN ('llm_response', 'final_analysis') "
            "ORDER BY id",
            (running,),
        )
        assert said[0] == ("failed",)  # the interrupted answer, kept
        status, detail = tarsy.api("GET", f"/api/v1/sessions/{uuid.UUID(running)}", token)
        assert status == 200
        assert (detail["total_stages"], detail["completed_stages"], detail["failed_stages"]) == (
            2,  # the investigation and its executive summary (TARSy counts every stage)
            2,
            0,
        )
        assert [s["status"] for s in detail["stages"]] == ["failed", "completed", "completed"]
        events = tarsy.query(
            "SELECT payload FROM alert_sessions_sessionevent "
            "WHERE session_id = %s AND type = 'session.status' ORDER BY id",
            (running,),
        )
        seen = [(p if isinstance(p, dict) else json.loads(p))["status"] for (p,) in events]
        assert seen == ["pending", "in_progress", "pending", "in_progress", "completed"]
        print(
            f"\nSIGTERM → cluster exited: {took:.1f} s; "
            f"restart → requeued session completed: {time.time() - restarted:.1f} s"
        )


def test_sigterm_to_the_whole_process_group_stops_it_the_same_way(tmp_path):
    provider = slow_provider(tmp_path, words=100, delay=0.1)
    with deployment(tmp_path, provider=provider, extra_env=ENV) as tarsy:
        token = tarsy.api_token()
        running, (waiting,) = running_and_waiting(tarsy, token, 2)
        cluster = tarsy.processes[list(tarsy.commands).index("qcluster")]
        assert len(process_group(cluster.pid)) >= 5  # main, sentinel, pusher, monitor, worker

        took = stop_like_a_container(tarsy, whole_group=True)

        assert took < GRACE + 7, took
        assert statuses(tarsy)[running] == "failed"
        assert "was stopped (SIGTERM)" in error_of(tarsy, running)
        assert statuses(tarsy)[waiting] == "pending"
        assert stages(tarsy, waiting) == []
        assert_nothing_running_and_no_cluster(tarsy)
        assert all(s in (*TERMINAL, "pending") for s in statuses(tarsy).values())
        print(f"\nSIGTERM to the group → cluster exited: {took:.1f} s")


def test_sigterm_ends_every_session_a_worker_runs_at_once(tmp_path):
    provider = slow_provider(tmp_path, words=100, delay=0.1)
    env = {**ENV, "TARSY_WORKER_SESSIONS": "4"}
    with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
        token = tarsy.api_token()
        ids = submit(tarsy, token, 4)
        wait_until(
            lambda: (
                tarsy.query(
                    "SELECT COUNT(*) FROM alert_sessions_timelineevent "
                    "WHERE event_type = 'llm_response' AND status = 'streaming'"
                )[0][0]
                == 4
            ),
            60,  # from submission: the cluster's start-up (its MCP servers) comes first
            "four answers streaming in one worker",
            tarsy,
        )
        workers = tarsy.query("SELECT DISTINCT worker_id FROM alert_sessions_alertsession")
        assert len(workers) == 1, workers

        took = stop_like_a_container(tarsy)

        assert took < GRACE + 7, took
        final = statuses(tarsy)
        assert [final[i] for i in ids] == ["failed"] * 4, final
        for session_id in ids:
            error = error_of(tarsy, session_id)
            assert "was stopped (SIGTERM) before the session finished" in error, error
        said = tarsy.query(
            "SELECT status, content FROM alert_sessions_timelineevent "
            "WHERE event_type = 'llm_response'"
        )
        assert len(said) == 4
        assert all(status == "failed" and content.startswith("w000") for status, content in said)
        assert_nothing_running_and_no_cluster(tarsy)
        print(f"\nSIGTERM with 4 sessions in one worker → cluster exited: {took:.1f} s")
