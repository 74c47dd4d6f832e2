"""How live is "live"? Measured on a real deployment with a real browser.

Starts TARSy the way bin/run does (SQLite, daphne, one qcluster), drives headless
Chromium through the web form, and reports, over several sessions:

- submit → first timeline item visible in the browser;
- chunk produced in the worker (its event-log row's timestamp) → that text visible
  on the page (a MutationObserver timestamps every text node the page receives).

Both clocks are this machine's wall clock. Usage: .venv/bin/python bench/live_latency.py [--sessions N]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from playwright.sync_api import sync_playwright

from bench.stats import load_average, summary
from tests.e2e.harness import deployment, launch_browser, log_in

WORDS = 120
CHUNK_DELAY = 0.03
AIM_FIRST_ITEM_MS = 1000
AIM_CHUNK_MEDIAN_MS = 100

OBSERVER = """
window.__seen = {}; window.__firstItem = null;
const now = () => performance.timeOrigin + performance.now();
new MutationObserver(records => {
  const t = now();
  for (const record of records) {
    for (const node of record.addedNodes) {
      const text = node.textContent || '';
      for (const word of text.match(/w\\d{4}/g) || []) {
        if (!(word in window.__seen)) window.__seen[word] = t;
      }
      if (window.__firstItem === null && node.nodeType === 1 &&
          (node.matches('#timeline .item') || node.querySelector?.('.item')) &&
          node.closest?.('#timeline')) {
        window.__firstItem = t;
      }
    }
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


def chunk_times(database: Path, session_id: str) -> dict[str, float]:
    connection = sqlite3.connect(database)
    rows = connection.execute(
        "SELECT payload, created_at FROM alert_sessions_sessionevent "
        "WHERE type = 'stream.chunk' AND session_id = ?",
        (session_id.replace("-", ""),),
    ).fetchall()
    connection.close()
    times = {}
    for payload, created_at in rows:
        word = json.loads(payload)["delta"].strip()
        stamp = datetime.fromisoformat(created_at)
        if stamp.tzinfo is None:
            from datetime import UTC

            stamp = stamp.replace(tzinfo=UTC)
        times[word] = stamp.timestamp() * 1000
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="TARSY_WORKERS (bin/run: 2)")
    parser.add_argument("--queue-poll", default="0.1", help="TARSY_QUEUE_POLL (bin/run: 0.1)")
    args = parser.parse_args()
    # bin/run's defaults, not the test harness's faster ones.
    env = {"TARSY_WORKERS": str(args.workers), "TARSY_QUEUE_POLL": args.queue_poll}

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bench-script.yaml"
        script.write_text(
            json.dumps(
                {
                    "chunk_delay": CHUNK_DELAY,
                    "turns": [{"text": " ".join(f"w{n:04d}" for n in range(1, WORDS + 1))}],
                }
            )
        )
        provider = {
            "name": "bench",
            "type": "scripted",
            "model": "bench",
            "options": {"script": str(script)},
            "is_default": True,
        }
        first_item: list[float] = []
        chunk_latency: list[float] = []
        with (
            deployment(Path(tmp), provider=provider, extra_env=env) as tarsy,
            sync_playwright() as playwright,
        ):
            browser = launch_browser(playwright)
            context = browser.new_context()
            context.add_init_script(OBSERVER)
            page = context.new_page()
            log_in(page, tarsy.base_url)
            for run in range(args.sessions):
                page.goto(f"{tarsy.base_url}/sessions/new/")
                page.fill("#id_data", f"namespace: payments\nbench run {run}")
                submitted = time.time() * 1000
                page.click("#alert-form button[type=submit]")
                page.wait_for_selector('#session-status[data-status="completed"]', timeout=120_000)
                page.wait_for_timeout(300)
                session_id = page.url.rstrip("/").rsplit("/", 1)[1]
                first = page.evaluate("window.__firstItem")
                seen = page.evaluate("window.__seen")
                produced = chunk_times(tarsy.database, session_id)
                first_item.append(first - submitted)
                chunk_latency += [seen[w] - produced[w] for w in produced if w in seen]
                missing = len(produced) - sum(1 for w in produced if w in seen)
                print(
                    f"session {run + 1}: first item {first - submitted:6.0f} ms, "
                    f"{len(produced)} chunks, {missing} not seen live"
                )
            browser.close()

    print()
    print(f"{args.workers} workers, queue poll {args.queue_poll} s, SQLite (WAL); {load_average()}")
    print(summary("submit → first timeline item", first_item, AIM_FIRST_ITEM_MS))
    # A worker process's first session imports the agent stack and cannot use a
    # remembered tool list yet; the sessions after it show the steady state.
    warm = first_item[args.workers :]
    if warm:
        print(summary("  … after each worker's first session", warm, AIM_FIRST_ITEM_MS))
    print(summary("worker chunk → visible on page", chunk_latency, AIM_CHUNK_MEDIAN_MS))


if __name__ == "__main__":
    main()
