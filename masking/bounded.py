"""Parsing text from outside (alerts, chat, tool results, runbooks, frames, model output)
without letting it take a process down.

The parsers we use fail differently on hostile depth. Python's ``json`` raises
``RecursionError``; PyYAML's C loader (libyaml and its Cython composer) recurses in C and
overflows the stack, a SIGSEGV no ``except`` can catch; libyaml's scanner is also
quadratic in the depth of a one-line flow collection. So nothing outside is handed to a
parser before it is measured:

- size, in characters;
- nesting, by a linear pass over the text: exact for JSON (:func:`json_depth`); for YAML
  (:func:`yaml_depth_bound`) an upper bound that never under-counts, whichever of YAML's
  ways of nesting the text uses — flow ``[``/``{``, block sequences and complex keys on
  one line (``- - -``, ``? ? ?``), indentation;
- for YAML, once composed and before anything is built, the node graph: its depth and
  size with every alias expanded (what a JSON writer or a tree walk would see, and more
  than merge keys, ``<<: [*a, *a]``, copy), and cycles.

libyaml composes only a text whose bound is within ``YAML_BOUND_FACTOR`` of the limit. A
text past it (deep, or looking deep: brackets inside quoted strings count) of at most
``PURE_PYTHON_CHARS`` is composed by PyYAML's pure-Python parser, stopped past the limit;
a larger one is refused.

Refusals raise :class:`UnsafeInput` (a ``ValueError``), whose message names the limit.
Callers decide what a refusal means: the masker masks the text line by line instead, the
REST API answers 400, a page shows the text as sent.

:func:`storable` is for text that cannot be refused (a tool's output, a model's answer):
NUL, which PostgreSQL cannot store in text, and lone surrogates, which have no UTF-8,
become U+FFFD.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

__all__ = [
    "MAX_DEPTH",
    "UnsafeInput",
    "deeper_than",
    "json_depth",
    "json_problem",
    "json_text",
    "load_json",
    "load_yaml",
    "load_yaml_all",
    "storable",
    "unstorable",
    "yaml_depth_bound",
]

# Kubernetes objects, alerts and our own config are a dozen levels deep at most.
MAX_DEPTH = 64
# Nodes a YAML document may hold with its aliases expanded (a billion laughs holds 10^9).
MAX_NODES = 200_000
# The YAML text bound counts up to twice the real depth (and more for brackets in quoted
# text); within this factor of the limit libyaml composes the text, and the exact check
# on the composed graph enforces the real limit.
YAML_BOUND_FACTOR = 4
# Past that factor the pure-Python parser composes a text up to this size: it looks at
# every open flow level for each token (~1 s for 32 KiB of 60-deep flow collections).
PURE_PYTHON_CHARS = 32 * 1024

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnsafeInput(ValueError):
    """Text not handed to a parser (or not built) because of its size or shape."""


# --- JSON ----------------------------------------------------------------------------------

# A string (to its closing quote, or to the end of an unterminated one) or a bracket.
# Possessive: an unterminated string costs one pass, not one per quote after it.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]', re.S)


def json_depth(text: str, limit: int) -> int:
    """How deep the JSON parser would nest in ``text``: exact for valid JSON, and for an
    invalid text never less than what the parser reaches before its error. Stops counting
    once past ``limit``."""
    depth = deepest = 0
    for match in _JSON_TOKEN.finditer(text):
        char = text[match.start()]
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def load_json(
    text: str | bytes,
    *,
    what: str = "JSON",
    max_depth: int = MAX_DEPTH,
    max_chars: int | None = None,
    **options: Any,
) -> Any:
    """``json.loads`` for outside text: ``UnsafeInput`` above ``max_chars`` (None: the
    caller bounded the size) or ``max_depth`` levels; ``ValueError`` for invalid JSON
    (``UnicodeDecodeError`` for bytes that are not UTF-8/16/32)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    _check_size(text, max_chars, what)
    if json_depth(text, max_depth) > max_depth:
        raise UnsafeInput(f"{what} is nested more than {max_depth} levels deep")
    try:
        return json.loads(text, **options)
    except RecursionError:  # only from a caller already deep in its own stack
        raise UnsafeInput(f"{what} is nested too deeply to parse here") from None


# --- YAML ----------------------------------------------------------------------------------

