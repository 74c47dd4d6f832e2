"""An MCP server over streamable HTTP or SSE, built with the ``mcp`` SDK, that records
the headers of every request it gets (one JSON line each) and, given a token, answers
401 to requests without ``Authorization: Bearer <token>``.

Usage: python http_mcp_server.py PORT http|sse LOG_FILE [TOKEN]
"""

from __future__ import annotations

import json
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("recording", log_level="WARNING")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(structured_output=False)
def add(a: int, b: int, negate: bool = False) -> str:
    """a + b, negated if asked; says what types it received."""
    total = -(a + b) if negate else a + b
    return f"{total} ({type(a).__name__}, {type(b).__name__}, {type(negate).__name__})"


class Recording:
    def __init__(self, app, log: str, token: str) -> None:
        self.app, self.log, self.token = app, log, token

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            with open(self.log, "a") as log:  # noqa: ASYNC230 - a test server
                entry = {"method": scope["method"], "path": scope["path"], "headers": headers}
                log.write(json.dumps(entry) + "\n")
            if self.token and headers.get("authorization") != f"Bearer {self.token}":
                body = b'{"error": "invalid_token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    port, kind, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    token = sys.argv[4] if len(sys.argv) > 4 else ""
    app = server.streamable_http_app() if kind == "http" else server.sse_app()
    uvicorn.run(Recording(app, log, token), host="127.0.0.1", port=port, log_level="warning")
