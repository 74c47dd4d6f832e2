"""Markdown rendering's bounds (web/markdown.py): the same HTML as markdown-it-py's
own, in linear time; nesting capped before nh3 sees it; long text shown as sent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from web import markdown


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([*"*_~`[]()!<>#-|\\ \n.:&", "**", "__", "~~", "a", "1. "])))
def test_the_linear_text_join_renders_what_the_library_renders(pieces):
    text = "".join(pieces)
    library = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )
    assert markdown._parser().render(text) == library.render(text)


def test_deep_block_nesting_is_capped_before_the_sanitiser_sees_it():
    for text in (">" * 100_000 + " x", "* " * 100_000 + "x", "1. " * 100_000 + "x"):
        html = markdown._parser().render(text)
        assert html.count("<blockquote>") + html.count("<li>") <= 20
        assert markdown.render(text)


def test_text_over_the_limit_is_shown_as_sent():
    text = "<b>" + "*a **b ***c " * (markdown.MAX_CHARS // 12 + 1)
    html = markdown.render(text)
    assert html.startswith("<p><em>Over 32 KiB of text: shown as sent")
    assert "<pre>&lt;b&gt;*a **b ***c " in html
    assert "<strong>" not in html


def test_characters_no_page_can_carry_become_replacement_characters():
    assert markdown.render("a\x00b \ud800c") == "<p>a\ufffdb \ufffdc</p>\n"
