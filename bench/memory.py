"""Memory of the whole deployment: idle, and with 1, 10 and 20 investigations running.

``bin/run``'s processes and settings (daphne + one qcluster of ``TARSY_WORKERS=2``,
SQLite) and the scripted demo provider investigating the demo cluster for real (its MCP
servers are stdio child processes of the workers). The PSS (proportional set size: shared
pages split between the processes sharing them) of every process of the deployment is
summed: daphne, the qcluster and its workers, and every process they started (found by
walking the ``children`` of every thread of every process, so MCP servers started from
the hub's thread count too). Sampled while all N investigations of a round run; the
largest of the samples is kept. Aim: at most 12 MB more per additional investigation.

Usage: .venv/bin/python bench/memory.py [--rounds 1,10,20] [--chunk-delay 0.15] [--env NAME=VALUE]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.burst import DEFAULTS, _harness, send, wait_for_ends
from bench.stats import load_average
from tests.e2e.harness import demo_provider, deployment


def tree(root: int) -> set[int]:
    """``root`` and every process descended from it, through every thread's children."""
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def pss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def deployment_pss(tarsy) -> tuple[float, int]:
    """(MB, process count) of everything the deployment runs."""
    pids: set[int] = set()
    for process in tarsy.processes:
        pids |= tree(process.pid)
    return sum(pss_kib(pid) for pid in pids) / 1024, len(pids)


def running(tarsy, ids: list[str]) -> int:
    marks = ",".join("%s" for _ in ids)
    return tarsy.query(
        "SELECT COUNT(*) FROM alert_sessions_alertsession "
        f"WHERE status = 'in_progress' AND id IN ({marks})",
        tuple(ids),
    )[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="1,10,20")
    parser.add_argument("--chunk-delay", type=float, default=0.15, help="long runs to sample")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the workers")
    args = parser.parse_args()
    env = {**DEFAULTS, **dict(item.split("=", 1) for item in args.env)}
    rounds = [int(n) for n in args.rounds.split(",")]
    results: list[tuple[str, float, int, str]] = []
    with (
        tempfile.TemporaryDirectory() as workdir,
        _harness(Path(workdir)),
        deployment(
            Path(workdir), provider=demo_provider(chunk_delay=args.chunk_delay), extra_env=env
        ) as tarsy,
    ):
        token = tarsy.api_token()
        time.sleep(5)  # settled after start-up
        mb, count = deployment_pss(tarsy)
        results.append(("idle, just started", mb, count, load_average()))
        # A first investigation in each worker process: imports, SDK clients, MCP servers.
        warm = [send(tarsy, token)[0] for _ in range(4)]
        wait_for_ends(tarsy, warm, 300)
        time.sleep(3)
        mb, count = deployment_pss(tarsy)
        results.append(("idle, warm", mb, count, load_average()))
        for n in rounds:
            ids = [send(tarsy, token)[0] for _ in range(n)]
            deadline = time.monotonic() + 120
            while running(tarsy, ids) < n:
                assert time.monotonic() < deadline, tarsy.log_tail()
                time.sleep(0.2)
            samples = []
            for _ in range(5):
                if running(tarsy, ids) < n:
                    break
                samples.append(deployment_pss(tarsy))
                time.sleep(1)
            mb, count = max(samples)
            results.append((f"{n} running", mb, count, load_average()))
            wait_for_ends(tarsy, ids, 600)

    print(f"\nSQLite, bin/run's settings {env}, demo chunk_delay {args.chunk_delay}")
    for label, mb, count, load in results:
        print(f"  {label:<20} PSS {mb:8.1f} MB in {count:>3} processes  ({load})")
    by_n = {int(label.split()[0]): mb for label, mb, _, _ in results if label.endswith("running")}
    if 1 in by_n:
        for n, mb in sorted(by_n.items()):
            if n > 1:
                print(
                    f"  per additional investigation, 1 → {n}: "
                    f"{(mb - by_n[1]) / (n - 1):6.2f} MB  (aim: at most 12)"
                )


if __name__ == "__main__":
    main()
