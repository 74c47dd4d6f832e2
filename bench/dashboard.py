"""How fast are the dashboard's pages with a year of history? Server time, in-process.

Seeds a fresh SQLite database (the default set-up) with 100,000 sessions — alert data
of 0.3-4 KB, analyses of 1-3 KB, mixed statuses over 90 days — and one session with
2,000 timeline items (tool results of 2-20 KB, 500 LLM calls with their messages,
600 MCP calls). Then times each page through Django's full request path (middleware,
views, templates; no network) and reports p50/p95 against the issue's aims, the HTML
size, and the query plan of any page that misses its aim.

Usage: .venv/bin/python bench/dashboard.py [--sessions N] [--runs N] [--data-dir DIR]
(a --data-dir that already holds a seeded database is reused.)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# A sentence reads better than 55 quoted words.
_VOCABULARY = (
    "pod node container restart memory cpu disk pressure latency error timeout network "
    "service deployment replica volume mount probe liveness readiness image pull backoff "
    "oom killed evicted scheduler quota limit request throttled dns ingress certificate "
    "expired connection refused reset upstream gateway database replication lag query "
    "slow lock deadlock queue consumer kafka partition offset cache redis eviction"
)
WORDS = _VOCABULARY.split(" ")
ALERT_TYPES = ["kubernetes", "database", "network", "DeepInvestigation"]
AUTHORS = [f"sre-{n}" for n in range(20)]
STATUSES = ["completed"] * 70 + ["failed"] * 15 + ["cancelled"] * 8 + ["timed_out"] * 7
RARE = "zebracrossing"  # in about 1 session in 1,000: a selective search


def text(rng: random.Random, chars: int) -> str:
    out, size = [], 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def alert(rng: random.Random, n: int) -> str:
    lines = [
        "alert: " + rng.choice(["PodCrashLooping", "HighLatency", "DiskFull", "ReplicationLag"]),
        f"severity: {rng.choice(['critical', 'warning'])}",
        f"cluster: prod-{rng.choice(['eu', 'us', 'ap'])}-{rng.randint(1, 5)}",
        f"namespace: ns-{rng.randint(1, 300)}",
        f"pod: app-{n:06d}-{uuid.UUID(int=rng.getrandbits(128)).hex[:5]}",
        "description: " + text(rng, rng.randint(200, 3800)),
    ]
    if n % 1000 == 7:
        lines.append(f"note: {RARE} outage upstream")
    return "\n".join(lines)


def seed(sessions: int) -> None:
    from sessions import search
    from sessions.models import AlertSession, SessionSearch

    rng = random.Random(42)
    now = time_now()
    created = AlertSession._meta.get_field("created_at")
    created.auto_now_add = False  # seeding history: keep the times given
    batch = 2000
    # Oldest first, as a real history accumulates.
    times = sorted(now - timedelta(seconds=rng.uniform(0, 90 * 86400)) for _ in range(sessions))
    for start in range(0, sessions, batch):
        rows = []
        for n in range(start, min(start + batch, sessions)):
            at = times[n]
            status = rng.choice(STATUSES)
            took = rng.uniform(20, 900)
            rows.append(
                AlertSession(
                    alert_type=rng.choice(ALERT_TYPES),
                    alert_data=alert(rng, n),
                    chain_id="kubernetes-investigation",
                    status=status,
                    author=rng.choice(AUTHORS),
                    created_at=at,
                    started_at=at + timedelta(seconds=1),
                    completed_at=at + timedelta(seconds=took),
                    final_analysis="## Root cause\n" + text(rng, rng.randint(1000, 3000))
                    if status == "completed"
                    else "",
                    executive_summary=text(rng, 200) if status == "completed" else "",
                    total_tokens=rng.randint(2000, 90000),
                    estimated_cost_usd=Decimal(rng.randint(1, 90000)) / 100000,
                )
            )
        AlertSession.objects.bulk_create(rows)
        SessionSearch.objects.bulk_create(
            SessionSearch(session=s, body=search.document(s, [])) for s in rows
        )
        print(f"  seeded {start + len(rows):,} sessions", end="\r", flush=True)
    created.auto_now_add = True
    print()


def big_session(items: int = 2000):
    """One long investigation: 2,000 timeline items, 500 LLM calls, 600 MCP calls."""
    from sessions.models import (
        AgentExecution,
        AlertSession,
        LLMInteraction,
        MCPInteraction,
        SessionSearch,
        Stage,
        TimelineEvent,
    )

    rng = random.Random(7)
    session = AlertSession.objects.create(
        alert_type="kubernetes",
        alert_data=alert(rng, 1),
        chain_id="kubernetes-investigation",
        status="completed",
        author="sre-1",
        started_at=time_now(),
        completed_at=time_now(),
        final_analysis="## Root cause\n" + text(rng, 2000),
    )
    SessionSearch.objects.create(session=session, body=session.alert_data)
    stage = Stage.objects.create(session=session, name="Investigation", index=0, status="completed")
    execution = AgentExecution.objects.create(
        session=session, stage=stage, agent_name="KubernetesAgent", status="completed"
    )
    kinds = ["llm_thinking", "llm_response", "llm_tool_call", "llm_tool_call"]
    TimelineEvent.objects.bulk_create(
        TimelineEvent(
            session=session,
            stage=stage,
            execution=execution,
            sequence_number=n,
            event_type=kinds[n % 4],
            status="completed",
            content=text(rng, rng.randint(2000, 20000) if kinds[n % 4] == "llm_tool_call" else 400),
            metadata={"tool_name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
            if kinds[n % 4] == "llm_tool_call"
            else {},
        )
        for n in range(items)
    )
    messages = [{"role": "system", "content": text(rng, 3000)}]
    llm = []
    for _ in range(500):
        messages = [*messages[-30:], {"role": "user", "content": text(rng, 1500)}]
        llm.append(
            LLMInteraction(
                session=session,
                execution=execution,
                provider="demo",
                backend="scripted",
                model_name="demo",
                request_messages=messages,
                response_text=text(rng, 500),
                total_tokens=4000,
                duration_ms=900,
            )
        )
    LLMInteraction.objects.bulk_create(llm)
    MCPInteraction.objects.bulk_create(
        MCPInteraction(
            session=session,
            execution=execution,
            server_name="kubernetes",
            tool_name="get_pods",
            arguments={"namespace": "payments"},
            result=text(rng, rng.randint(500, 20000)),
            duration_ms=120,
        )
        for _ in range(600)
    )
    return session


def time_now():
    from django.utils import timezone

    return timezone.now()


def measure(client, url: str, runs: int) -> tuple[list[float], int]:
    """Server time of ``url``; a URL ending in ``?cold`` is timed with the rendered
    timeline items forgotten before each request (the first visit after a restart)."""
    from django.core.cache import caches

    cold = url.endswith("?cold")
    response = client.get(url)  # warm the caches once
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(runs):
        if cold:
            caches["fragments"].clear()
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    return times, len(response.content)


def query_plan(state_query: str) -> str:
    from django.db import connection
    from django.http import QueryDict

    from web import listing

    state = listing.ListState.from_query(QueryDict(state_query))
    sql, params = listing.history(state)[:25].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(f"    {row[-1]}" for row in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--data-dir", default="")
    args = parser.parse_args()
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="tarsy-bench-dashboard-"))
    os.environ["TARSY_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from bench.stats import load_average, percentile
    from sessions.models import AlertSession

    call_command("migrate", verbosity=0)
    if not AlertSession.objects.exists():
        started = time.perf_counter()
        seed(args.sessions)
        session = big_session()
        print(f"seeded in {time.perf_counter() - started:.0f} s into {data_dir}")
    session = AlertSession.objects.get(author="sre-1", alert_type="kubernetes", total_tokens=0)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)

    print(f"{AlertSession.objects.count():,} sessions; {load_average()} (start)")
    pages = [
        ("list", "/", 100),
        ("list, filtered (failed, one type)", "/?status=failed&alert_type=database", 100),
        ("list, sorted by cost", "/?sort=-cost", 100),
        ("list, page 400", "/?page=400", 100),
        ("search, rare word", f"/?q={RARE}", 300),
        ("search, two common words", "/?q=memory+pressure", 300),
        ("search, phrase + filter", '/?q="connection+refused"&status=failed', 300),
        ("session page (2,000 items)", f"/sessions/{session.id}/", 300),
        ("session page, cold (no item cached)", f"/sessions/{session.id}/?cold", 300),
        ("trace page (500 LLM, 600 MCP calls)", f"/sessions/{session.id}/trace/", 300),
        ("trace page, cold", f"/sessions/{session.id}/trace/?cold", 300),
    ]
    missed = []
    print(f"{'page':<40} {'p50 ms':>8} {'p95 ms':>8} {'aim ms':>7} {'p50/aim':>8} {'KB':>8}")
    for name, url, aim in pages:
        times, size = measure(client, url, args.runs)
        p50, p95 = percentile(times, 0.5), percentile(times, 0.95)
        print(f"{name:<40} {p50:8.1f} {p95:8.1f} {aim:7d} {p50 / aim:8.2f} {size / 1024:8.1f}")
        if p50 > aim and url.startswith("/?"):
            missed.append((name, url[2:]))
    for name, query in missed:
        print(f"query plan, {name}:\n{query_plan(query)}")
    print(load_average() + " (end)")


if __name__ == "__main__":
    main()
