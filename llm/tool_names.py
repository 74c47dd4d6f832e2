"""Canonical tool names are ``server.tool``; some APIs forbid dots in function names.

Everything inside TARSy uses the canonical form; each backend converts at its edge
with these two functions, and nowhere else.
"""

from __future__ import annotations

SEPARATOR = "__"


def tool_name_to_api(name: str) -> str:
    server, _, tool = name.partition(".")
    return f"{server}{SEPARATOR}{tool}" if tool else name


def tool_name_from_api(name: str) -> str:
    server, sep, tool = name.partition(SEPARATOR)
    return f"{server}.{tool}" if sep else name


def tool_parts(name: str) -> tuple[str, str]:
    """``"kubernetes.get_pods"`` → ``("kubernetes", "get_pods")``; a built-in tool of no
    server (``load_skill``) gives ``("", "load_skill")``, as TARSy records it. Every place
    that takes a canonical name apart uses this."""
    server, dot, tool = name.partition(".")
    return (server, tool) if dot else ("", name)


def split_tool_name(name: str) -> tuple[str, str]:
    """``tool_parts``, for a name that must be canonical: anything else is a ValueError."""
    server, tool = tool_parts(name)
    if not server or not tool:
        raise ValueError(f"tool name {name!r} is not of the form 'server.tool'")
    return server, tool
