"""A real HTTP server on 127.0.0.1 that replays scripted replies and records requests.

The wire-format fakes for each LLM API build on this: the SDK under test talks real
HTTP to a background thread, so what is asserted is what the SDK actually sent and
how it reacted to bytes a real API could send. Streams use chunked transfer
encoding, so a connection closed before the terminating chunk looks to the client
exactly like a real mid-stream cut (an incomplete body, not a clean end).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or None when the body was empty or not JSON


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str = ""  # the optional ``event:`` line (Anthropic names every event)
    delay: float = 0.0  # seconds to wait before sending this event


@dataclass(frozen=True)
class StreamReply:
    events: tuple[SSEEvent, ...]
    # Close the connection after this many events without ending the chunked body.
    cut_after: int | None = None


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


Reply = StreamReply | ErrorReply


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, like real APIs
    # A stream is many small writes: without this each waits for the client's delayed
    # ACK of the one before (Nagle's algorithm), up to ~40 ms a chunk.
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:
        self.server.owner.handle(self)

    def do_GET(self) -> None:
        self.server.owner.handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: ScriptedServer


class ScriptedServer:
    """Replays queued replies in order; an unscripted request gets a 500 in API shape.

    Subclasses name their endpoint (``accepts``) and the provider's error body shape
    (``error_body``), so that even a test mistake fails the way the real API would.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._disconnects = 0
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- scripting and inspection ----------------------------------------------------

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    @property
    def disconnects(self) -> int:
        """How many streams the client closed before the server finished them."""
        with self._lock:
            return self._disconnects

    def wait_for_disconnect(self, timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.disconnects:
                return True
            time.sleep(0.01)
        return False

    # -- subclass hooks --------------------------------------------------------------

    def accepts(self, method: str, path: str) -> bool:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    # -- request handling (server threads) -------------------------------------------

    def handle(self, handler: _Handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        split = urlsplit(handler.path)
        recorded = RecordedRequest(
            method=handler.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={name.lower(): value for name, value in handler.headers.items()},
            body=body,
        )
        with self._lock:
            self._requests.append(recorded)
            reply = self._replies.popleft() if self._replies else None
        if not self.accepts(recorded.method, recorded.path):
            message = f"fake: no route for {recorded.method} {recorded.path}"
            self._send_error(handler, ErrorReply(404, self.error_body(404, message)))
        elif reply is None:
            message = "fake: no scripted reply left for this request"
            self._send_error(handler, ErrorReply(500, self.error_body(500, message)))
        elif isinstance(reply, ErrorReply):
            self._send_error(handler, reply)
        else:
            self._send_stream(handler, reply)

    def _send_error(self, handler: _Handler, reply: ErrorReply) -> None:
        payload = json.dumps(reply.body).encode()
        handler.send_response(reply.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)
        handler.wfile.flush()

    def _send_stream(self, handler: _Handler, reply: StreamReply) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            for index, event in enumerate(reply.events):
                if reply.cut_after is not None and index >= reply.cut_after:
                    self._abort(handler)
                    return
                if event.delay and not self._wait_connected(handler, event.delay):
                    self._note_disconnect(handler)
                    return
                text = (
                    f"event: {event.event}\n" if event.event else ""
                ) + f"data: {event.data}\n\n"
                data = text.encode()
                handler.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
                handler.wfile.flush()
            if reply.cut_after is not None:
                self._abort(handler)
                return
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self._note_disconnect(handler)

    def _wait_connected(self, handler: _Handler, delay: float) -> bool:
        """Sleep ``delay`` seconds; False as soon as the client hangs up."""
        deadline = time.monotonic() + delay
        sock = handler.connection
        while (remaining := deadline - time.monotonic()) > 0:
            if self._stopping.is_set():
                return False
            readable, _, _ = select.select([sock], [], [], min(remaining, 0.02))
            if readable:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        return False
                except OSError:
                    return False
        return True

    def _note_disconnect(self, handler: _Handler) -> None:
        with self._lock:
            self._disconnects += 1
        handler.close_connection = True

    def _abort(self, handler: _Handler) -> None:
        # Without the terminating zero-length chunk, the client sees a truncated body.
        handler.wfile.flush()
        handler.close_connection = True
        with contextlib.suppress(OSError):  # the client may have gone already
            handler.connection.shutdown(socket.SHUT_RDWR)


def sse_json(payload: dict[str, Any], *, event: str = "", delay: float = 0.0) -> SSEEvent:
    return SSEEvent(data=json.dumps(payload), event=event, delay=delay)
