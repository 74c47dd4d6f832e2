"""TARSy's ``command: mock`` MCP servers (``test/e2e/mcp_helpers.go``) as a real stdio
server: the tools of the server named by ``TARSY_MCP_SERVER_ID`` (which TARSy gives every
stdio server it starts), each answering its scripted result whatever it is asked.

Usage: python mock_mcp.py TOOLS.json   (TOOLS.json: {server_id: {tool: result text}})
"""

from __future__ import annotations

import json
import os
import sys

from mcp.server.mcpserver import MCPServer


def _static(result: str, path: str = "", server_id: str = "", name: str = ""):
    def answer() -> str:
        # The file as it is now: a test replaying several of TARSy's tests on one
        # deployment rewrites it between them (a tool it drops keeps its first result).
        if path:
            with open(path) as file:
                return json.load(file).get(server_id, {}).get(name, result)
        return result

    return answer


def main() -> None:
    server_id = os.environ.get("TARSY_MCP_SERVER_ID", "")
    with open(sys.argv[1]) as file:
        tools = json.load(file).get(server_id, {})
    server = MCPServer(server_id or "mock", log_level="WARNING")
    for name, result in tools.items():
        # No parameters: arguments are accepted and ignored, as TARSy's StaticToolHandler.
        server.add_tool(
            _static(result, sys.argv[1], server_id, name),
            name=name,
            description=f"test tool: {name}",
            structured_output=False,
        )
    server.run("stdio")


if __name__ == "__main__":
    main()
