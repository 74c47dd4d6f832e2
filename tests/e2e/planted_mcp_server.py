"""A stdio MCP server whose tools return the planted-secret corpus (tests/secrets_corpus.py),
the way real servers return configuration, Secrets, kubeconfigs and logs."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests import secrets_corpus

server = MCPServer("planted", log_level="WARNING")


@server.tool(structured_output=False)
def dump_everything() -> str:
    """Every document of the corpus, one after another, as a tool might print them."""
    return "\n---\n".join(f"# {shape}\n{text}" for shape, text in secrets_corpus.documents())


@server.tool(structured_output=False)
def get_secret(name: str) -> str:
    """A Kubernetes Secret as kubectl -o yaml prints it."""
    return secrets_corpus.documents_by_shape()["kubernetes secret yaml"]


if __name__ == "__main__":
    # A real server often says what it connects with; the tests check this never leaks.
    sys.stderr.write("planted MCP server starting with DB_PASS=Zq7xStderrPass\n")
    server.run("stdio")