_YAML_LINE_BREAK = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")
_YAML_WHITESPACE = re.compile(r"[ \t\r\n\x85\u2028\u2029]")
# Where a quoted scalar, a comment or a tag may start: after whitespace, a flow indicator
# or ":" — and, for a comment, right after a quoted scalar or a block scalar header.
_TOKEN_BOUNDARY = frozenset(" \t\r\n\x85\u2028\u2029[]{},:")
_COMMENT_BOUNDARY = _TOKEN_BOUNDARY | frozenset("\"'|>")
_REGION_START = re.compile(r"""["'#!%]""")
_DOUBLE_QUOTE_CLOSER = re.compile(r'\\*"')
_SINGLE_QUOTE_RUN = re.compile(r"'+")
# "[]" and "{}" leave the depth as it was, whatever they are part of.
_FLOW_BRACKET = re.compile(r"\[\]|\{\}|[\[\]{}]")
# A block indicator: "-" or "?" opens a collection at its column; after it (and after a
# ":"), the next token may be a mapping key, which opens one at its own column.
_BLOCK_INDICATOR = re.compile(r"[-?:](?=[ \t]|$)")
_NOT_INDICATOR = re.compile(r"[^-?: \t]")
_BLANKS = re.compile(r"[ \t]*")


def yaml_depth_bound(text: str, limit: int) -> int:
    """An upper bound on how deep a YAML parser nests collections in ``text``, in linear
    time; stops counting once past ``limit``.

    Flow collections: every ``[``/``{`` counts (a ``[`` twice: ``[a: b]`` is a mapping in a
    sequence); a ``]``/``}`` counts down only where it cannot be inside a quoted scalar, a
    comment or a tag. Block collections: libyaml and PyYAML open one only at a column
    greater than the enclosing one's, at the column of a ``-``/``?`` indicator or a key, so
    a set of candidate columns (pruned when a line certainly starts a token at a smaller
    column, as the parser's indentation stack is) bounds how many are open; an indentless
    sequence can add one more per mapping, hence twice that.
    """
    if text.startswith("\ufeff"):
        text = text[1:]  # libyaml drops the BOM before counting columns
    skipped = _skipped_regions(text)
    starts = [first for first, _ in skipped]
    brackets = _FLOW_BRACKET.finditer(text)  # read as the lines are, so a deep text stops early
    bracket = next(brackets, None)
    columns: list[int] = []  # candidate columns of open block collections, ascending
    flow = deepest = 0
    line_start = 0
    for line_end in [*(m.start() for m in _YAML_LINE_BREAK.finditer(text)), len(text)]:
        line = text[line_start:line_end]
        blanks = _BLANKS.match(line)
        assert blanks is not None  # "[ \t]*" matches everywhere
        indent = blanks.end()
        if indent < len(line):
            # The parser drops deeper columns where a line starts a token in block context.
            if flow == 0 and not _inside(skipped, starts, line_start + indent):
                while columns and columns[-1] > indent:
                    columns.pop()
            _add_column(columns, indent)
            # Only a line's leading indicators nest ("- - a: b", "? - x", ": - y" after an
            # explicit key): after a key's ":" a collection on the same line is an error.
            other = _NOT_INDICATOR.search(line, indent)
            leading = line[: other.start() if other else len(line)]
            for match in _BLOCK_INDICATOR.finditer(leading, indent):
                if leading[match.start()] != ":":
                    _add_column(columns, match.start())
                blanks = _BLANKS.match(line, match.end())
                assert blanks is not None
                after = blanks.end()
                if after < len(line):
                    _add_column(columns, after)
                if 2 * len(columns) > limit:
                    return 2 * len(columns)
        line_deepest = flow
        while bracket is not None and bracket.start() < line_end:
            position, token = bracket.start(), bracket.group()
            bracket = next(brackets, None)
            if token in ("[", "{"):
                flow += 2 if token == "[" else 1
                line_deepest = max(line_deepest, flow)
                if 2 * len(columns) + flow > limit:
                    return 2 * len(columns) + flow
            elif token in ("]", "}") and not _inside(skipped, starts, position):
                flow = max(flow - (2 if token == "]" else 1), 0)
        deepest = max(deepest, 2 * len(columns) + line_deepest)
        if deepest > limit:
            break
        line_start = line_end + (2 if text.startswith("\r\n", line_end) else 1)
    return deepest


