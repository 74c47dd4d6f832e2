"""Hostile inputs: text built to crash, hang or blow up the parsers that see outside text
(PyYAML's C loader, json, markdown-it-py and nh3, the masking passes), each as it would
arrive in an alert, a chat question or a tool result.

Nesting in every syntax (YAML flow, one-line block sequences, complex keys,
indentation; JSON; Markdown block quotes, lists, emphasis, brackets; HTML), alias bombs,
huge scalars, a mebibyte without a newline, NUL and lone surrogates. Where structure
matters the text says ``kind: Secret`` (what makes the masker parse it), and most carry
a planted Secret value (``PLANTED``) that must never come out unmasked.

Used by ``tests/test_hostile_corpus.py`` (every entry point, in a child process) and
``tests/e2e/test_hostile_inputs.py`` (the real endpoints and worker).
"""

from __future__ import annotations

import base64
import json

CANARY = "Zq7xHostile"
PLANTED_VALUE = CANARY + "Planted01"
PLANTED = base64.b64encode(PLANTED_VALUE.encode()).decode()
# Every form of the planted value that must not come out.
FORBIDDEN = (PLANTED, PLANTED_VALUE, CANARY)

DEPTH = 30_000  # the finding: a 60 KB alert nested 30,000 deep killed daphne
MIB = 1024 * 1024


def secret(**fields: str) -> str:
    """A Secret as kubectl prints it, ``fields`` (name: YAML text) between its metadata
    and its data, which holds ``PLANTED``."""
    extra = "".join(f"{name}: {value}\n" for name, value in fields.items())
    return (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: hostile\n  namespace: payments\n"
        f"type: Opaque\n{extra}data:\n  config: {PLANTED}\n"
    )


def _indented(depth: int) -> str:
    return "".join(" " * level + "a:\n" for level in range(depth)) + " " * depth + "x\n"


def _billion_laughs() -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * 9) + "]")
    return secret() + "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    lines = ["m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}"]
    for level in range(1, 16):
        lines.append(f"m{level}: &m{level} {{<<: [" + ", ".join([f"*m{level - 1}"] * 4) + "]}")
    return secret() + "\n".join(lines) + "\n"


def _alias_depth() -> str:
    """60 deep as text, 2,400 deep once aliases are expanded, as a writer would see it.
    Anchors are defined before use, so the deepest one comes last; a duplicate key moves
    it first; the reversed references make a walk that skips what it has seen measure
    each anchor at 60 levels only."""
    chain = 40
    lines = ["first: null"]
    for level in range(chain):
        inner = f"*x{level - 1}" if level else "leaf"
        lines.append(f"k{level}: &x{level} " + "[" * 60 + inner + "]" * 60)
    lines.append(f"first: *x{chain - 1}")
    lines.append("refs: [" + ", ".join(f"*x{level}" for level in reversed(range(chain))) + "]")
    return secret() + "\n".join(lines) + "\n"


def _aliased_secret_string() -> str:
    """One 6 KB string holding a Secret, aliased 20,000 times: parsed and masked once,
    and written back as aliases, not 120 MB of copies."""
    inner = json.dumps(secret(notes="x" * 6000))
    return "kind: Secret\nholder: &s " + inner + "\nrefs: [" + ",".join(["*s"] * 20_000) + "]\n"


