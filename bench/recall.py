"""What recalling investigation memories costs (issue 21): the query a session's start
runs (sessions/selectors/memory.recall: every candidate's vector compared, keyword ranks,
fusion, confidence and decay) over a store of 1,000 and 10,000 lessons made by the
built-in embedder, in this process, on SQLite or PostgreSQL.

Prints p50 / p99 per store size and the ratio of the two sizes (linear in the store: the
ratio should stay near 10 or below), and the machine's load.

Usage: .venv/bin/python bench/recall.py [--db sqlite|postgres] [--sizes 1000,10000] [--queries 50]
PostgreSQL: the server in TARSY_TEST_POSTGRES_URL; an empty database is made and dropped.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.django_db import fresh_database  # noqa: E402
from bench.stats import load_average, percentile  # noqa: E402

SERVICES = ["payments-api", "checkout", "coredns", "ingress-nginx", "orders-db", "search",
            "auth-gateway", "billing-worker", "kafka-broker", "redis-cache"]  # fmt: skip
FAILURES = ["OOMKilled at its memory limit", "CrashLoopBackOff after a bad config map",
            "503s when its upstream times out", "evicted under node disk pressure",
            "slow queries after an index was dropped", "TLS errors after a certificate expired",
            "throttled at its CPU limit", "failed readiness probes during a rollout"]  # fmt: skip
FIXES = ["raise the limit", "roll back the deployment", "restart the pods",
         "scale the node pool", "recreate the index", "renew the certificate"]  # fmt: skip


def lesson(rng: random.Random) -> str:
    service, failure, fix = rng.choice(SERVICES), rng.choice(FAILURES), rng.choice(FIXES)
    namespace = rng.choice(["prod", "staging", "payments", "platform"])
    return (
        f"{service} in {namespace} was {failure}; {fix} resolved it (case {rng.randint(1, 10**6)})"
    )


def alert(rng: random.Random) -> str:
    service, failure = rng.choice(SERVICES), rng.choice(FAILURES)
    return f"alert: {failure}\npod: {service}-{rng.randint(1000, 9999)}\nnamespace: prod"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    with fresh_database(args.db, prefix="tarsy-bench-recall-"):
        run(args)


def run(args: argparse.Namespace) -> None:
    from django.utils import timezone

    from llm.embeddings import LocalHashingEmbedder, to_blob
    from sessions.models import InvestigationMemory
    from sessions.selectors.memory import recall

    embedder = LocalHashingEmbedder()
    rng = random.Random(7)
    print(f"recall on {args.db}, {args.queries} queries per size; {load_average()}")
    results = {}
    stored = 0
    for size in [int(s) for s in args.sizes.split(",")]:
        texts = [lesson(rng) for _ in range(size - stored)]
        vectors = embedder.embed(texts, "document")
        now = timezone.now()
        InvestigationMemory.objects.bulk_create(
            [
                InvestigationMemory(
                    content=text, category="episodic", valence="positive",
                    embedding=to_blob(vector), embedding_model=embedder.name,
                    dimensions=embedder.dimensions, updated_at=now, last_seen_at=now,
                )
                for text, vector in zip(texts, vectors, strict=True)
            ],
            batch_size=1000,
        )  # fmt: skip
        stored = size
        times, found = [], []
        for _ in range(args.queries):
            started = time.perf_counter()
            found.append(len(recall(embedder, alert(rng), limit=5)))
            times.append((time.perf_counter() - started) * 1000)
        results[size] = times
        print(
            f"  {size:>6} memories: p50 {statistics.median(times):7.1f} ms  "
            f"p99 {percentile(times, 0.99):7.1f} ms  (lessons recalled per query: "
            f"median {statistics.median(found):.0f})"
        )
    sizes = sorted(results)
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        ratio = statistics.median(results[large]) / statistics.median(results[small])
        print(f"  p50 ratio {large}/{small} memories: {ratio:.1f} (size ratio {large / small:g})")
    print(f"  {load_average()}")


if __name__ == "__main__":
    main()
