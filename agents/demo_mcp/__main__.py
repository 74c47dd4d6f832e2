"""``python -m agents.demo_mcp [--tools get_pods,get_events]``: serve the demo cluster
over stdio, with all its tools or only those named."""

import argparse

from agents.demo_mcp.server import create_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", help="comma-separated tool names to serve (default: all)")
    args = parser.parse_args()
    tools = {name.strip() for name in args.tools.split(",")} if args.tools else None
    create_server(tools=tools).run("stdio")


if __name__ == "__main__":
    main()
