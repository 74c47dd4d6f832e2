"""A local stand-in for the Slack Web API (``chat.postMessage``,
``conversations.history``) on a real HTTP server in a thread; ``slack-sdk`` is pointed
at ``base_url``. It answers like Slack: ``{"ok": true, …}`` or ``{"ok": false, "error"}``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


def _form(encoded: str) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(encoded).items()}


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    headers: dict[str, str]


@dataclass
class LocalSlack:
    # conversations.history's messages, newest first, as Slack returns them
    history: list[dict[str, Any]] = field(default_factory=list)
    page_size: int = 200  # messages per history page (Slack's limit is the client's)
    fail_with: str = ""  # every call answers {"ok": false, "error": fail_with}
    http_status: int = 200  # every call answers this status with an HTML body, when not 200
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        slack = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(_form(urlsplit(self.path).query))

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    params = json.loads(raw or "{}")
                else:
                    params = _form(raw)
                self._answer(params)

            def _answer(self, params: dict[str, Any]) -> None:
                method = urlsplit(self.path).path.rsplit("/", 1)[-1]
                headers = {k.lower(): v for k, v in self.headers.items()}
                slack.calls.append(Call(method, params, headers))
                status, body = slack.answer(method, params)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "text/html" if status != 200 else "application/json"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        # shutdown() waits up to one poll of serve_forever (0.5 s by default) in every teardown
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def answer(self, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        if self.http_status != 200:
            return self.http_status, b"<html>Service Unavailable</html>"
        if self.fail_with:
            return 200, {"ok": False, "error": self.fail_with}
        if method == "chat.postMessage":
            ts = f"1700000{len(self.posts()):03d}.000100"
            return 200, {"ok": True, "channel": params.get("channel"), "ts": ts}
        if method == "conversations.history":
            start = int(params.get("cursor") or 0)
            page = self.history[start : start + self.page_size]
            more = start + self.page_size < len(self.history)
            return 200, {
                "ok": True,
                "messages": page,
                "has_more": more,
                "response_metadata": {"next_cursor": str(start + self.page_size) if more else ""},
            }
        return 200, {"ok": False, "error": "unknown_method"}

    def posts(self) -> list[Call]:
        return [call for call in self.calls if call.method == "chat.postMessage"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
