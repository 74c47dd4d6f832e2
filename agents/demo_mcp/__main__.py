"""``python -m agents.demo_mcp``: serve the demo cluster over stdio."""

from agents.demo_mcp.server import create_server


def main() -> None:
    create_server().run("stdio")


if __name__ == "__main__":
    main()
