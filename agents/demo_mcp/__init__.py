"""A demo MCP server that simulates a small Kubernetes cluster from data files.

Run it over stdio with ``python -m agents.demo_mcp``.
"""

from agents.demo_mcp.server import DemoCluster, create_server

__all__ = ["DemoCluster", "create_server"]
