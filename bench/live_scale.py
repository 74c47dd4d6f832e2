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
import socket
import struct
import subprocess
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
_SO_TIMESTAMPNS = 35  # Linux: SO_TIMESTAMPNS = SCM_TIMESTAMPNS

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


class WorkerTap:
    """Notes when each stamped word left a worker: listens to what the workers send the
    relays (under SQLite it announces a port as a relay does; on PostgreSQL it LISTENs)."""

    def __init__(self, dep, db: str) -> None:
        self.sent: dict[str, float] = {}
        self.dep, self.db = dep, db
        self._stop = threading.Event()
        if db == "sqlite":
            self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            # The kernel notes when each datagram arrived: this thread shares a busy
            # process (Playwright, the model server) and may read it later.
            self.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            self.socket.bind(("127.0.0.1", 0))
            self.socket.settimeout(0.2)
            relays = dep.data_dir / "relays"
            relays.mkdir(exist_ok=True)
            self.announced = relays / f"{os.getpid()}-{self.socket.getsockname()[1]}"
            self.announced.write_text("")
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _note(self, text: str, at: float | None = None) -> None:
        now = at if at is not None else time.time() * 1000
        for match in STAMP.finditer(text):
            self.sent.setdefault(match.group(0), now)

    def _listen(self) -> None:
        if self.db == "sqlite":
            while not self._stop.is_set():
                try:
                    data, ancillary, _, _ = self.socket.recvmsg(65536, 64)
                except TimeoutError:
                    continue
                arrived = None
                for level, kind, value in ancillary:
                    if (level, kind) == (socket.SOL_SOCKET, _SO_TIMESTAMPNS):
                        seconds, nanoseconds = struct.unpack("qq", value[:16])
                        arrived = seconds * 1000 + nanoseconds / 1e6
                if data.startswith(b"S"):
                    self._note(data[33:].decode(errors="replace"), arrived)
            return
        import psycopg

        with psycopg.connect(self.dep.env["DATABASE_URL"], autocommit=True) as connection:
            connection.execute("LISTEN tarsy_stream")
            while not self._stop.is_set():
                for notify in connection.notifies(timeout=0.2):
                    self._note(notify.payload)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        if self.db == "sqlite":
            self.announced.unlink(missing_ok=True)
            self.socket.close()


