"""A tiny stdio MCP server for the tests: it hangs, crashes, floods and reports its env on request."""

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
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


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


@server.tool(structured_output=False)
def big(kb: int) -> str:
    """About ``kb`` kilobytes of an application log with a few distinct errors in it."""
    lines = []
    size = 0
    n = 0
    while size < kb * 1024:
        n += 1
        if n % 500 == 0:
            line = f"2026-11-22T10:{n % 60:02d}:00Z ERROR payments-api: OOMKilled (limit 256Mi)"
        elif n % 333 == 0:
            line = f"2026-11-22T10:{n % 60:02d}:00Z WARN payments-api: retrying database connect"
        else:
            line = f"2026-11-22T10:{n % 60:02d}:00Z INFO payments-api: handled request #{n}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


@server.tool()
def structured() -> dict[str, int]:
    """Return only structured content."""
    return {"pods": 3}


if __name__ == "__main__":
    server.run("stdio")
