"""A stdio MCP server for the steering tests. ``post_note`` stands in for an SRE: it sends
a steering note to TARSy's API and answers with TARSy's reply, so the note is stored
while the agent that called the tool waits for it (between two of its model calls).
``wait_for_file`` holds the agent in a tool call until the test has steered it (the test
creates the file), so a test can act "while the agent runs" without timing.

Usage: python steering_mcp_server.py
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from mcp.server.mcpserver import MCPServer

server = MCPServer("steering", log_level="WARNING")


@server.tool(structured_output=False)
def post_note(url: str, token: str, text: str) -> str:
    """POST {"text": text} to url (TARSy's /steer route) with the bearer token."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1
    try:
        with direct.open(request, timeout=30) as response:
            return f"{response.status} {response.read().decode()}"
    except urllib.error.HTTPError as error:
        return f"{error.code} {error.read().decode()}"


@server.tool(structured_output=False)
def wait_for_file(path: str, timeout: float = 120) -> str:
    """Return once the file at path exists (or after timeout seconds, saying so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as released:
                return f"released: {released.read()}"
        except FileNotFoundError:
            time.sleep(0.05)
    return f"not released within {timeout:g} s"


if __name__ == "__main__":
    server.run("stdio")
