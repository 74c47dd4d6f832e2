"""An operator's bad night, on real daphne and qcluster processes: the whole cluster
killed with sessions running and queued, only its main process killed, a worker frozen
past the orphan threshold and resumed, two clusters under one concurrency limit.

Each test reads the deployment's database directly, as an operator would, and checks
the promises: every session ends, none runs twice, nothing is written about a session
after its terminal status.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import Deployment, deployment, process_group

pytestmark = pytest.mark.e2e

TERMINAL = ("completed", "failed", "timed_out", "cancelled")


def slow_provider(tmp_path: Path, *, words: int = 40, delay: float = 0.1) -> dict:
    """A scripted model that looks at the pods, then writes its answer a word at a time."""
    script = tmp_path / "slow-script.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "chunk_delay": delay,
                "turns": [
                    {
                        "thinking": "Let me look at the pods first.",
                        "tool_calls": [
                            {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
                        ],
                    },
                    {"text": " ".join(f"w{n:03d}" for n in range(words))},
                ],
            }
        )
    )
    return {
        "name": "slow",
        "type": "scripted",
        "model": "slow-script",
        "options": {"script": str(script)},
        "is_default": True,
    }


def submit(tarsy: Deployment, token: str, count: int) -> list[str]:
    ids = []
    for n in range(count):
        status, body = tarsy.api("POST", "/api/v1/alerts", token, {"data": f"alert {n}: pod down"})
        assert status == 202, body
        ids.append(body["session_id"].replace("-", ""))
    return ids


def statuses(tarsy: Deployment) -> dict[str, str]:
    return dict(tarsy.query("SELECT id, status FROM alert_sessions_alertsession"))


def wait_until(condition, timeout: float, what: str, tarsy: Deployment) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}\n{tarsy.log_tail()}")
        time.sleep(0.1)
    return time.monotonic() - started


def assert_each_ran_once_and_nothing_came_after_its_end(tarsy: Deployment) -> None:
    events = tarsy.query(
        "SELECT session_id, id, type, payload FROM alert_sessions_sessionevent ORDER BY id"
    )
    by_session: dict[str, list[tuple[int, str, dict]]] = {}
    for session_id, event_id, kind, payload in events:
        by_session.setdefault(session_id, []).append(
            (event_id, kind, payload if isinstance(payload, dict) else json.loads(payload))
        )
    for session_id, log in by_session.items():
        statuses_seen = [p["status"] for _, kind, p in log if kind == "session.status"]
        assert statuses_seen.count("in_progress") <= 1, (session_id, statuses_seen)  # ran once
        ends = [
            i
            for i, (_, kind, p) in enumerate(log)
            if kind == "session.status" and p["status"] in TERMINAL
        ]
        assert len(ends) == 1, (session_id, statuses_seen)
        assert ends[0] == len(log) - 1, (session_id, log[ends[0] :])  # nothing after its end
    # Each stage of a session ran once (a second run would repeat the investigation).
    stages = tarsy.query(
        "SELECT session_id, name, COUNT(*) FROM alert_sessions_stage GROUP BY session_id, name"
    )
    assert all(count == 1 for _, _, count in stages), stages


def test_the_whole_cluster_killed_and_restarted_loses_no_session(tmp_path):
    """kill -9 of every qcluster process with sessions running and queued; the default
    recovery settings bring every session to an end within two minutes of the restart.
    A worker runs one session here, so that two run and four wait."""
    env = {"TARSY_WORKERS": "2", "TARSY_WORKER_SESSIONS": "1"}
    with deployment(tmp_path, provider=slow_provider(tmp_path), extra_env=env) as tarsy:
        token = tarsy.api_token()
        ids = submit(tarsy, token, 6)
        wait_until(
            lambda: list(statuses(tarsy).values()).count("in_progress") == 2,
            60,  # from submission: the cluster's start-up (its MCP servers) comes first
            "two sessions running",
            tarsy,
        )
        time.sleep(1.0)  # let them stream a little
        cluster = tarsy.processes[list(tarsy.commands).index("qcluster")]
        os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait(timeout=10)
        wait_until(lambda: process_group(cluster.pid) == [], 10, "the cluster dead", tarsy)
        killed = statuses(tarsy)
        running_at_kill = [i for i in ids if killed[i] == "in_progress"]
        queued_at_kill = [i for i in ids if killed[i] == "pending"]
        assert len(running_at_kill) == 2
        assert len(queued_at_kill) == 4

        restarted = time.time()
        tarsy.restart("qcluster")
        took = wait_until(
            lambda: all(status in TERMINAL for status in statuses(tarsy).values()),
            120,
            "every session at a terminal status",
            tarsy,
        )
        final = statuses(tarsy)
        assert all(final[i] == "timed_out" for i in running_at_kill), final
        assert all(final[i] == "completed" for i in queued_at_kill), final
        starts = dict(tarsy.query("SELECT id, started_at FROM alert_sessions_alertsession"))
        last_start = max(_epoch(starts[i]) for i in queued_at_kill)
        print(
            f"\nrestart → every session ended: {took:.1f} s; "
            f"restart → last stuck session started: {last_start - restarted:.1f} s"
        )
        assert_each_ran_once_and_nothing_came_after_its_end(tarsy)


def test_a_killed_main_process_leaves_no_worker_behind(tmp_path):
    """kill -9 of qcluster's main process only: its sentinel, pusher, monitor and workers
    used to live on and serve the queue beside the cluster that replaced it. A worker
    runs one session here, so that two orphaned workers would show as four at once."""
    env = {
        "TARSY_WORKERS": "2",
        "TARSY_WORKER_SESSIONS": "1",
        "TARSY_LEASE_CHECK_INTERVAL": "0.2",
    }
    with deployment(tmp_path, provider=slow_provider(tmp_path), extra_env=env) as tarsy:
        token = tarsy.api_token()
        ids = submit(tarsy, token, 2)
        wait_until(
            lambda: list(statuses(tarsy).values()).count("in_progress") == 2,
            60,  # from submission: the cluster's start-up (its MCP servers) comes first
            "two sessions running",
            tarsy,
        )
        cluster = tarsy.processes[list(tarsy.commands).index("qcluster")]
        assert len(process_group(cluster.pid)) >= 5  # main, sentinel, pusher, monitor, workers
        os.kill(cluster.pid, signal.SIGKILL)
        cluster.wait(timeout=10)
        gone = wait_until(lambda: process_group(cluster.pid) == [], 20, "no process left", tarsy)

        # The workers ended their sessions, saying why, before they exited.
        final = statuses(tarsy)
        assert [final[i] for i in ids] == ["failed", "failed"], final
        errors = [
            m for (m,) in tarsy.query("SELECT error_message FROM alert_sessions_alertsession")
        ]
        assert all("cluster process died" in m for m in errors), errors

        tarsy.restart("qcluster")
        more = submit(tarsy, token, 4)
        most = 0
        deadline = time.monotonic() + 90
        while not all(statuses(tarsy)[i] in TERMINAL for i in more):
            assert time.monotonic() < deadline, tarsy.log_tail()
            most = max(most, list(statuses(tarsy).values()).count("in_progress"))
            time.sleep(0.05)
        assert most <= 2  # one cluster of two workers, not two clusters
        assert all(statuses(tarsy)[i] == "completed" for i in more)
        print(f"\nmain process killed → every worker gone in {gone:.1f} s")
        assert_each_ran_once_and_nothing_came_after_its_end(tarsy)


def test_a_worker_killed_with_ten_sessions_running_ends_each_of_them_once(tmp_path):
    """kill -9 of one worker process running ten sessions at once (worker/engine.py).
    django-q2 acknowledged their tasks when they started, so nothing re-delivers them:
    their heartbeats stop, and recovery ends each of them once, timed out, keeping what
    it streamed. The sentinel starts a fresh worker, which runs what comes next."""
    env = {
        "TARSY_WORKERS": "1",
        "TARSY_HEARTBEAT_INTERVAL": "1",
        "TARSY_ORPHAN_THRESHOLD": "5",
        "TARSY_RECOVERY_INTERVAL": "0.5",
    }
    provider = slow_provider(tmp_path, words=80, delay=0.1)
    with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
        token = tarsy.api_token()
        ids = submit(tarsy, token, 10)

        def streaming() -> int:
            return tarsy.query(
                "SELECT COUNT(*) FROM alert_sessions_timelineevent "
                "WHERE event_type = 'llm_response' AND status = 'streaming'"
            )[0][0]

        wait_until(lambda: streaming() == 10, 60, "ten answers streaming", tarsy)
        time.sleep(1.0)  # a few words each
        (worker,) = {w for (w,) in tarsy.query("SELECT worker_id FROM alert_sessions_alertsession")}
        pid = int(worker.rsplit(":", 1)[1])
        assert pid in process_group(tarsy.processes[list(tarsy.commands).index("qcluster")].pid)
        os.kill(pid, signal.SIGKILL)
        took = wait_until(
            lambda: all(statuses(tarsy)[i] in TERMINAL for i in ids),
            60,
            "every session of the killed worker ended",
            tarsy,
        )
        final = statuses(tarsy)
        assert [final[i] for i in ids] == ["timed_out"] * 10, final
        errors = tarsy.query("SELECT error_message FROM alert_sessions_alertsession")
        assert all(worker in message for (message,) in errors), errors
        said = tarsy.query(
            "SELECT status, content FROM alert_sessions_timelineevent "
            "WHERE event_type = 'llm_response'"
        )
        assert len(said) == 10
        interrupted = [status == "failed" and text.startswith("w000") for status, text in said]
        assert all(interrupted), said

        # The worker that replaced it takes new work.
        more = submit(tarsy, token, 2)
        wait_until(
            lambda: all(statuses(tarsy)[i] in TERMINAL for i in more),
            60,
            "the next sessions ended",
            tarsy,
        )
        assert [statuses(tarsy)[i] for i in more] == ["completed", "completed"]
        (new_worker,) = {
            w
            for (w,) in tarsy.query(
                "SELECT worker_id FROM alert_sessions_alertsession WHERE status = 'completed'"
            )
        }
        assert new_worker != worker
        print(f"\nworker with 10 sessions killed → every one ended: {took:.1f} s")
        assert_each_ran_once_and_nothing_came_after_its_end(tarsy)


def test_a_frozen_worker_resumed_after_being_reaped_writes_nothing(tmp_path):
    env = {
        "TARSY_WORKERS": "1",
        "TARSY_HEARTBEAT_INTERVAL": "1",
        "TARSY_ORPHAN_THRESHOLD": "3",
        "TARSY_RECOVERY_INTERVAL": "0.5",
        "TARSY_LEASE_CHECK_INTERVAL": "0.2",
    }
    # A word every 0.5 s: the freeze lands between two writes, as a GC pause mostly would.
    # (Frozen inside a write, a worker holds SQLite's database-wide write lock, and no
    # one, the reaper included, can write until it resumes.)
    provider = slow_provider(tmp_path, words=40, delay=0.5)
    with deployment(tmp_path, provider=provider, extra_env=env) as tarsy:
        token = tarsy.api_token()
        (session_id,) = submit(tarsy, token, 1)
        wait_until(
            lambda: (
                tarsy.query(
                    "SELECT COUNT(*) FROM alert_sessions_timelineevent WHERE event_type = 'llm_response'"
                )[0][0]
                == 1
            ),
            60,  # from submission: the cluster's start-up (its MCP servers) comes first
            "the answer streaming",
            tarsy,
        )
        (worker,) = [w for (w,) in tarsy.query("SELECT worker_id FROM alert_sessions_alertsession")]
        pid = int(worker.rsplit(":", 1)[1])
        _freeze_between_writes(pid, tarsy)  # a long GC pause, a frozen VM
        try:
            wait_until(lambda: statuses(tarsy)[session_id] == "timed_out", 20, "reaped", tarsy)
            counts = _row_counts(tarsy)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        log = tarsy.data_dir / "qcluster.log"
        wait_until(
            lambda: "lease lost; this worker stops here" in log.read_text(),
            10,
            "the worker stopping",
            tarsy,
        )
        stopped = time.monotonic() - resumed
        time.sleep(2)  # anything it was going to write, it would have written by now
        assert _row_counts(tarsy) == counts
        assert statuses(tarsy)[session_id] == "timed_out"
        assert tarsy.query("SELECT final_analysis FROM alert_sessions_alertsession") == [("",)]
        assert tarsy.query("SELECT status FROM alert_sessions_stage") == [("timed_out",)]
        assert tarsy.query("SELECT status FROM alert_sessions_agentexecution") == [("timed_out",)]
        print(f"\nresumed zombie → stopped in {stopped * 1000:.0f} ms")
        assert_each_ran_once_and_nothing_came_after_its_end(tarsy)


def test_the_concurrency_limit_holds_across_two_clusters(tmp_path):
    env = {"TARSY_WORKERS": "2", "TARSY_MAX_CONCURRENT_SESSIONS": "2"}
    provider = slow_provider(tmp_path, words=20, delay=0.05)
    with deployment(tmp_path, provider=provider, extra_env=env, clusters=2) as tarsy:
        token = tarsy.api_token()
        ids = submit(tarsy, token, 6)
        most = 0
        deadline = time.monotonic() + 90
        while not all(statuses(tarsy).get(i) in TERMINAL for i in ids):
            assert time.monotonic() < deadline, tarsy.log_tail()
            most = max(most, list(statuses(tarsy).values()).count("in_progress"))
            time.sleep(0.02)
        assert most == 2  # four workers, but never more than the limit at once
        assert all(statuses(tarsy)[i] == "completed" for i in ids)
        workers = {w for (w,) in tarsy.query("SELECT worker_id FROM alert_sessions_alertsession")}
        assert len(workers) >= 2
        assert_each_ran_once_and_nothing_came_after_its_end(tarsy)


def _freeze_between_writes(pid: int, tarsy: Deployment) -> None:
    """SIGSTOP ``pid`` at a moment it holds no SQLite write lock. Frozen inside a write
    (more likely on a loaded machine, where a write takes longer), it would hold the
    database-wide lock and no one, the reaper included, could write until it resumed:
    not the situation under test. Then it is let go for a moment and frozen again."""
    import sqlite3

    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        probe = sqlite3.connect(tarsy.database, timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return
        except sqlite3.OperationalError:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError("the worker held the database's write lock at every try")


def _row_counts(tarsy: Deployment) -> dict[str, int]:
    tables = ["timelineevent", "sessionevent", "message", "llminteraction", "mcpinteraction"]
    return {t: tarsy.query(f"SELECT COUNT(*) FROM alert_sessions_{t}")[0][0] for t in tables}


def _epoch(value) -> float:
    from datetime import datetime

    if isinstance(value, str):  # SQLite stores "YYYY-MM-DD HH:MM:SS.ffffff" in UTC
        value = datetime.fromisoformat(value.replace(" ", "T") + "+00:00")
    return value.timestamp()
