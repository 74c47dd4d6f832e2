"""LLM Markdown as one line of plain text: the session list's summaries.

The same parser as the pages' Markdown (``web.markdown``: CommonMark, raw HTML off), but
its tokens are read for their text instead of rendered: no backticks, asterisks, ``#``
or link syntax survive, a link becomes its words, code its code. HTML written in the
Markdown is text like any other (the parser never makes it a tag), and what this returns
is a plain ``str``, escaped by the template that shows it: nothing here is ever markup.

Only the head of a text is parsed (``SOURCE_CHARS``): a row shows a couple of lines, and
markdown-it-py's worst case is tens of microseconds a character. An emphasis or code
span the cut leaves open would show its markers: those at a word's edge are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from markdown_it.token import Token

from masking.bounded import storable
from web.markdown import _parser

SOURCE_CHARS = 2000
_SPACE = re.compile(r"\s+")
# Tokens whose content is text to keep; the others are structure (or, for html_* with raw
# HTML off, never produced).
_TEXT_TOKENS = {"text", "code_inline", "html_inline", "html_block", "fence", "code_block"}
_BREAKS = {"softbreak", "hardbreak"}
# Emphasis and code markers left at a word's edge where the head was cut before they close.
_DANGLING = re.compile(r"(?<!\S)[*_~`]+(?=\S)|(?<=\S)[*_~`]+(?!\S)")


def markdown_text(text: str | None, limit: int = 300) -> str:
    """``text`` without its Markdown, on one line, cut at a word to at most ``limit``
    characters (with an ellipsis when cut)."""
    source = storable(text or "")
    if not source.strip():
        return ""
    head = source[:SOURCE_CHARS]
    words = _SPACE.sub(" ", "".join(_texts(_parser().parse(head)))).strip()
    cut = len(source) > SOURCE_CHARS
    if cut:
        words = _DANGLING.sub("", words)
    if len(words) > limit:
        words, cut = words[: limit + 1], True
    if not cut or not words:
        return words
    shorter = words[:limit].rsplit(" ", 1)[0] if " " in words[:limit] else words[:limit]
    return shorter.rstrip(" ,.;:") + "…"


def _texts(tokens: Iterable[Token]) -> Iterable[str]:
    for token in tokens:
        if token.type in _TEXT_TOKENS:
            yield token.content
        elif token.type in _BREAKS:
            yield " "
        if token.children:
            yield from _texts(token.children)
        if token.block and token.nesting <= 0:
            yield " "  # a paragraph, heading or list item ends: words do not run together
