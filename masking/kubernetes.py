"""Kubernetes Secrets, masked by structure: a Secret keeps its keys (the LLM may need to
know that ``password`` exists) but every value under ``data``/``stringData`` becomes
``[MASKED_SECRET_VALUE]``. ConfigMaps and everything else are left alone.

Nothing here recurses on the input's shape. A document reaches a parser only through
``bounded``, which measures it first: one larger than ``MAX_JSON_CHARS``/``MAX_YAML_CHARS``
or nested deeper than ``MAX_NESTING`` (aliases expanded) is never parsed nor re-serialized
(libyaml's composer and the JSON and YAML writers recurse) but handed to the textual
masker. That one works line by line with linear regexes, so it cannot fail on any input.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import yaml

from masking import bounded

SECRET_VALUE_MARKER = "[MASKED_SECRET_VALUE]"

SECRET_KIND_RE = re.compile(r"""kind\\?["']?[ \t]*:[ \t]*\\?["']?Secret(?:List)?\b""")
# Only a text that starts like a YAML document is worth handing to the YAML parser.
_LOOKS_LIKE_YAML_RE = re.compile(r"""\A\s*(?:---|-[ \t]|[\w"'./-][^\n:]*:(?:\s|\Z))""")
# Above these sizes the linear text fallback masks instead. YAML objects are built in Python
# even with libyaml (~20 µs a node): 128 KiB of tiny nodes still parses in under 0.5 s.
MAX_JSON_CHARS = 8 * 1024 * 1024
MAX_YAML_CHARS = 128 * 1024 if hasattr(yaml, "CSafeLoader") else 32 * 1024
_YAML_STYLE: dict[str, Any] = {"sort_keys": False, "allow_unicode": True}
# Kubernetes objects are a dozen levels deep; a document deeper than this is not one we
# need to understand, and re-serializing it could exhaust the interpreter's stack.
MAX_NESTING = 64
_MAX_EMBEDDING = 4  # Secrets inside strings inside documents (last-applied-configuration)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Writes a long string that the input aliased (``&s "…"`` then ``*s`` many times) as
    an alias again: PyYAML writes every string in full, and 20,000 references to a 10 KB
    string would turn 100 KB of input into 200 MB of output."""

    def ignore_aliases(self, data: Any) -> bool:
        if isinstance(data, str):
            return len(data) < 64
        return super().ignore_aliases(data)


def mask_kubernetes_secrets(text: str) -> str:
    if not SECRET_KIND_RE.search(text):
        return text  # the common case: nothing is parsed or re-serialized
    return _mask_document(text, 0)


def _mask_document(text: str, embedding: int) -> str:
    parsed = _parse(text) if embedding <= _MAX_EMBEDDING else None
    if parsed is None:
        return mask_secret_chunks(text)
    fmt, docs = parsed
    if not _mask_tree(docs, embedding):
        # "kind: Secret" was seen but no Secret object was found: mask textually anyway.
        return mask_secret_chunks(text)
    try:
        out = _serialize(fmt, docs, embedding)
    except ValueError:  # a lone surrogate the YAML writer cannot encode: mask as text
        return mask_secret_chunks(text)
    return out + "\n" if text.endswith("\n") and not out.endswith("\n") else out


def _serialize(fmt: str, docs: list[Any], embedding: int) -> str:
    if fmt == "yaml":
        return yaml.dump_all(docs, Dumper=_Dumper, explicit_start=len(docs) > 1, **_YAML_STYLE)
    # An embedded JSON string stays on one line, like kubectl's.
    layout: dict[str, Any] = {"separators": (",", ":")} if embedding else {"indent": 2}
    return bounded.json_text(docs[0], **layout)


def _parse(text: str) -> tuple[str, list[Any]] | None:
    try:
        if text.lstrip()[:1] in ("{", "["):
            document = bounded.load_json(text, max_chars=MAX_JSON_CHARS, max_depth=MAX_NESTING)
            return "json", [document]
        if not _LOOKS_LIKE_YAML_RE.match(text):
            return None
        docs = bounded.load_yaml_all(text, max_chars=MAX_YAML_CHARS, max_depth=MAX_NESTING)
    except (ValueError, yaml.YAMLError):
        # Truncated, not a document, too large or too deep (bounded.UnsafeInput is a
        # ValueError): the text fallback masks it.
        return None
    # A plain-text scalar is not a document; the textual fallback handles it.
    if not all(doc is None or isinstance(doc, dict | list) for doc in docs):
        return None
    return "yaml", docs


def _mask_tree(root: Any, embedding: int) -> bool:
    """Mask Secret objects anywhere in the tree in place; True if anything changed.

    Each list, dict and string is looked at once however many aliases refer to it: a
    string of a Secret aliased 20,000 times is parsed once, not 20,000 times."""
    changed = False
    stack = [root]
    seen: set[int] = set()
    strings: dict[str, str] = {}  # each string as masked
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict) and node.get("kind") == "Secret":
            changed |= _mask_secret_object(node)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in list(items):
            if isinstance(value, str):
                masked = strings.get(value)
                if masked is None:
                    secret = SECRET_KIND_RE.search(value)
                    masked = strings[value] = (
                        _mask_document(value, embedding + 1) if secret else value
                    )
                if masked != value:
                    node[key], changed = masked, True
            elif isinstance(value, dict | list):
                stack.append(value)
    return changed


def _mask_secret_object(secret: dict[str, Any]) -> bool:
    changed = False
    for field in ("data", "stringData"):
        values = secret.get(field)
        if isinstance(values, dict):
            for key, value in values.items():
                changed |= value != SECRET_VALUE_MARKER
                values[key] = SECRET_VALUE_MARKER
        elif values is not None and values != SECRET_VALUE_MARKER:
            secret[field], changed = SECRET_VALUE_MARKER, True
    return changed


# Textual fallback for Secrets that do not parse (truncated output, text around the
# document, absurd nesting): each object starts at an apiVersion key; only chunks with
# kind Secret change.
_CHUNK_START_RE = re.compile(r"""^---[ \t]*$|\\?"apiVersion\\?"|^[ \t-]*apiVersion[ \t]*:""", re.M)
_FLOW_DATA_RE = re.compile(
    r"""(?<![\w:])(\\?["']?(?:data|stringData)\\?["']?[ \t]*:[ \t]*\{)([^{}]*)"""
)
_FLOW_ITEM_RE = re.compile(
    r"""((?:\A|,)\s*(\\?["']?)[\w.-]+\2[ \t]*:[ \t]*)"""
    r"""(\\"[^"\n]*?\\"|"(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?|[^,}\s]+)"""
)
_BLOCK_DATA_RE = re.compile(r"""^([ \t]*(?:-[ \t]+)?)(?:data|stringData):[ \t]*(?:#.*)?$""")


_ANY_KIND_RE = re.compile(r"""kind\\?["']?[ \t]*:[ \t]*\\?["']?(\w+)""")


def mask_secret_chunks(text: str) -> str:
    """Mask the data of every Secret-looking chunk of ``text``, without parsing it.

    A chunk without a ``kind`` of its own belongs to the object before it: JSON written
    with ``kind`` ahead of ``apiVersion`` splits one object over two chunks.
    """
    bounds = [0, *(m.start() for m in _CHUNK_START_RE.finditer(text)), len(text)]
    parts = []
    secret = False
    for start, end in itertools.pairwise(bounds):
        chunk = text[start:end]
        if kinds := _ANY_KIND_RE.findall(chunk):
            secret = any(kind in ("Secret", "SecretList") for kind in kinds)
        if secret:
            chunk = _mask_yaml_data_blocks(_FLOW_DATA_RE.sub(_mask_flow_data, chunk))
            secret = not kinds or kinds[-1] in ("Secret", "SecretList")
        parts.append(chunk)
    return "".join(parts)


def _mask_flow_data(match: re.Match[str]) -> str:
    def item(m: re.Match[str]) -> str:
        value = m.group(3)
        quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), '"')
        return f"{m.group(1)}{quote}{SECRET_VALUE_MARKER}{quote}"

    return match.group(1) + _FLOW_ITEM_RE.sub(item, match.group(2))


def _mask_yaml_data_blocks(chunk: str) -> str:
    out: list[str] = []
    block_indent: int | None = None  # indent of the current data:/stringData: key
    child_indent: int | None = None
    for line in chunk.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if block_indent is not None and body.strip():
            indent = len(body) - len(body.lstrip(" \t"))
            if indent > block_indent:
                child_indent = indent if child_indent is None else child_indent
                if indent > child_indent:
                    continue  # a line of a multi-line value: dropped with the value
                key = body.strip().partition(":")[0]
                out.append(f"{body[:indent]}{key}: '{SECRET_VALUE_MARKER}'{line[len(body) :]}")
                continue
            block_indent = None
        if block_indent is None and (m := _BLOCK_DATA_RE.match(body)):
            block_indent, child_indent = len(m.group(1)), None
        out.append(line)
    return "".join(out)