def _add_column(columns: list[int], column: int) -> None:
    if not columns or column > columns[-1]:
        columns.append(column)
        return
    index = bisect.bisect_left(columns, column)
    if columns[index] != column:
        columns.insert(index, column)


def _inside(regions: list[tuple[int, int]], starts: list[int], position: int) -> bool:
    index = bisect.bisect_right(starts, position) - 1
    return index >= 0 and position <= regions[index][1]


def _skipped_regions(text: str) -> list[tuple[int, int]]:
    """Merged ``(first, last)`` spans that may be a quoted scalar, a comment, a tag or a
    directive: every place one could start, to where it would end. A bracket inside one
    of them may not be structure, so it never counts down."""
    length = len(text)
    double_closers = [
        m.end() - 1 for m in _DOUBLE_QUOTE_CLOSER.finditer(text) if (m.end() - m.start()) % 2
    ]
    runs = [(m.start(), m.end()) for m in _SINGLE_QUOTE_RUN.finditer(text)]
    run_at = dict(runs)
    odd_run_starts = [start for start, end in runs if (end - start) % 2]
    odd_run_ends = [end - 1 for start, end in runs if (end - start) % 2]
    line_ends = [m.start() - 1 for m in _YAML_LINE_BREAK.finditer(text)]
    merged: list[tuple[int, int]] = []
    last_space_end = -1  # a tag ends at the next whitespace; shared by tags before it
    for match in _REGION_START.finditer(text):
        start = match.start()
        before = text[start - 1] if start else "\n"
        char = text[start]
        if char == "#":
            if before not in _COMMENT_BOUNDARY:
                continue
            end = _line_end(line_ends, start, length)
        elif char == "%":
            if before not in "\r\n\x85\u2028\u2029":
                continue  # a directive starts a line
            end = _line_end(line_ends, start, length)
        elif before not in _TOKEN_BOUNDARY:
            continue
        elif char == '"':
            index = bisect.bisect_right(double_closers, start)
            end = double_closers[index] if index < len(double_closers) else length - 1
        elif char == "'":
            run_end = run_at[start]
            if (run_end - start) % 2 == 0:
                end = run_end - 1  # '' is an empty scalar; '''' one quote
            else:
                index = bisect.bisect_left(odd_run_starts, run_end)
                end = odd_run_ends[index] if index < len(odd_run_ends) else length - 1
        else:  # "!", a tag
            if start > last_space_end:
                space = _YAML_WHITESPACE.search(text, start)
                last_space_end = space.start() - 1 if space else length - 1
            end = last_space_end
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _line_end(line_ends: list[int], position: int, length: int) -> int:
    index = bisect.bisect_left(line_ends, position)
    return line_ends[index] if index < len(line_ends) else length - 1


