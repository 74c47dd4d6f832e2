"""How fast is "Find in session" on a 2,000-item session? Per keystroke, in Chromium.

Starts a real deployment (daphne + qcluster on a fresh SQLite, as the browser tests do),
seeds one ended session of N timeline items over two stages and four agents (thinking,
tool calls with arguments and results, summaries, responses), opens it in Chromium and
types queries into the find box a key at a time. The page's own filter measures itself
(``performance.now()`` around it, kept in ``window.tarsySession.findTimings``); this
prints p50/p95/p99/max of those times, the page's load time and the load average. It is
a measurement, not a test: the issue's aim is 100 ms per keystroke.

Usage: .venv/bin/python bench/find_in_session.py [--items 2000] [--rounds 3]
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

AGENTS = ["KubernetesAgent", "LogsAgent", "MetricsAgent"]
KINDS = ["llm_thinking", "llm_tool_call", "mcp_tool_summary", "llm_response"]
MARKS = 97


def mark(i: int) -> str:
    """A token in item ``i``'s searchable text: ``mk017x`` in every 97th item from 17."""
    return f"mk{i % MARKS:03d}x"


def agent_of(i: int) -> int:
    """Which of the four agents (three investigating, the synthesis) item ``i`` is in."""
    return (i // 7) % (len(AGENTS) + 1)


def rows(items: int) -> list[dict]:
    """The items, made the same way wherever they are needed (the seed and the tests'
    expectations)."""
    out = []
    for i in range(items):
        kind = KINDS[i % len(KINDS)]
        row: dict = {"i": i, "event_type": kind, "metadata": {}, "content": ""}
        words = f"step {i} checks pods restarting in payments {mark(i)}"
        if kind == "llm_tool_call":
            row["metadata"] = {
                "tool_name": f"kubernetes.tool_{i % 13}",
                "arguments": {"namespace": "payments", "query": mark(i)},
                "duration_ms": 12,
            }
            row["content"] = f"result line for step {i}\n" * 3
        elif kind == "mcp_tool_summary":
            row["metadata"] = {"server_name": "kubernetes", "tool_name": f"tool_{i % 13}"}
            row["content"] = words
        else:
            row["content"] = words
        out.append(row)
    return out


def seed(items: int) -> str:
    """Run inside the deployment (``manage shell``): one ended session of ``items``
    items; returns its id."""
    from django.utils import timezone

    from sessions.models import AgentExecution, AlertSession, Stage, TimelineEvent

    now = timezone.now()
    session = AlertSession.objects.create(
        alert_type="kubernetes",
        alert_data="alert: PodCrashLooping",
        chain_id="kubernetes-investigation",
        status="completed",
        started_at=now,
        completed_at=now,
        final_analysis="Root cause: the memory limit.",
        executive_summary="The pods ran out of memory.",
    )
    investigation = Stage.objects.create(
        session=session,
        name="investigation",
        index=0,
        status="completed",
        parallel_type="multi_agent",
        expected_agent_count=len(AGENTS),
        success_policy="all",
    )
    synthesis = Stage.objects.create(
        session=session, name="synthesis", index=1, stage_type="synthesis", status="completed"
    )
    executions = [
        AgentExecution.objects.create(
            session=session,
            stage=investigation,
            agent_name=name,
            agent_index=n + 1,
            status="completed",
        )
        for n, name in enumerate(AGENTS)
    ]
    executions.append(
        AgentExecution.objects.create(
            session=session, stage=synthesis, agent_name="SynthesisAgent", status="completed"
        )
    )
    events = []
    for row in rows(items):
        execution = executions[agent_of(row["i"])]
        events.append(
            TimelineEvent(
                session=session,
                stage_id=execution.stage_id,
                execution=execution,
                sequence_number=row["i"] + 1,
                event_type=row["event_type"],
                content=row["content"],
                metadata=row["metadata"],
                status="completed",
            )
        )
    TimelineEvent.objects.bulk_create(events, batch_size=500)
    return str(session.id)


SEED = "from bench.find_in_session import seed; print(seed({items}))"

QUERIES = ["mk017x", "restarting", "kubernetes.tool_7", "namespace", "zzz-nothing"]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from tests.e2e.harness import demo_provider, deployment, launch_browser, log_in

    with (
        tempfile.TemporaryDirectory() as tmp,
        deployment(Path(tmp), provider=demo_provider()) as tarsy,
    ):
        session_id = tarsy.manage("shell", "-c", SEED.format(items=args.items)).split()[-1]
        with sync_playwright() as playwright:
            browser = launch_browser(playwright)
            page = browser.new_page(viewport={"width": 1366, "height": 768})
            try:
                log_in(page, tarsy.base_url)
                started = time.monotonic()
                page.goto(f"{tarsy.base_url}/sessions/{session_id}/")
                page.wait_for_selector("#find-input")
                loaded = time.monotonic() - started
                shown = page.locator("#timeline article.item").count()
                for _ in range(args.rounds):
                    for query in QUERIES:
                        page.fill("#find-input", "")
                        page.click("#find-input")
                        for char in query:
                            page.keyboard.type(char)
                            # Every key measured, not only the last one the debounce lets
                            # through: the page's filter, run as each key lands.
                            page.evaluate(
                                "() => window.tarsySession.find(document.querySelector('#find-input').value)"
                            )
                timings = page.evaluate("() => window.tarsySession.findTimings")
                counts = {q: page.evaluate("q => window.tarsySession.find(q)", q) for q in QUERIES}
            finally:
                browser.close()
    first, rest = timings[0], timings[1:] or timings
    load = os.getloadavg()
    print(f"items on the page: {shown} (seeded {args.items}); page load {loaded * 1000:.0f} ms")
    print(f"matches: {counts}")
    print(f"first search (reads every item's text once): {first:.1f} ms")
    print(
        f"per keystroke over {len(rest)} filters: p50 {statistics.median(rest):.2f} ms, "
        f"p95 {percentile(rest, 0.95):.2f} ms, p99 {percentile(rest, 0.99):.2f} ms, "
        f"max {max(rest):.2f} ms (aim: 100 ms)"
    )
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
