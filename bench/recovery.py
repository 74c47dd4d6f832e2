"""How fast does TARSy recover from a bad night? Measured on real deployments.

1. **Cluster restart → last stuck session started.** A fresh deployment with 2 workers
   gets 6 slow sessions (2 run, 4 wait); the whole qcluster process group is killed with
   SIGKILL and started again at once. Reported: from the restart to the moment the last
   of the 4 queued sessions started (its ``started_at``), and to every session ending.
   Default recovery settings. Aim: ≤ 60 s.
2. **Zombie worker stop.** A worker running a session is frozen with SIGSTOP until the
   reaper has timed its session out, then resumed with SIGCONT. Reported: from SIGCONT
   to the worker's log line saying it lost its lease and stops (timestamps in the log).
   Default heartbeat (10 s) and lease check (1 s); the orphan threshold is lowered to
   20 s to keep trials short. Aim: ≤ the heartbeat interval.

Usage: .venv/bin/python bench/recovery.py [--restarts N] [--zombies N]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from bench.stats import load_average, summary
from tests.e2e.harness import deployment, process_group
from tests.e2e.test_faults import TERMINAL, _epoch, slow_provider, statuses, submit, wait_until

AIM_RESTART_S = 60.0
HEARTBEAT_S = 10.0


def restart_trial(workdir: Path) -> tuple[float, float]:
    # One session per worker: two run and four wait, as when this was first measured.
    env = {"TARSY_WORKERS": "2", "TARSY_WORKER_SESSIONS": "1"}
    with deployment(workdir, provider=slow_provider(workdir), extra_env=env) as tarsy:
        token = tarsy.api_token()
        ids = submit(tarsy, token, 6)
        wait_until(
            lambda: list(statuses(tarsy).values()).count("in_progress") == 2, 30, "2 running", tarsy
        )
        time.sleep(1)
        cluster = tarsy.processes[list(tarsy.commands).index("qcluster")]
        os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait(timeout=10)
        wait_until(lambda: not process_group(cluster.pid), 10, "cluster dead", tarsy)
        queued = [i for i, status in statuses(tarsy).items() if status == "pending"]
        restarted = time.time()
        tarsy.restart("qcluster")

        def all_started() -> bool:
            current = statuses(tarsy)
            return all(current[i] != "pending" for i in queued)

        wait_until(all_started, 180, "the queued sessions started", tarsy)
        starts = dict(tarsy.query("SELECT id, started_at FROM alert_sessions_alertsession"))
        last_start = max(_epoch(starts[i]) for i in queued) - restarted
        wait_until(
            lambda: all(s in TERMINAL for s in statuses(tarsy).values()), 240, "all ended", tarsy
        )
        ended = time.time() - restarted
        assert len(ids) == 6
        return last_start, ended


def zombie_trials(workdir: Path, count: int) -> list[float]:
    env = {
        "TARSY_WORKERS": "1",
        "TARSY_ORPHAN_THRESHOLD": "20",
        "TARSY_RECOVERY_INTERVAL": "1",
    }
    provider = slow_provider(workdir, words=2000, delay=0.05)
    stops = []
    with deployment(workdir, provider=provider, extra_env=env) as tarsy:
        token = tarsy.api_token()
        log = tarsy.data_dir / "qcluster.log"
        for trial in range(count):
            (session_id,) = submit(tarsy, token, 1)
            wait_until(
                lambda sid=session_id: statuses(tarsy)[sid] == "in_progress", 30, "running", tarsy
            )
            time.sleep(2)  # streaming its answer
            rows = tarsy.query("SELECT id, worker_id FROM alert_sessions_alertsession")
            worker = dict(rows)[session_id]
            pid = int(worker.rsplit(":", 1)[1])
            os.kill(pid, signal.SIGSTOP)
            try:
                wait_until(
                    lambda sid=session_id: statuses(tarsy)[sid] == "timed_out", 60, "reaped", tarsy
                )
            finally:
                resumed = time.time()
                os.kill(pid, signal.SIGCONT)
            marker = f"session {session_id[:8]}"
            wait_until(
                lambda sid=session_id: _lease_lost_at(log, sid) is not None, 30, "stop", tarsy
            )
            stopped = _lease_lost_at(log, session_id)
            stops.append((stopped - resumed) * 1000)
            print(
                f"  zombie trial {trial + 1}: stopped {stops[-1]:.0f} ms after SIGCONT ({marker})"
            )
    return stops


def _lease_lost_at(log: Path, session_id: str) -> float | None:
    dashed = f"{session_id[:8]}-{session_id[8:12]}-{session_id[12:16]}-{session_id[16:20]}-{session_id[20:]}"
    for line in log.read_text(errors="replace").splitlines():
        if "lease lost; this worker stops here" in line and dashed in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
            return stamp.timestamp()
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--zombies", type=int, default=5)
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    print(f"starting; {load_average()}")

    last_starts, endings = [], []
    for trial in range(args.restarts):
        with tempfile.TemporaryDirectory() as workdir:
            last_start, ended = restart_trial(Path(workdir))
        last_starts.append(last_start)
        endings.append(ended)
        print(
            f"  restart trial {trial + 1}: last stuck session started {last_start:.1f} s, all ended {ended:.1f} s"
        )
    with tempfile.TemporaryDirectory() as workdir:
        stops = zombie_trials(Path(workdir), args.zombies) if args.zombies else []

    print()
    print(f"SQLite (WAL), default recovery settings; {load_average()}")
    if last_starts:
        print(
            summary("cluster restart → last stuck session start", last_starts, AIM_RESTART_S, "s")
        )
        print(summary("cluster restart → every session ended", endings, 120.0, "s"))
    if stops:
        print(summary("zombie resumed → stopped", stops, HEARTBEAT_S * 1000))


if __name__ == "__main__":
    main()
