"""Chains on a real deployment (daphne + qcluster, SQLite, the scripted demo provider):

1. **Cancel → cancelled.** A session streams its answer; ``POST /api/v1/sessions/{id}/cancel``
   is sent; the clock stops when the database says ``cancelled`` (polled every 5 ms).
   Default settings (``TARSY_LEASE_CHECK_INTERVAL`` 0.5 s). Aim: under 1 s.
2. **The deep demo's parallel stage.** Its wall time against the sum of its two agents'
   times: they run side by side, so the ratio is well under 1.

Usage: .venv/bin/python bench/chains.py [--cancels N] [--deep N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from bench.stats import load_average, summary
from tests.e2e.harness import demo_provider, deployment
from tests.e2e.test_faults import _epoch, statuses, wait_until

DEMO = demo_provider(chunk_delay=0.05)
ALERT = "alert: PodCrashLooping\nnamespace: payments\ndeployment: payments-api"


def submit(tarsy, token: str, alert_type: str) -> str:
    status, body = tarsy.api(
        "POST", "/api/v1/alerts", token, {"data": ALERT, "alert_type": alert_type}
    )
    assert status == 202, body
    return body["session_id"]


def cancel_trials(tarsy, token: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        session_id = submit(tarsy, token, "PodCrashLooping")
        key = session_id.replace("-", "")

        def streaming(key: str = key) -> bool:
            rows = tarsy.query(
                "SELECT COUNT(*) FROM alert_sessions_timelineevent WHERE session_id = %s "
                "AND status = 'streaming'",
                (key,),
            )
            return rows[0][0] > 0

        wait_until(streaming, 60, "streaming", tarsy)
        time.sleep(0.3)
        asked = time.monotonic()
        status, body = tarsy.api("POST", f"/api/v1/sessions/{session_id}/cancel", token, {})
        assert status == 200, body
        while statuses(tarsy)[key] != "cancelled":
            assert time.monotonic() - asked < 30, tarsy.log_tail()
            time.sleep(0.005)
        latencies.append((time.monotonic() - asked) * 1000)
    return latencies


def deep_trials(tarsy, token: str, count: int) -> list[tuple[float, float]]:
    results = []
    for _ in range(count):
        session_id = submit(tarsy, token, "DeepInvestigation")
        key = session_id.replace("-", "")
        wait_until(lambda k=key: statuses(tarsy)[k] == "completed", 120, "deep demo", tarsy)
        (stage,) = tarsy.query(
            "SELECT id, started_at, completed_at FROM alert_sessions_stage "
            "WHERE session_id = %s AND stage_type = 'investigation'",
            (key,),
        )
        agents = tarsy.query(
            "SELECT started_at, completed_at FROM alert_sessions_agentexecution WHERE stage_id = %s",
            (stage[0],),
        )
        wall = _epoch(stage[2]) - _epoch(stage[1])
        total = sum(_epoch(end) - _epoch(start) for start, end in agents)
        results.append((wall, total))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cancels", type=int, default=20)
    parser.add_argument("--deep", type=int, default=5)
    args = parser.parse_args()
    print(f"starting; {load_average()}")
    with (
        tempfile.TemporaryDirectory() as workdir,
        deployment(Path(workdir), provider=DEMO) as tarsy,
    ):
        token = tarsy.api_token()
        latencies = cancel_trials(tarsy, token, args.cancels)
        deep = deep_trials(tarsy, token, args.deep)
    print()
    print(f"SQLite (WAL), 1 worker, default settings; {load_average()}")
    print(summary("cancel request → session cancelled", latencies, 1000.0))
    walls = [wall for wall, _ in deep]
    ratios = [wall / total for wall, total in deep]
    print(
        f"{'deep demo parallel stage':<40} n={len(deep):<4} median wall={statistics.median(walls):6.2f} s  "
        f"median sum of agents={statistics.median(t for _, t in deep):6.2f} s  "
        f"median wall/sum={statistics.median(ratios):5.2f}  max wall/sum={max(ratios):5.2f}"
    )


if __name__ == "__main__":
    main()
