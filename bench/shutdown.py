"""How fast does a qcluster stop, and how soon does the work it hands back run again?
Measured on real deployments (SQLite, one worker, a scripted model slow enough that the
session outlasts the grace).

1. **SIGTERM → cluster exited**, with a session running: SIGTERM to the qcluster's main
   process, as ``docker stop`` and Kubernetes send it, until the process has exited
   (every process of its group gone). The session gets ``TARSY_SHUTDOWN_GRACE`` (``--grace``,
   3 s here to keep trials short; 20 s by default), so the figure is the grace plus what
   stopping costs. Measured with ``TARSY_SHUTDOWN_REQUEUE`` off (the session ends failed)
   and on (it goes back to the queue). Aim: the grace + 2 s.
2. **SIGTERM → requeued session started again**: with requeue on, the qcluster is started
   again as soon as it has exited; until the interrupted session is claimed again. The
   figure includes the exit and the new cluster's start (its warm-up). Aim: the grace + 15 s.

Usage: .venv/bin/python bench/shutdown.py [--trials N] [--grace SECONDS]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from bench.stats import load_average, summary
from tests.e2e.harness import Deployment, deployment
from tests.e2e.test_faults import slow_provider, statuses, submit, wait_until
from tests.e2e.test_shutdown import stop_like_a_container


def _streaming(tarsy: Deployment) -> bool:
    rows = tarsy.query(
        "SELECT COUNT(*) FROM alert_sessions_timelineevent "
        "WHERE event_type = 'llm_response' AND status = 'streaming'"
    )
    return rows[0][0] == 1


def _environment(grace: float, requeue: bool) -> dict[str, str]:
    return {
        "TARSY_WORKERS": "1",
        "TARSY_SHUTDOWN_GRACE": str(grace),
        "TARSY_SHUTDOWN_REQUEUE": "true" if requeue else "false",
    }


def failed_trials(workdir: Path, count: int, grace: float) -> list[float]:
    """A new session each trial, stopped while it streams; the cluster restarted after."""
    exits = []
    provider = slow_provider(workdir, words=2000, delay=0.05)
    with deployment(workdir, provider=provider, extra_env=_environment(grace, False)) as tarsy:
        token = tarsy.api_token()
        for trial in range(count):
            (session_id,) = submit(tarsy, token, 1)
            wait_until(lambda: _streaming(tarsy), 60, "the answer streaming", tarsy)
            exits.append(stop_like_a_container(tarsy))
            assert statuses(tarsy)[session_id] == "failed"
            print(f"  requeue off, trial {trial + 1}: exited {exits[-1]:.2f} s after SIGTERM")
            tarsy.restart("qcluster")
    return exits


def requeue_trials(workdir: Path, count: int, grace: float) -> tuple[list[float], list[float]]:
    """One session, stopped while it streams, trial after trial: each restart runs it again."""
    exits, restarts = [], []
    provider = slow_provider(workdir, words=2000, delay=0.05)
    with deployment(workdir, provider=provider, extra_env=_environment(grace, True)) as tarsy:
        token = tarsy.api_token()
        (session_id,) = submit(tarsy, token, 1)
        for trial in range(count):
            wait_until(lambda: _streaming(tarsy), 60, "the answer streaming", tarsy)
            sent = time.monotonic()
            exits.append(stop_like_a_container(tarsy))
            assert statuses(tarsy)[session_id] == "pending"
            tarsy.restart("qcluster")
            wait_until(
                lambda: statuses(tarsy)[session_id] == "in_progress",
                120,
                "the session running again",
                tarsy,
            )
            restarts.append(time.monotonic() - sent)
            print(
                f"  requeue on, trial {trial + 1}: exited {exits[-1]:.2f} s after SIGTERM, "
                f"running again {restarts[-1]:.2f} s after it"
            )
    return exits, restarts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--grace", type=float, default=3.0)
    args = parser.parse_args()
    print(f"starting; {load_average()}")

    with tempfile.TemporaryDirectory() as workdir:
        failed = failed_trials(Path(workdir), args.trials, args.grace)
    with tempfile.TemporaryDirectory() as workdir:
        requeued, restarted = requeue_trials(Path(workdir), args.trials, args.grace)

    grace = args.grace
    print()
    print(f"SQLite (WAL), 1 worker, TARSY_SHUTDOWN_GRACE={grace:g} s; {load_average()}")
    print(summary("SIGTERM → exited (requeue off)", failed, grace + 2, "s"))
    print(summary("SIGTERM → exited (requeue on)", requeued, grace + 2, "s"))
    print(summary("SIGTERM → requeued session running", restarted, grace + 15, "s"))
    beyond = [took - grace for took in failed + requeued]
    print(summary("exit beyond the grace (both)", beyond, 2, "s"))


if __name__ == "__main__":
    main()
