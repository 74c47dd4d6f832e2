"""Is storage linear in the work? In-process, on a fresh SQLite database (issue 19).

1. **An investigation's rows and bytes.** A real investigation (the scripted provider
   calling the demo Kubernetes MCP server at every step, ``--steps`` steps, then made to
   conclude) run ``--investigations`` times with every LLM call stored whole (as before)
   and as stored now (a call that continues the previous one keeps only what it adds).
   Reported per investigation: rows and bytes per table (bytes = every column's stored
   length), medians and p95.
2. **Bytes per LLM call by step.** One agent's conversation recorded through the
   worker's ``Recorder`` for 20 steps, each step answering with a tool call whose result
   is 0.9 KB or 8 KB: what each call stores, before and now, by step number.
3. **REST search at 100,000 sessions.** ``GET /api/v1/sessions?search=…`` over the
   dashboard benchmark's 100,000 sessions (bench/dashboard.py builds them with
   bulk_create): p50/p95 for common and rare words, now and before (every match gathered
   and sorted).
4. **The timeline of a 2,000-item session** (bench/dashboard.py's): response bytes and
   time of the first page (what a client without parameters gets), of every page
   followed through ``Link``, and of the whole timeline in one response (as before).

Usage: .venv/bin/python bench/storage.py [--sessions N] [--runs N] [--steps N]
       [--investigations N] [--data-dir DIR]   (a --data-dir already seeded is reused)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The repository instead of bench/, whose mcp.py would hide the mcp package the worker uses.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.stats import load_average, percentile  # noqa: E402 (after the path, above)

MIB = 1024 * 1024


def stats_line(name: str, values: list[float], unit: str, width: int = 50) -> str:
    return (
        f"{name:<{width}} median={statistics.median(values):10.1f} {unit}  "
        f"p95={percentile(values, 0.95):10.1f} {unit}  max={max(values):10.1f} {unit}"
    )


def stored_bytes(model, **filters) -> tuple[int, int]:
    """Rows of ``model`` matching ``filters`` and the stored length of all their columns."""
    from django.db import connection

    columns = [f.column for f in model._meta.concrete_fields]
    total = " + ".join(f'COALESCE(LENGTH(CAST("{c}" AS BLOB)), 0)' for c in columns)
    rows = model.objects.filter(**filters)
    sql, params = rows.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT COUNT(*), COALESCE(SUM({total}), 0) FROM "{model._meta.db_table}" '
            f'WHERE "{model._meta.pk.column}" IN ({sql})',
            params,
        )
        count, size = cursor.fetchone()
    return count, size


# --- 1. an investigation -----------------------------------------------------------------


def investigation(steps: int, *, whole: bool) -> dict[str, tuple[int, int]]:
    """Run one investigation; rows and bytes it left in each table."""
    from django.apps import apps

    from agents.recorder import Recorder
    from sessions import services
    from sessions.models import AlertSession
    from worker.tasks import run_session

    session = services.session_create(
        alert_type="kubernetes",
        alert_data="alert: PodCrashLooping\nnamespace: payments\npod: payments-api",
        chain_id="kubernetes-investigation",
        author="bench",
    )
    original = Recorder.llm_interaction
    if whole:  # as before: no call continues another

        async def as_before(self, **fields: Any) -> None:
            self._calls.clear()
            await original(self, **fields)

        Recorder.llm_interaction = as_before  # type: ignore[method-assign]
    try:
        assert run_session(str(session.id)) == "completed"
    finally:
        Recorder.llm_interaction = original  # type: ignore[method-assign]
    tables = {"AlertSession": stored_bytes(AlertSession, id=session.id)}
    for model in apps.get_app_config("alert_sessions").get_models():
        if any(f.name == "session" for f in model._meta.concrete_fields):
            count, size = stored_bytes(model, session_id=session.id)
            if count:
                tables[model.__name__] = (count, size)
    return tables


def investigations(steps: int, runs: int) -> None:
    import yaml

    from llm.models import LLMProvider, ProviderType

    script = Path(tempfile.mkdtemp(prefix="tarsy-bench-storage-")) / "script.yaml"
    tools = ["kubernetes.get_pods", "kubernetes.describe_pod", "kubernetes.get_pod_logs"]

    turns: list[dict[str, Any]] = [
        {
            "text": f"Step {n}: looking further.",
            "tool_calls": [
                {
                    "name": tools[n % 3],
                    "arguments": {"namespace": "payments"}
                    if n % 3 == 0
                    else {"namespace": "payments", "pod": "payments-api-7d9"},
                }
            ],
        }
        for n in range(steps)
    ]
    turns.append({"text": "payments-api is crash-looping: its memory limit is too low."})
    script.write_text(yaml.safe_dump({"chunk_delay": 0, "turns": turns}))
    LLMProvider.objects.filter(is_default=True).update(is_default=False)
    LLMProvider.objects.update_or_create(
        name="bench-scripted",
        defaults={
            "type": ProviderType.SCRIPTED,
            "model": "script",
            "options": {"script": str(script)},
            "is_default": True,
        },
    )
    print(f"\n1. One investigation of {steps} steps (demo MCP server), {runs} runs each way")
    results: dict[bool, list[dict[str, tuple[int, int]]]] = {True: [], False: []}
    for _ in range(runs):
        for whole in (True, False):
            results[whole].append(investigation(steps, whole=whole))
    names = sorted({name for run in results[True] + results[False] for name in run})
    print(f"{'table':<18} {'rows':>6} {'KB before':>11} {'KB now':>9}")
    for name in names:
        before = [run.get(name, (0, 0)) for run in results[True]]
        now = [run.get(name, (0, 0)) for run in results[False]]
        print(
            f"{name:<18} {statistics.median(r for r, _ in now):6.0f} "
            f"{statistics.median(b for _, b in before) / 1024:11.1f} "
            f"{statistics.median(b for _, b in now) / 1024:9.1f}"
        )
    for whole, label in ((True, "before"), (False, "now")):
        rows = [float(sum(r for r, _ in run.values())) for run in results[whole]]
        size = [sum(b for _, b in run.values()) / 1024 for run in results[whole]]
        print(stats_line(f"rows per investigation, {label}", rows, "rows"))
        print(stats_line(f"KB per investigation, {label}", size, "KB"))


# --- 2. bytes per LLM call by step -------------------------------------------------------


async def conversation(result_bytes: int, steps: int, *, whole: bool) -> list[int]:
    """One agent's conversation recorded as the controller records it; bytes per call."""
    from asgiref.sync import sync_to_async

    from agents.recorder import Recorder, message_to_json
    from llm.types import ConversationMessage, Role, ToolCall
    from sessions import services
    from sessions.models import LLMInteraction

    def start():
        session = services.session_create(
            alert_type="kubernetes",
            alert_data="bench",
            chain_id="kubernetes-investigation",
            author="bench",
        )
        claim = services.session_claim(session_id=session.id, worker_id="bench")
        assert claim is not None
        stage = services.stage_start(lease=claim.lease, name="Investigation", index=0)
        execution = services.execution_start(
            lease=claim.lease,
            stage=stage,
            agent_name="KubernetesAgent",
            agent_index=1,
            llm_backend="scripted",
            llm_provider="bench",
            model_name="script",
        )
        return session, execution, claim.lease

    session, execution, lease = await sync_to_async(start)()
    recorder = Recorder(session, execution, lease)
    messages = [
        ConversationMessage(Role.SYSTEM, "You are KubernetesAgent. " * 40),
        ConversationMessage(Role.USER, "alert: PodCrashLooping\nnamespace: payments"),
    ]
    filler = "payments-api-7d9 CrashLoopBackOff OOMKilled restarts=42 " * (result_bytes // 56)
    for step in range(1, steps + 1):
        call = ToolCall(f"call-{step}", "kubernetes.get_pod_logs", {"pod": "payments-api"})
        answer = f"Step {step}: reading the logs again."
        if whole:
            recorder._calls.clear()  # as before: every call stored whole
        await recorder.llm_interaction(
            interaction_type="iteration",
            provider="bench",
            backend="scripted",
            model_name="script",
            request_messages=[message_to_json(m) for m in messages],
            tools=["kubernetes.get_pods", "kubernetes.get_pod_logs"],
            response_text=answer,
            thinking="",
            tool_calls=[{"id": call.id, "name": call.name, "arguments": call.arguments}],
        )
        messages.append(ConversationMessage(Role.ASSISTANT, answer, tool_calls=(call,)))
        messages.append(
            ConversationMessage(
                Role.TOOL, filler[:result_bytes], tool_call_id=call.id, tool_name=call.name
            )
        )

    def sizes() -> list[int]:
        services.session_end(lease=lease, status="completed")  # the next one may run
        calls = LLMInteraction.objects.filter(execution=execution).order_by("id")
        return [stored_bytes(LLMInteraction, id=c.id)[1] for c in calls]

    return await sync_to_async(sizes)()


def bytes_by_step(steps: int = 20) -> None:
    print(
        f"\n2. Bytes stored per LLM call, by step ({steps} steps, Recorder as the worker uses it)"
    )
    for result_bytes in (900, 8192):
        before = asyncio.run(conversation(result_bytes, steps, whole=True))
        now = asyncio.run(conversation(result_bytes, steps, whole=False))
        print(f"tool results of {result_bytes} bytes:")
        print(f"  {'step':>4} {'before KB':>10} {'now KB':>8}")
        for step in (1, 2, 3, 5, 10, 15, 20):
            if step <= steps:
                print(f"  {step:4d} {before[step - 1] / 1024:10.1f} {now[step - 1] / 1024:8.1f}")
        print("  " + stats_line("now, steps 2-20", [b / 1024 for b in now[1:]], "KB", 20))
        growth_before = (before[-1] - before[1]) / (steps - 2) / 1024
        growth_now = (now[-1] - now[1]) / (steps - 2) / 1024
        print(
            f"  growth per step: before {growth_before:+.2f} KB, now {growth_now:+.2f} KB; "
            f"all {steps} calls: before {sum(before) / 1024:.0f} KB, now {sum(now) / 1024:.0f} KB"
        )


# --- 3. REST search ------------------------------------------------------------------------


def timed(client, url: str, runs: int) -> tuple[list[float], Any]:
    response = client.get(url)  # warm the caches once
    assert response.status_code == 200, (url, response.status_code, response.content[:200])
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    return times, response


def rest_search(client, runs: int) -> None:
    from bench.dashboard import RARE
    from sessions import search, selectors

    print(f"\n3. GET /api/v1/sessions?search=… (p50/p95 of {runs} runs; before: 5 runs)")
    terms = [
        ("common word", "search=memory"),
        ("common word, page 40", "search=latency&page=40"),
        ("two common words", "search=memory+pressure"),
        ("phrase", 'search="connection+refused"'),
        ("rare word", f"search={RARE}"),
        ("no match", "search=nothingmatchesthis"),
        ("common word + status filter", "search=memory&status=failed"),
        ("common word, oldest first", "search=disk&sort_order=asc"),
        ("common word + alert type filter", "search=memory&alert_type=kubernetes"),
        ("rare word + status filter", f"search={RARE}&status=failed"),
        ("common word, sorted by author", "search=memory&sort_by=author"),
    ]
    print(
        f"{'search':<32} {'matches':>8} {'p50 ms':>8} {'p95 ms':>8} {'aim':>5} "
        f"{'before p50':>11} {'same':>5}"
    )
    old = selectors.session_search

    def as_before(sessions, query, **_: Any):
        return search.matching(sessions, query), None

    for name, query in terms:
        url = f"/api/v1/sessions?{query}"
        times, response = timed(client, url, runs)
        selectors.session_search = as_before
        try:
            before_times, before = timed(client, url, 5)
        finally:
            selectors.session_search = old
        same = "yes" if response.json() == before.json() else "NO"
        print(
            f"{name:<32} {response.json()['pagination']['total_items']:8d} "
            f"{percentile(times, 0.5):8.1f} {percentile(times, 0.95):8.1f} {100:5d} "
            f"{percentile(before_times, 0.5):11.1f} {same:>5}"
        )


# --- 4. the timeline ---------------------------------------------------------------------


def timeline(client, session_id, runs: int) -> None:
    import re

    print("\n4. GET /api/v1/sessions/{id}/timeline of a 2,000-item session")
    base = f"/api/v1/sessions/{session_id}/timeline"
    times, first = timed(client, base, runs)
    print(
        f"{'first page (no parameters)':<36} {len(first.json()):5d} items "
        f"{len(first.content) / MIB:7.2f} MiB  p50={percentile(times, 0.5):7.1f} ms  "
        f"p95={percentile(times, 0.95):7.1f} ms  total={first['X-Total-Count']}"
    )
    pages, sizes, url = [], [], base
    while url:
        started = time.perf_counter()
        response = client.get(url)
        pages.append((time.perf_counter() - started) * 1000)
        sizes.append(len(response.content))
        link = response.headers.get("Link")
        url = re.search(r"<http://[^/]+(/[^>]+)>", link).group(1) if link else ""
    print(
        f"{'every page, following Link':<36} {len(pages):5d} pages "
        f"{sum(sizes) / MIB:7.2f} MiB  per page p50={percentile(pages, 0.5):7.1f} ms  "
        f"max={max(pages):7.1f} ms"
    )
    times, whole = timed(client, f"{base}?limit=2000", max(3, runs // 5))
    print(
        f"{'whole timeline in one (as before)':<36} {len(whole.json()):5d} items "
        f"{len(whole.content) / MIB:7.2f} MiB  p50={percentile(times, 0.5):7.1f} ms  "
        f"p95={percentile(times, 0.95):7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--investigations", type=int, default=3)
    parser.add_argument("--data-dir", default="")
    args = parser.parse_args()
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="tarsy-bench-storage-"))
    os.environ["TARSY_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    import django

    django.setup()
    logging.getLogger("django-q").setLevel(logging.WARNING)  # a line per queued session
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from bench import dashboard
    from sessions.models import AlertSession

    call_command("migrate", verbosity=0)
    print(f"{load_average()} (start)")
    bytes_by_step()
    investigations(args.steps, args.investigations)
    # The sessions above are not part of the history searched below.
    AlertSession.objects.filter(author="bench").delete()

    if not AlertSession.objects.filter(author="sre-1").exists():
        started = time.perf_counter()
        dashboard.seed(args.sessions)
        dashboard.big_session()
        print(f"seeded in {time.perf_counter() - started:.0f} s into {data_dir}")
    big = AlertSession.objects.get(author="sre-1", alert_type="kubernetes", total_tokens=0)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    print(f"\n{AlertSession.objects.count():,} sessions; {load_average()}")
    rest_search(client, args.runs)
    timeline(client, big.id, args.runs)
    print(f"\n{load_average()} (end)")


if __name__ == "__main__":
    main()
