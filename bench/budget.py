"""What a budget costs (issue 23): the check every model call and tool call makes
(``SessionBudget.exhausted``, in memory), and the live meters the session page gets after
each recorded call (``sessions.budget.meters``: the session and three aggregate queries
over its calls), for sessions of 100, 1,000 and 5,000 model calls (plus as many tool
calls), in this process, on SQLite or PostgreSQL.

Prints p50 / p99 per size, the ratio of the largest to the smallest, and the load.

Usage: .venv/bin/python bench/budget.py [--db sqlite|postgres] [--sizes 100,1000,5000] [--reads 50]
PostgreSQL: the server in TARSY_TEST_POSTGRES_URL; an empty database is made and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.django_db import fresh_database  # noqa: E402
from bench.stats import load_average, percentile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    with fresh_database(args.db, prefix="tarsy-bench-budget-"):
        run(args)


def run(args: argparse.Namespace) -> None:
    from decimal import Decimal

    from django.utils import timezone

    from agents.budget import SessionBudget
    from sessions.budget import meters
    from sessions.models import (
        AgentExecution,
        AlertSession,
        LLMInteraction,
        MCPInteraction,
        Stage,
    )

    limits = {"tokens": 1e9, "cost_usd": 1e6, "wall_time": 1e6, "tool_calls": 1e9, "llm_calls": 1e9}
    print(f"budget on {args.db}, {args.reads} reads per size; {load_average()}")

    # The check before each call: in memory, no query until a limit is reached.
    budget = SessionBudget(limits, lease=None)  # type: ignore[arg-type]
    checks = []
    loop = asyncio.new_event_loop()
    for _ in range(10_000):
        budget.spend_call(500, 0.001)
        started = time.perf_counter()
        loop.run_until_complete(budget.exhausted())
        checks.append((time.perf_counter() - started) * 1e6)
    print(
        f"  check before a call (in memory): p50 {statistics.median(checks):6.1f} µs  "
        f"p99 {percentile(checks, 0.99):6.1f} µs"
    )

    results = {}
    for size in [int(s) for s in args.sizes.split(",")]:
        session = AlertSession.objects.create(
            alert_type="bench", alert_data="x", chain_id="bench", budget={**limits},
            started_at=timezone.now(),
        )  # fmt: skip
        stage = Stage.objects.create(session=session, name="s", index=0)
        execution = AgentExecution.objects.create(session=session, stage=stage, agent_name="a")
        LLMInteraction.objects.bulk_create(
            [
                LLMInteraction(
                    session=session, execution=execution, provider="p", backend="b",
                    total_tokens=700, estimated_cost_usd=Decimal("0.0012"),
                )
                for _ in range(size)
            ],
            batch_size=1000,
        )  # fmt: skip
        MCPInteraction.objects.bulk_create(
            [
                MCPInteraction(session=session, execution=execution, server_name="k",
                               tool_name="get_pods", result="ok")
                for _ in range(size)
            ],
            batch_size=1000,
        )  # fmt: skip
        times = []
        for _ in range(args.reads):
            started = time.perf_counter()
            fresh = AlertSession.objects.get(id=session.id)  # as the live path reads it
            shown = meters(fresh)
            times.append((time.perf_counter() - started) * 1000)
        assert len(shown) == 5, shown
        assert shown[-1].spent == f"{size:,}", shown
        results[size] = times
        print(
            f"  meters of a session of {size:>5} calls: p50 {statistics.median(times):6.2f} ms  "
            f"p99 {percentile(times, 0.99):6.2f} ms"
        )
    sizes = sorted(results)
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        ratio = statistics.median(results[large]) / statistics.median(results[small])
        print(f"  p50 ratio {large}/{small} calls: {ratio:.1f} (size ratio {large / small:g})")
    print(f"  {load_average()}")


if __name__ == "__main__":
    main()
