"""A local stand-in for GitHub: raw file content (``raw.githubusercontent.com``) and the
contents API (``api.github.com``), on a real HTTP server in a thread.

``LocalGitHub.transport()`` is an httpx transport that sends every request to this
server and leaves the URL's host in the ``Host`` header, so the code under test builds
the real GitHub URLs (and decides about tokens by them) while the bytes stay local.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx


@dataclass
class Request:
    host: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class LocalGitHub:
    # raw files by "<owner>/<repo>/<ref>/<path>"
    files: dict[str, str] = field(default_factory=dict)
    # contents API answers by "<owner>/<repo>/<path>": a list of items
    folders: dict[str, list[dict]] = field(default_factory=dict)
    status: int = 200  # answer every request with this status instead, when not 200
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        github = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                host = headers.get("host", "").split(":")[0]
                github.requests.append(Request(host, parts.path, parse_qs(parts.query), headers))
                body, status = github.answer(host, parts.path)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # shutdown() waits up to one poll of serve_forever (0.5 s by default) in every teardown
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def answer(self, host: str, path: str) -> tuple[bytes, int]:
        if self.status != 200:
            return b'{"message": "stand-in failure"}', self.status
        if host == "api.github.com" and path.startswith("/repos/"):
            owner, repo, _, rest = path.removeprefix("/repos/").split("/", 3)
            items = self.folders.get(f"{owner}/{repo}/{rest}".rstrip("/"))
            if items is None:
                return b'{"message": "Not Found"}', 404
            return json.dumps(items).encode(), 200
        text = self.files.get(path.lstrip("/"))
        if text is None:
            return b"404: Not Found", 404
        return text.encode(), 200

    def transport(self) -> httpx.BaseTransport:
        port = self.port

        class ToLocal(httpx.HTTPTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=port)
                return super().handle_request(request)

        return ToLocal()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
