"""A burst of demo investigations against a lone one, on the default deployment (issue 19).

``bin/run``'s processes and settings (daphne + one qcluster of ``TARSY_WORKERS=2``,
SQLite, the queue polled every 0.1 s) and the scripted demo provider investigating the
demo cluster for real (MCP tool calls, streamed words). First ``--lone`` investigations
one at a time, then ``--burst`` sent at once. For each: the wall time from the request
to its end, the wait before a worker claimed it, and its run (claim → end). Aim: the
whole burst ends within twice a lone investigation's wall time.

With ``--cancel``, one session of the burst is cancelled while the others stream, and the
time from the request to ``cancelled`` is reported (it leaves the burst's figures).

Usage: .venv/bin/python bench/burst.py [--burst 20] [--lone 3] [--cancel] [--env NAME=VALUE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from bench.stats import load_average, percentile
from tests import sqlite_template
from tests.e2e.harness import demo_provider, deployment
from tests.e2e.test_faults import _epoch

ALERT = "alert: PodCrashLooping\nnamespace: payments\ndeployment: payments-api"
TERMINAL = ("completed", "failed", "timed_out", "cancelled")
# What bin/run runs with; the test harness's own defaults differ (one worker, 0.05 s poll).
DEFAULTS = {"TARSY_WORKERS": "2", "TARSY_QUEUE_POLL": "0.1"}


def send(tarsy, token: str) -> tuple[str, float]:
    sent = time.time()
    status, body = tarsy.api("POST", "/api/v1/alerts", token, {"data": ALERT})
    assert status == 202, body
    return body["session_id"].replace("-", ""), sent


def wait_for_ends(tarsy, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    marks = ",".join("%s" for _ in ids)
    while True:
        rows = tarsy.query(
            f"SELECT status FROM alert_sessions_alertsession WHERE id IN ({marks})", tuple(ids)
        )
        if len(rows) == len(ids) and all(status in TERMINAL for (status,) in rows):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not ended within {timeout} s\n{tarsy.log_tail()}")
        time.sleep(0.1)


def timings(tarsy, sent: dict[str, float]) -> list[dict[str, float | str]]:
    """Per session: status, wall (request → end), wait (request → claim), run (claim → end)."""
    marks = ",".join("%s" for _ in sent)
    rows = tarsy.query(
        "SELECT id, status, started_at, completed_at FROM alert_sessions_alertsession "
        f"WHERE id IN ({marks})",
        tuple(sent),
    )
    result = []
    for session_id, status, started, completed in rows:
        began, ended = _epoch(started), _epoch(completed)
        result.append(
            {
                "status": status,
                "wall": ended - sent[session_id],
                "wait": began - sent[session_id],
                "run": ended - began,
                "ended": ended,
            }
        )
    return result


def cancel_one(tarsy, token: str, sent_at: dict[str, float]) -> list[float]:
    """Cancel one session of the burst while the others stream; returns request →
    cancelled in ms (the session leaves the burst's figures)."""
    victim = next(iter(sent_at))

    def streaming() -> bool:
        return (
            tarsy.query(
                "SELECT COUNT(*) FROM alert_sessions_timelineevent WHERE session_id = %s "
                "AND event_type = 'llm_response' AND status = 'streaming'",
                (victim,),
            )[0][0]
            > 0
        )

    deadline = time.monotonic() + 120
    while not streaming():
        assert time.monotonic() < deadline, tarsy.log_tail()
        time.sleep(0.01)
    asked = time.monotonic()
    path = f"/api/v1/sessions/{uuid.UUID(victim)}/cancel"
    status, body = tarsy.api("POST", path, token, {})
    assert status == 200, body
    while tarsy.query(
        "SELECT status FROM alert_sessions_alertsession WHERE id = %s", (victim,)
    ) != [("cancelled",)]:
        assert time.monotonic() - asked < 30, tarsy.log_tail()
        time.sleep(0.005)
    del sent_at[victim]
    return [(time.monotonic() - asked) * 1000]


def line(name: str, values: list[float]) -> str:
    return (
        f"  {name:<28} median={statistics.median(values):7.2f} s  "
        f"p95={percentile(values, 0.95):7.2f} s  max={max(values):7.2f} s"
    )


@contextlib.contextmanager
def _harness(workdir: Path) -> Iterator[None]:
    """What tests/conftest.py sets up for the harness: Django in this process (it writes
    the provider's row itself) and a place for the migrated template database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")
    os.environ.setdefault("TARSY_DATA_DIR", str(workdir / "bench-process"))
    import django

    django.setup()
    sqlite_template.SHARED_DIR = workdir / "templates"
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--lone", type=int, default=3)
    parser.add_argument("--chunk-delay", type=float, default=0.04)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the workers")
    parser.add_argument(
        "--cancel", action="store_true", help="also cancel one session of the burst, timed"
    )
    args = parser.parse_args()
    env = {**DEFAULTS, **dict(item.split("=", 1) for item in args.env)}
    print(f"starting; {load_average()}; env {env}")
    with (
        tempfile.TemporaryDirectory() as workdir,
        _harness(Path(workdir)),
        deployment(
            Path(workdir), provider=demo_provider(chunk_delay=args.chunk_delay), extra_env=env
        ) as tarsy,
    ):
        token = tarsy.api_token()
        send(tarsy, token)  # a first run warms the worker (imports, MCP servers)
        wait_for_ends(
            tarsy, [i for (i,) in tarsy.query("SELECT id FROM alert_sessions_alertsession")], 120
        )

        lone: list[dict[str, float | str]] = []
        for _ in range(args.lone):
            session_id, sent = send(tarsy, token)
            wait_for_ends(tarsy, [session_id], 120)
            lone += timings(tarsy, {session_id: sent})

        sent_at: dict[str, float] = {}
        lock = threading.Lock()

        def one() -> None:
            session_id, sent = send(tarsy, token)
            with lock:
                sent_at[session_id] = sent

        threads = [threading.Thread(target=one) for _ in range(args.burst)]
        began = time.time()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cancels = cancel_one(tarsy, token, sent_at) if args.cancel else []
        wait_for_ends(tarsy, list(sent_at), 600)
        burst = timings(tarsy, sent_at)
        burst_wall = max(float(b["ended"]) for b in burst) - began  # first request → last end
        load = load_average()
        marks = ",".join("%s" for _ in sent_at)
        (workers,) = tarsy.query(
            "SELECT COUNT(DISTINCT worker_id) FROM alert_sessions_alertsession "
            f"WHERE id IN ({marks})",
            tuple(sent_at),
        )[0]

    lone_wall = statistics.median(float(t["wall"]) for t in lone)
    print()
    print(f"SQLite (WAL), bin/run's settings {env}, demo chunk_delay {args.chunk_delay}; {load}")
    print(f"lone investigation (n={len(lone)}):")
    for key in ("wall", "wait", "run"):
        print(line(key, [float(t[key]) for t in lone]))
    statuses = sorted({str(t["status"]) for t in burst})
    print(f"burst of {len(burst)} sent at once (statuses {statuses}; {workers} worker processes):")
    for key in ("wall", "wait", "run"):
        print(line(key, [float(t[key]) for t in burst]))
    if cancels:
        print(f"  cancel of one session mid-burst: request → cancelled {cancels[0]:.0f} ms")
    print(
        f"whole burst: {burst_wall:.2f} s = {burst_wall / lone_wall:.2f} times a lone "
        f"investigation ({lone_wall:.2f} s); aim: at most 2"
    )


if __name__ == "__main__":
    main()