def _markdown_emphasis(size: int) -> str:
    return ("*a **b ***c _d __e ___f " * (size // 24))[:size]


CORPUS: dict[str, str] = {
    # --- YAML, with kind: Secret ----------------------------------------------------------
    "yaml flow sequence (the finding)": "kind: Secret\ndata: " + "[" * DEPTH + "]" * DEPTH,
    "yaml flow sequence in a secret": secret(notes="[" * DEPTH + "]" * DEPTH),
    "yaml flow mapping": secret(notes="{a: " * (DEPTH // 2) + "}" * (DEPTH // 2)),
    "yaml flow sequence over lines": secret(notes="[\n" * DEPTH + "]\n" * DEPTH),
    "yaml flow unclosed": secret(notes="[" * (2 * DEPTH)),
    "yaml block sequence on one line": secret(notes="\n" + "- " * DEPTH + "x"),
    "yaml complex keys": secret(notes="\n" + "? " * DEPTH + "x"),
    "yaml mixed indicators": secret(notes="\n" + "- ? " * (DEPTH // 2) + "x"),
    "yaml indentation": "kind: Secret\n" + _indented(340) + secret(),
    "yaml small and deep (pure-Python path)": secret(notes="[" * 2000 + "]" * 2000),
    "yaml billion laughs": _billion_laughs(),
    "yaml merge-key bomb": _merge_bomb(),
    "yaml aliases deeper than the text": _alias_depth(),
    "yaml recursive alias": secret(loop="&loop [*loop]"),
    "yaml aliased secret string": _aliased_secret_string(),
    "yaml huge scalar": secret(notes="x" * MIB),
    "yaml sexagesimal scalar": secret(notes="1" + ":1" * 30_000),
    "yaml quoted brackets": secret(
        **{f"note{i}": "'" + "[" * 200 + "{" * 200 + "'" for i in range(60)}
    ),
    "yaml tags and anchors": secret(notes="!t" + "]" * 500 + " &a" + "[" * DEPTH),
    # --- long lines and sizes ---------------------------------------------------------------
    "a mebibyte without a newline": "kind: Secret data: " + "x" * MIB,
    "a mebibyte of brackets on one line": "kind: Secret\n" + "[" * MIB,
    # --- JSON, with kind: Secret ------------------------------------------------------------
    "json deep array": (
        '{"apiVersion": "v1", "kind": "Secret", "data": {"config": "' + PLANTED + '"}, '
        '"notes": ' + "[" * 100_000 + "]" * 100_000 + "}"
    ),
    "json deep object": (
        '{"kind": "Secret", "data": {"config": "'
        + PLANTED
        + '"}, "notes": '
        + '{"a": ' * DEPTH
        + "1"
        + "}" * DEPTH
        + "}"
    ),
    "json unterminated string of escapes": '{"kind": "Secret", "x": "' + '\\"' * 200_000,
    "json lone surrogate escape": (
        '{"kind": "Secret", "data": {"config": "' + PLANTED + '"}, "note": "\\ud800 \\udfff"}'
    ),
    "json nul escape": (
        '{"kind": "Secret", "data": {"config": "' + PLANTED + '"}, "note": "a\\u0000b"}'
    ),
    "json huge number": '{"kind": "Secret", "n": ' + "1" * 100_000 + "}",
    "json secret embedded in a string": json.dumps(
        {"kind": "List", "applied": secret(notes="[" * DEPTH + "]" * DEPTH)}
    ),
    # --- Markdown and HTML (what a model may repeat) ---------------------------------------
    "markdown block quotes": ">" * 100_000 + " x",
    "markdown block quote lines": "".join(">" * n + " x\n" for n in range(1, 400)),
    "markdown lists": "* " * 100_000 + "x",
    "markdown indented lists": "".join("  " * n + "- x\n" for n in range(600)),
    "markdown emphasis (32 KiB)": _markdown_emphasis(32 * 1024),
    "markdown emphasis (1 MiB)": _markdown_emphasis(MIB),
    "markdown brackets": "[" * 100_000 + "x" + "]" * 100_000,
    "markdown image brackets (32 KiB)": "![" * (16 * 1024),
    "markdown links": "[a" * 10_000 + "](b)" * 10_000,
    "markdown table": "|" + "a|" * 2000 + "\n|" + "-|" * 2000 + "\n" + "|b" * 2000 + "\n",
    "html nested": "<blockquote><div><ul><li>" * 20_000 + "x",
    "html entities": "&#" * 100_000,
    # --- characters no database or UTF-8 takes ------------------------------------------
    "nul characters": secret(notes='"a\x00b"') + "\x00" * 1000,
    "lone surrogates": secret(notes='"a\ud800b"') + "\udfff" * 100,
}


def invalid_utf8_body() -> bytes:
    """An alert body that is not UTF-8 (nor UTF-16/32): what a broken client sends."""
    return b'{"data": "kind: Secret\\ndata:\\n  config: ' + PLANTED.encode() + b'\xff\xfe\x80"}'
