"""The live path at load: model → browser, with 1, 10, 20 and 50 sessions streaming.

Starts TARSy the way bin/run does (daphne + one qcluster of 2 workers, each running many
sessions), on SQLite or on PostgreSQL, with a real OpenAI-compatible provider: the real
langchain-openai SDK in the worker talks to a local server that streams words, each word
carrying the wall clock of the moment it was sent. Headless Chromium keeps one page open
per session; a MutationObserver notes when each word first appears. Latency = appeared -
sent, same clock: it covers the SDK, the worker, the relay, the WebSocket and the page.

Also reports the event-log rows and bytes written per investigation (with streamed text
saved at every flush, TARSY_STREAM_SAVE_INTERVAL=0.03, as before it went to the pages past
the database; and with the default), and an idle daphne's CPU with a session page open.

Usage: .venv/bin/python bench/live_scale.py [--db sqlite|postgres] [--sessions 1,10,20,50]
PostgreSQL: the server in TARSY_TEST_POSTGRES_URL (or --postgres-url); each run gets a
fresh database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import sync_playwright

from bench.stats import load_average, percentile
from tests.e2e.harness import (
    deployment,
    launch_browser,
    log_in,
    postgres_server_url,
    process_group,
    scaled_deployment,
)

WORDS = 120
WORD_DELAY = 0.02  # 50 words a second, a fast model
FIRST_WORD_AFTER = 3.0  # seconds: the pages open meanwhile
STAMP = re.compile(r"t(\d{16})x")

OBSERVER = """
window.__seen = {};
const now = () => performance.timeOrigin + performance.now();
new MutationObserver(records => {
  const t = now();
  for (const record of records) {
    const nodes = record.type === 'characterData' ? [record.target] : record.addedNodes;
    for (const node of nodes) {
      for (const word of (node.textContent || '').match(/t\\d{16}x/g) || []) {
        if (!(word in window.__seen)) window.__seen[word] = t;
      }
    }
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


class _StampingModel(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: a streamed answer of stamped words, no tool calls."""

    protocol_version = "HTTP/1.1"
    # Each word is its own small write after the headers': with Nagle's algorithm on,
    # a write waits for the client's (delayed) ACK of the one before, up to ~40 ms, and
    # that wait would be measured as TARSy's latency.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._event({"role": "assistant", "content": ""})
        time.sleep(FIRST_WORD_AFTER)
        for _ in range(WORDS):
            self._event({"content": f"t{int(time.time() * 1e6):016d}x "})
            time.sleep(WORD_DELAY)
        self._event({}, finish="stop")
        self._send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, delta: dict, finish: str | None = None) -> None:
        self._send(
            json.dumps(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion.chunk",
                    "created": 1_760_000_000,
                    "model": "bench",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )
        )

    def _send(self, data: str) -> None:
        body = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args) -> None:
        pass


@contextlib.contextmanager
def stamping_model():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StampingModel)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


@contextlib.contextmanager
def tarsy(tmp: Path, db: str, model_url: str, env: dict[str, str], pg_url: str | None):
    provider = {
        "name": "bench",
        "type": "openai",
        "model": "bench-model",
        "api_key_env": "BENCH_OPENAI_KEY",
        "base_url": model_url,
        "is_default": True,
    }
    env = {"BENCH_OPENAI_KEY": "not-a-real-key", **env}
    if db == "postgres":
        with scaled_deployment(
            tmp, provider=provider, server_url=pg_url, webs=1, clusters=1, extra_env=env
        ) as dep:
            yield dep
    else:
        with deployment(tmp, provider=provider, extra_env=env) as dep:
            yield dep


_tokens: dict[str, str] = {}


def api(dep, path: str, body: dict | None = None) -> dict:
    token = _tokens.get(dep.base_url) or _tokens.setdefault(dep.base_url, dep.api_token())
    request = urllib.request.Request(
        dep.base_url + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def run_round(dep, browser, count: int) -> tuple[list[float], int, dict[str, float]]:
    """``count`` sessions at once, each followed by its own page; returns the latencies
    (ms) of the words seen live, how many words were not seen live, and each part's
    CPU use (cores) over the round."""
    context = browser.new_context()
    context.add_init_script(OBSERVER)
    page = context.new_page()
    log_in(page, dep.base_url)
    pages = [page] + [context.new_page() for _ in range(count - 1)]
    ids = [
        api(dep, "/api/v1/alerts", {"data": f"namespace: payments\nbench {n}"})["session_id"]
        for n in range(count)
    ]
    cpu_before, started = cpu_by_part(dep), time.monotonic()
    opened_at = {}
    for page, session_id in zip(pages, ids, strict=True):
        page.goto(f"{dep.base_url}/sessions/{session_id}/")
        opened_at[session_id] = time.time() * 1000 + 500  # the socket has subscribed by then
    latencies: list[float] = []
    unseen = 0
    for page, session_id in zip(pages, ids, strict=True):
        page.wait_for_selector(
            '#session-status[data-status="completed"]', timeout=300_000, state="attached"
        )
        page.wait_for_timeout(200)
        seen = page.evaluate("window.__seen")
        sent = [
            (word, int(STAMP.fullmatch(word).group(1)) / 1000)
            for word in _words_sent(dep, session_id)
        ]
        for word, sent_ms in sent:
            if sent_ms < opened_at[session_id]:
                continue  # streamed before the page was following
            if word in seen:
                latencies.append(seen[word] - sent_ms)
            else:
                unseen += 1
    elapsed = time.monotonic() - started
    cpu = {k: (v - cpu_before[k]) / elapsed for k, v in cpu_by_part(dep).items()}
    context.close()
    return latencies, unseen, cpu


def _words_sent(dep, session_id: str) -> list[str]:
    """Every stamped word of the session's items (what the model sent)."""
    rows = dep.query(
        "SELECT content FROM alert_sessions_timelineevent WHERE session_id = %s",
        (session_id.replace("-", ""),),
    )
    return [match.group(0) for (content,) in rows for match in STAMP.finditer(content or "")]


def event_rows(dep, session_id: str) -> tuple[int, int]:
    """The event-log rows of a session, and their payloads' bytes."""
    sql = (
        "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(payload AS TEXT))), 0) "
        "FROM alert_sessions_sessionevent WHERE session_id = %s"
    )
    count, size = dep.query(sql, (session_id.replace("-", ""),))[0]
    return int(count), int(size)


def wait_ended(dep, session_id: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api(dep, f"/api/v1/sessions/{session_id}/status")["status"] in (
            "completed",
            "failed",
            "timed_out",
            "cancelled",
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"session {session_id} did not end")


def cpu_by_part(dep) -> dict[str, float]:
    """CPU seconds used so far by each part: daphne, the worker cluster, Chromium, and
    this script (the model server)."""
    parts: dict[str, float] = {"daphne": 0.0, "workers": 0.0, "chromium": 0.0}
    for name, process in zip(dep.commands, dep.processes, strict=True):
        part = "daphne" if name.startswith("daphne") else "workers"
        for pid in process_group(process.pid):
            with contextlib.suppress(OSError, ValueError):
                parts[part] += cpu_seconds(pid)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):
                if "chrom" in (entry / "comm").read_text():
                    parts["chromium"] += cpu_seconds(int(entry.name))
    parts["model server"] = cpu_seconds(os.getpid())
    return parts


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(dep, browser, session_id: str, seconds: float) -> float:
    """Share of one core a daphne uses while one session page is open and nothing runs."""
    context = browser.new_context()
    page = context.new_page()
    log_in(page, dep.base_url)
    page.goto(f"{dep.base_url}/sessions/{session_id}/")
    page.wait_for_timeout(3000)
    daphne = dep.processes[list(dep.commands).index(next(iter(dep.commands)))].pid
    before, started = cpu_seconds(daphne), time.monotonic()
    time.sleep(seconds)
    share = (cpu_seconds(daphne) - before) / (time.monotonic() - started)
    context.close()
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--sessions", default="1,10,20,50")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument(
        "--flush-interval", default=None, help="TARSY_STREAM_FLUSH_INTERVAL (default: TARSy's)"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.sessions.split(",")]
    pg_url = args.postgres_url or postgres_server_url()
    if args.db == "postgres" and not pg_url:
        parser.error("PostgreSQL: set TARSY_TEST_POSTGRES_URL or pass --postgres-url")
    most = max(counts)
    env = {
        "TARSY_WORKERS": "2",  # bin/run's
        # The defaults hold 20 at once (12 a worker); more only when asked for more.
        "TARSY_MAX_CONCURRENT_SESSIONS": str(max(20, most)),
        "TARSY_WORKER_SESSIONS": str(max(12, -(-most // 2) + 2)),
        "TARSY_EVENT_RETENTION": "3600",  # count rows before they expire
    }
    if args.flush_interval is not None:
        env["TARSY_STREAM_FLUSH_INTERVAL"] = args.flush_interval
    results = []
    with stamping_model() as model_url, sync_playwright() as playwright:
        browser = launch_browser(playwright)
        rows: dict[str, tuple[int, int]] = {}
        idle: dict[str, float] = {}
        for label, extra in (
            ("saved at every flush (before)", {"TARSY_STREAM_SAVE_INTERVAL": "0.03"}),
            ("sent past the database, saved every second (now)", {}),
        ):
            with (
                tempfile.TemporaryDirectory() as tmp,
                tarsy(Path(tmp), args.db, model_url, {**env, **extra}, pg_url) as dep,
            ):
                session_id = api(dep, "/api/v1/alerts", {"data": "namespace: payments"})[
                    "session_id"
                ]
                wait_ended(dep, session_id)
                rows[label] = event_rows(dep, session_id)
                idle[label] = idle_cpu(dep, browser, session_id, args.idle_seconds)
                if extra:
                    continue
                # Every worker process's first session pays for imports and client set-up
                # (seconds on a loaded machine): one round first, not measured.
                run_round(dep, browser, most)
                for count in counts:
                    latencies, unseen, cpu = run_round(dep, browser, count)
                    results.append((count, latencies, unseen, load_average(), cpu))
        browser.close()

    print(f"\n{args.db}: {WORDS} words per model call, one every {WORD_DELAY * 1000:g} ms; {env}")
    p99_one = None
    for count, latencies, unseen, load, cpu in results:
        p99 = percentile(latencies, 0.99)
        p99_one = p99 if count == 1 else p99_one
        ratio = f"  p99/p99 at 1={p99 / p99_one:5.2f}" if p99_one else ""
        print(
            f"{count:>3} sessions streaming: model → browser n={len(latencies):<5} "
            f"p50={percentile(latencies, 0.5):7.1f} ms  p99={p99:7.1f} ms  "
            f"max={max(latencies):7.1f} ms{ratio}  not seen live: {unseen}  ({load})"
        )
        print("      CPU (cores): " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    (before, before_bytes), (now, now_bytes) = rows.values()
    print(
        f"event-log rows per investigation: {before} before, {now} now (ratio {now / before:.2f}); "
        f"payload bytes {before_bytes} before, {now_bytes} now"
    )
    for label, share in idle.items():
        print(f"idle daphne CPU, one session page open, {label}: {share * 100:.2f}% of a core")


if __name__ == "__main__":
    main()
