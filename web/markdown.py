"""LLM text as sanitised HTML.

markdown-it-py renders CommonMark (plus tables and strikethrough) with raw HTML off, so
``<script>`` in a model's answer is text; nh3 (the Rust ``ammonia`` sanitiser) then keeps
only the tags and attributes below and links to http, https and mailto, so a
``javascript:`` link or an ``onerror`` attribute cannot survive either layer.

Bounded, because a model can repeat whatever a tool returned: the preset's
``maxNesting`` (20) caps block quotes, lists and nested links, so nh3 never sees the
deep block nesting its HTML parser is quadratic in; a text over ``MAX_CHARS`` is shown
as plain text (markdown-it-py spends up to ~40 µs a character on brackets and
delimiters); and its emphasis pass joins text in linear time (see ``_fragments_join``).
"""

from __future__ import annotations

from functools import lru_cache

import nh3
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from masking.bounded import storable

TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}


# Longer LLM text is shown as sent, in a <pre>: a final analysis is a few KiB, and 32 KiB
# of the costliest Markdown (``![`` repeated) renders in about a second.
MAX_CHARS = 32 * 1024


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )
    parser.inline.ruler2.at("fragments_join", _fragments_join)
    return parser


def _fragments_join(state: StateInline) -> None:
    """markdown-it-py's ``fragments_join`` (levels re-counted, adjacent text tokens merged)
    with the merge done once per run of text: the library concatenates pairwise, which
    is quadratic in a paragraph of unmatched ``*``/``_`` (120 KiB took 27 s)."""
    level = 0
    tokens: list[Token] = []
    run: list[str] = []  # the contents of the text tokens merged into tokens[-1]
    for token in state.tokens:
        if token.nesting < 0:
            level -= 1
        token.level = level
        if token.nesting > 0:
            level += 1
        if token.type == "text" and tokens and tokens[-1].type == "text":
            run.append(token.content)
            continue
        if len(run) > 1:
            tokens[-1].content = "".join(run)
        run = [token.content] if token.type == "text" else []
        tokens.append(token)
    if len(run) > 1:
        tokens[-1].content = "".join(run)
    state.tokens[:] = tokens


def render(text: str) -> SafeString:
    text = storable(text or "")  # nh3 takes UTF-8: a lone surrogate would raise
    if len(text) > MAX_CHARS:
        note = f"Over {MAX_CHARS // 1024} KiB of text: shown as sent, without formatting."
        return format_html("<p><em>{}</em></p><pre>{}</pre>", note, text)
    html = _parser().render(text)
    clean = nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # sanitised by nh3 just above
