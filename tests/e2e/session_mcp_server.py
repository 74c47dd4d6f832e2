"""TARSy's session-scoped MCP server (``session_headers_test.go``) as a real process: the
``mcp`` SDK's streamable HTTP server (stateless, JSON responses, as TARSy's) at ``/mcp``
with one tool, ``echo``, answering ``{"ok":true}``; ``DELETE /sessions/<id>`` answers 204.
Every request is recorded as one JSON line: method, path, the JSON-RPC method of a POST,
and the headers TARSy's test looks at (Authorization, X-Session-ID, Mcp-Session-Id).

Usage: python session_mcp_server.py PORT LOG_FILE
"""

from __future__ import annotations

import json
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("session-mcp", log_level="WARNING")


@server.tool(structured_output=False)
def echo() -> str:
    """echo tool for session header e2e"""
    return '{"ok":true}'


class Recording:
    def __init__(self, app, log: str) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        rpc = None
        if body:
            try:
                parsed = json.loads(body)
                rpc = parsed.get("method") if isinstance(parsed, dict) else "batch"
            except ValueError:
                rpc = "?"
        entry = {
            "method": scope["method"],
            "path": scope["path"],
            "rpc": rpc,
            "authorization": headers.get("authorization"),
            "x-session-id": headers.get("x-session-id"),
            "mcp-session-id": headers.get("mcp-session-id"),
        }
        with open(self.log, "a") as log:  # noqa: ASYNC230 - a test server
            log.write(json.dumps(entry) + "\n")
        if scope["path"].startswith("/sessions/"):
            status = 204 if scope["method"] == "DELETE" else 404
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


if __name__ == "__main__":
    port, log = int(sys.argv[1]), sys.argv[2]
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(Recording(app, log), host="127.0.0.1", port=port, log_level="warning")
