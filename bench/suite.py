"""How long does the test suite take, in one process and in several?

Runs pytest over the suite (or ``--fast``'s selection: no ``real_process``, no ``slow``)
once per worker count given, ``--runs`` times each, and prints each count's wall times
(median, p95), its pass/fail/skip counts, the ratio of its median to the first count's,
and the load average before and after. Run it on an idle machine: the suite is what
loads it. ``bin/test`` does the set-up and lint; this times pytest alone.

Usage: .venv/bin/python bench/suite.py [--workers 0,4] [--runs 1] [--fast]
       [--against SECONDS] [pytest arguments...]

``--against`` compares with a wall time measured elsewhere (1,710 s: the SQLite suite
of a clean-clone ``bin/test`` before issue 18, in one process).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stats import load_average, percentile

ROOT = Path(__file__).resolve().parents[1]
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?)")


def run(workers: int, fast: bool, extra: list[str]) -> tuple[float, dict[str, int], str]:
    command = [
        str(ROOT / ".venv/bin/pytest"),
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        str(workers),
        "--dist",
        "loadgroup",
    ]
    if fast:
        command += ["-m", "not real_process and not slow"]
    env = {**os.environ, "TARSY_DATA_DIR": tempfile.mkdtemp(prefix="tarsy-bench-suite-")}
    started = time.monotonic()
    result = subprocess.run(command + extra, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    counts = {kind.rstrip("s"): int(n) for n, kind in COUNTS.findall(last)}
    return wall, counts, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,4", help="worker counts, comma-separated")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fast", action="store_true", help="bin/test --fast's selection")
    parser.add_argument("--against", type=float, help="a wall time measured elsewhere, s")
    args, extra = parser.parse_known_args()
    counts = [int(n) for n in args.workers.split(",")]
    print(f"before: {load_average()}")
    medians: dict[int, float] = {}
    for workers in counts:
        walls = []
        for _ in range(args.runs):
            wall, tally, last = run(workers, args.fast, extra)
            walls.append(wall)
            print(f"  -n {workers}: {wall:7.1f} s  {last}", flush=True)
            if tally.get("failed") or tally.get("error"):
                print(f"  -n {workers}: FAILURES in this run", flush=True)
        medians[workers] = statistics.median(walls)
        line = (
            f"-n {workers:<2} runs={len(walls)} median={medians[workers]:7.1f} s "
            f"p95={percentile(walls, 0.95):7.1f} s"
        )
        if workers != counts[0]:
            line += f"  median/-n {counts[0]}={medians[workers] / medians[counts[0]]:.2f}"
        if args.against:
            line += f"  median/{args.against:g} s={medians[workers] / args.against:.2f}"
        print(line, flush=True)
    print(f"after: {load_average()}")


if __name__ == "__main__":
    main()
