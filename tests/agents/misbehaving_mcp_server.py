"""A tiny stdio MCP server for the client tests: it hangs, crashes and reports its env on request."""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("misbehaving", log_level="WARNING")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(structured_output=False)
def getenv(name: str) -> str:
    """Return an environment variable of the server process ('<unset>' if missing)."""
    return os.environ.get(name, "<unset>")


@server.tool(structured_output=False)
async def hang(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "woke up"


@server.tool(structured_output=False)
def crash() -> str:
    """Exit the server process abruptly, mid-call."""
    sys.stderr.write("misbehaving server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def structured() -> dict[str, int]:
    """Return only structured content."""
    return {"pods": 3}


if __name__ == "__main__":
    server.run("stdio")
