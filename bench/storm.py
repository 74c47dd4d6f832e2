"""An alert storm with the duplicate-alert cooldown on (issue 23 item 1): ``--alerts``
identical alerts (one storm: the same alert from different pods) sent at once from
``--clients`` threads to one deployment (daphne + one qcluster, SQLite; or PostgreSQL
with ``--postgres URL``: two daphne processes and two qclusters on a fresh database).
Reports submit → answer latency p50/p99 of the first alert and the deduplicated ones,
and checks that one session took them all.

Usage: .venv/bin/python bench/storm.py [--alerts 50] [--clients 10] [--rounds 3]
       [--postgres postgres://user:password@host:5432/db]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]
# Run as a script, bench/ comes first on the path, and bench/mcp.py would hide the SDK.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT_DIR / "bench"]
sys.path.insert(0, str(ROOT_DIR))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

import yaml  # noqa: E402

from bench.burst import _harness  # noqa: E402
from bench.stats import load_average, percentile  # noqa: E402
from tests.e2e.harness import ROOT, demo_provider, deployment, scaled_deployment  # noqa: E402

ALERT = "alert: PodCrashLooping\nnamespace: payments\ndeployment: payments-api"


def write_config(where: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config.setdefault("defaults", {})["dedup"] = {
        "enabled": True,
        "fields": ["alertname", "namespace", "deployment"],
    }
    path = where / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def one_storm(tarsy, token: str, alerts: int, clients: int, tag: str) -> tuple[list, list]:
    """(ms of the alert that started the session, ms of each deduplicated one)."""
    urls = tarsy.web_urls or [tarsy.base_url]

    def send(n: int) -> tuple[float, dict]:
        # The namespace makes each round a storm of its own.
        data = ALERT.replace("payments\n", f"payments-{tag}\n") + f"\npod: payments-api-{n}"
        began = time.perf_counter()
        status, body = tarsy.api(
            "POST", "/api/v1/alerts", token, {"data": data}, base_url=urls[n % len(urls)]
        )
        assert status == 202, body
        return (time.perf_counter() - began) * 1000, body

    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(send, range(alerts)))
    sessions = {body["session_id"] for _, body in answers}
    assert len(sessions) == 1, f"{len(sessions)} sessions for one storm"
    first = [ms for ms, body in answers if not body.get("deduplicated")]
    assert len(first) == 1, first
    return first, [ms for ms, body in answers if body.get("deduplicated")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=50)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--postgres", default="", help="a server URL whose role may CREATE DATABASE"
    )
    args = parser.parse_args()
    print(f"starting; {load_average()}")
    with tempfile.TemporaryDirectory() as workdir, _harness(Path(workdir)):
        env = {"TARSY_CONFIG": str(write_config(Path(workdir))), "TARSY_WORKERS": "2"}
        provider = demo_provider(chunk_delay=0.04)
        if args.postgres:
            where = "PostgreSQL, 2 daphne + 2 qclusters"
            running = scaled_deployment(
                Path(workdir), provider=provider, server_url=args.postgres, extra_env=env
            )
        else:
            where = "SQLite (WAL), 1 daphne + 1 qcluster"
            running = deployment(Path(workdir), provider=provider, extra_env=env)
        firsts: list[float] = []
        repeats: list[float] = []
        with running as tarsy:
            token = tarsy.api_token()
            one_storm(tarsy, token, 5, 5, "warm-up")  # imports, connections
            for n in range(args.rounds):
                first, dedup = one_storm(tarsy, token, args.alerts, args.clients, f"r{n}")
                firsts += first
                repeats += dedup
            load = load_average()
    print()
    print(f"{where}; {args.alerts} identical alerts from {args.clients} clients, ")
    print(f"{args.rounds} rounds; {load}")
    print(
        f"  dedup answer (n={len(repeats)}): p50={statistics.median(repeats):7.1f} ms  "
        f"p99={percentile(repeats, 0.99):7.1f} ms  max={max(repeats):7.1f} ms"
    )
    print(f"  first alert (n={len(firsts)}): p50={statistics.median(firsts):7.1f} ms")
    print(f"  one session per storm: yes ({args.rounds} of {args.rounds})")


if __name__ == "__main__":
    main()