def run_round(dep, browser, count: int, remote: bool) -> dict:
    """``count`` sessions at once, each followed by its own page: a Chromium page each,
    or (``remote``) a Chromium page for the first and a page's WebSocket for the others
    (bench/page_sockets.py). Returns the latencies (ms) of the words seen live by each
    kind of follower, how many words were not seen live, the split at the worker, and
    each part's CPU use (cores) over the round."""
    context = browser.new_context()
    context.add_init_script(OBSERVER)
    page = context.new_page()
    log_in(page, dep.base_url)
    browsers = 1 if remote else count
    pages = [page] + [context.new_page() for _ in range(browsers - 1)]
    ids = [
        api(dep, "/api/v1/alerts", {"data": f"namespace: payments\nbench {n}"})["session_id"]
        for n in range(count)
    ]
    tap = WorkerTap(dep, "sqlite" if dep.env["DATABASE_URL"].startswith("sqlite") else "pg")
    sockets = None
    if ids[browsers:]:
        cookie = "; ".join(f"{c['name']}={c['value']}" for c in context.cookies())
        sockets = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("page_sockets.py")),
                dep.base_url,
                cookie,
                *ids[browsers:],
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if sockets.stdout is None or sockets.stdout.readline().strip() != "ready":
            raise RuntimeError("bench/page_sockets.py did not start")
    cpu_before, started = cpu_by_part(dep), time.monotonic()
    opened_at = {}
    for page, session_id in zip(pages, ids, strict=False):
        page.goto(f"{dep.base_url}/sessions/{session_id}/")
        opened_at[session_id] = time.time() * 1000 + 500  # the socket has subscribed by then
    for session_id in ids[browsers:]:
        opened_at[session_id] = time.time() * 1000 + 500
    seen: dict[str, dict[str, float]] = {}
    for page, session_id in zip(pages, ids, strict=False):
        page.wait_for_selector(
            '#session-status[data-status="completed"]', timeout=300_000, state="attached"
        )
        page.wait_for_timeout(200)
        seen[session_id] = page.evaluate("window.__seen")
    for session_id in ids[browsers:]:
        wait_ended(dep, session_id)
    elapsed = time.monotonic() - started
    cpu = {k: (v - cpu_before[k]) / elapsed for k, v in cpu_by_part(dep).items()}
    if sockets is not None:
        time.sleep(0.2)
        out, _ = sockets.communicate("", timeout=60)
        heard = json.loads(out)
        for session_id in ids[browsers:]:
            seen[session_id] = heard
    result: dict = {"browser": [], "socket": [], "unseen": 0, "to_worker": [], "to_page": []}
    for n, session_id in enumerate(ids):
        kind = "browser" if n < browsers else "socket"
        for word in _words_sent(dep, session_id):
            sent_ms = int(STAMP.fullmatch(word).group(1)) / 1000
            if sent_ms < opened_at[session_id]:
                continue  # streamed before the page was following
            if word not in seen[session_id]:
                result["unseen"] += 1
                continue
            result[kind].append(seen[session_id][word] - sent_ms)
            if word in tap.sent:
                result["to_worker"].append(tap.sent[word] - sent_ms)
                result["to_page"].append(seen[session_id][word] - tap.sent[word])
    result["cpu"] = cpu
    tap.close()
    context.close()
    return result


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
    parts["chromium renderers"] = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):
                if "chrom" in (entry / "comm").read_text():
                    renderer = b"--type=renderer" in (entry / "cmdline").read_bytes()
                    part = "chromium renderers" if renderer else "chromium"
                    parts[part] += cpu_seconds(int(entry.name))
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
    parser.add_argument(
        "--followers",
        choices=["browsers", "remote", "both"],
        default="both",
        help="a Chromium page on this machine for every session (browsers), or for one and "
        "a page's WebSocket for the others, as when the SREs' browsers run elsewhere (remote)",
    )
    parser.add_argument(
        "--workers",
        default="2",
        help="TARSY_WORKERS (bin/run's 2), or per-session: one worker process per session, "
        "as TARSy ran before workers ran many sessions each (to measure an older checkout)",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.sessions.split(",")]
    pg_url = args.postgres_url or postgres_server_url()
    if args.db == "postgres" and not pg_url:
        parser.error("PostgreSQL: set TARSY_TEST_POSTGRES_URL or pass --postgres-url")
    most = max(counts)
    env = {
        "TARSY_WORKERS": str(max(counts)) if args.workers == "per-session" else args.workers,
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
                run_round(dep, browser, most, remote=True)
                modes = ["browsers", "remote"] if args.followers == "both" else [args.followers]
                for mode in modes:
                    for count in counts:
                        result = run_round(dep, browser, count, remote=mode == "remote")
                        results.append((mode, count, load_average(), result))
        browser.close()

    print(f"\n{args.db}: {WORDS} words per model call, one every {WORD_DELAY * 1000:g} ms; {env}")
    p99_one: dict[str, float] = {}
    for mode, count, load, result in results:
        print(
            f"{count:>3} sessions streaming, "
            + (
                "a Chromium page each"
                if mode == "browsers"
                else "one Chromium page, the others followed by a page's WebSocket"
            )
            + f"  (not seen live: {result['unseen']}; {load})"
        )
        for kind, name in (("browser", "model → Chromium page"), ("socket", "model → page socket")):
            part = result[kind]
            if not part:
                continue
            p99 = percentile(part, 0.99)
            if count == 1:
                p99_one[kind] = p99
            ratio = f"  p99/p99 at 1={p99 / p99_one[kind]:5.2f}" if kind in p99_one else ""
            print(
                f"      {name}: n={len(part):<5} p50={percentile(part, 0.5):7.1f} ms  "
                f"p99={p99:7.1f} ms  max={max(part):7.1f} ms{ratio}"
            )
        for name, key in (
            ("model → sent by the worker (SDK, worker)", "to_worker"),
            ("sent by the worker → page (relay, socket, browser)", "to_page"),
        ):
            if part := result[key]:
                print(
                    f"      {name}: p50={percentile(part, 0.5):7.1f} ms  "
                    f"p99={percentile(part, 0.99):7.1f} ms"
                )
        print("      CPU (cores): " + ", ".join(f"{k} {v:.2f}" for k, v in result["cpu"].items()))
    (before, before_bytes), (now, now_bytes) = rows.values()
    print(
        f"event-log rows per investigation: {before} before, {now} now (ratio {now / before:.2f}); "
        f"payload bytes {before_bytes} before, {now_bytes} now"
    )
    for label, share in idle.items():
        print(f"idle daphne CPU, one session page open, {label}: {share * 100:.2f}% of a core")


if __name__ == "__main__":
    main()
