"""A stdio MCP server whose tool returns the hostile corpus (tests/hostile_corpus.py), the
way a compromised or broken server would: deep documents, alias bombs, a mebibyte
without a newline, NUL characters."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests import hostile_corpus

server = MCPServer("hostile", log_level="WARNING")


@server.tool(structured_output=False)
def get_document(name: str) -> str:
    """One document of the hostile corpus, by name."""
    return hostile_corpus.CORPUS[name]


if __name__ == "__main__":
    server.run("stdio")