def load_yaml(text: str, **limits: Any) -> Any:
    """One YAML document, bounded like :func:`load_yaml_all`; None for an empty text."""
    documents = load_yaml_all(text, **limits)
    if len(documents) > 1:
        raise yaml.YAMLError(f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None


def load_yaml_all(
    text: str,
    *,
    what: str = "YAML",
    max_chars: int,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
) -> list[Any]:
    """Every document of ``text``: composed by libyaml when its text bound is within
    ``YAML_BOUND_FACTOR`` times ``max_depth``, else (up to ``PURE_PYTHON_CHARS``) by the
    pure-Python parser; built only once each composed document, aliases expanded, is
    checked.

    ``UnsafeInput`` when the text is over ``max_chars``, or a document is deeper than
    ``max_depth``, expands to more than ``max_nodes`` nodes, or refers to itself;
    ``yaml.YAMLError`` (or ``ValueError``, from a constructor) for invalid YAML."""
    _check_size(text, max_chars, what)
    text_limit = YAML_BOUND_FACTOR * max_depth
    if yaml_depth_bound(text, text_limit) <= text_limit:
        loader = _LOADER(text)
    elif len(text) <= PURE_PYTHON_CHARS:
        # Deep, or only looks it (brackets in quoted text count): the pure-Python parser,
        # slower, composes it and stops past max_depth.
        loader = _DepthLimitedLoader(text, max_depth=max_depth, what=what)
    else:
        raise UnsafeInput(
            f"{what} may be nested more than {max_depth} levels deep (brackets in quoted "
            f"text count too, in a YAML text over {PURE_PYTHON_CHARS // 1024} KiB)"
        )
    try:
        nodes: list[Node] = []
        while loader.check_node():
            node = loader.get_node()
            _check_graph(node, what=what, max_depth=max_depth, max_nodes=max_nodes)
            nodes.append(node)
        return [loader.construct_document(node) for node in nodes]
    except RecursionError:
        raise UnsafeInput(f"{what} is nested more than {max_depth} levels deep") from None
    finally:
        loader.dispose()


class _DepthLimitedLoader(yaml.SafeLoader):
    """PyYAML's own loader, refusing to compose deeper than ``max_depth``: its scanner
    looks at every open flow level for each token, so the sooner it stops the better."""

    def __init__(self, text: str, *, max_depth: int, what: str) -> None:
        super().__init__(text)
        self.depth, self.max_depth, self.what = 0, max_depth, what

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                raise UnsafeInput(f"{self.what} is nested more than {self.max_depth} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _check_graph(root: Node, *, what: str, max_depth: int, max_nodes: int) -> None:
    """Depth and size with every alias expanded (what a JSON writer or a naive walk would
    see; merge keys copy less than that), and cycles, over the composed graph: each node is
    visited once, however often it is referred to."""
    height: dict[int, int] = {}
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        children = _children(node)
        if finished:
            on_path.discard(key)
            height[key] = 1 + max((height[id(child)] for child in children), default=0)
            size[key] = 1 + sum(size[id(child)] for child in children)
            if height[key] > max_depth:
                raise UnsafeInput(f"{what} is nested more than {max_depth} levels deep")
            if size[key] > max_nodes:
                raise UnsafeInput(f"{what} expands to more than {max_nodes} nodes (aliases)")
            continue
        if key in height:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise UnsafeInput(f"{what} refers to itself (an alias inside its own anchor)")
            if id(child) not in height:
                stack.append((child, False))


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_size(text: str, max_chars: int | None, what: str) -> None:
    if max_chars is not None and len(text) > max_chars:
        raise UnsafeInput(f"{what} is {len(text)} characters; the limit is {max_chars}")


# --- Trees and storage -----------------------------------------------------------------------


def deeper_than(root: Any, limit: int) -> bool:
    """Whether lists and dicts (from a parser, an SDK) nest deeper than ``limit``, aliases
    (shared objects) expanded; a structure that contains itself is too deep."""
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        children = [c for c in _values(node) if isinstance(c, dict | list | tuple)]
        if finished:
            on_path.discard(key)
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            if height[key] > limit:
                return True
            continue
        if key in height or not isinstance(node, dict | list | tuple):
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                return True
            stack.append((child, False))
    return False


def _values(node: Any) -> Any:
    return node.values() if isinstance(node, dict) else node


def json_problem(root: Any, max_depth: int = MAX_DEPTH) -> str:
    """Why a parsed value (a model's tool-call arguments) cannot be kept as JSON: nested
    deeper than ``max_depth``, or a key or string that cannot be stored, said as "is
    nested …" or "contains …"; "" if it can."""
    if deeper_than(root, max_depth):
        return f"is nested more than {max_depth} levels deep"
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if problem := unstorable(node):
                return f"contains {problem}"
        elif isinstance(node, dict | list | tuple) and id(node) not in seen:
            seen.add(id(node))
            stack.extend(node.items() if isinstance(node, dict) else node)
    return ""


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def json_text(value: Any, **layout: Any) -> str:
    """``value`` as JSON text that can be stored and shown: non-ASCII characters as they
    are, except a lone surrogate (parsed from a ``"\\ud800"`` escape), which stays escaped."""
    text = json.dumps(value, ensure_ascii=False, **layout)
    return json.dumps(value, **layout) if _UNSTORABLE.search(text) else text


def storable(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD: a database and UTF-8 can
    hold it. (A str holds no surrogate pairs: every surrogate in one is lone.)"""
    return _UNSTORABLE.sub("\ufffd", text) if _UNSTORABLE.search(text) else text


def unstorable(text: str) -> str:
    """What in ``text`` cannot be stored, for an error message; "" when nothing."""
    match = _UNSTORABLE.search(text)
    if match is None:
        return ""
    if match.group() == "\x00":
        return f"a NUL character (at character {match.start()})"
    return f"a lone surrogate ({match.group()!a}) at character {match.start()}"
