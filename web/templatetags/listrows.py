"""The session list's rows: summaries as plain text (web/markdown_text.py)."""

from __future__ import annotations

from django import template

from web.markdown_text import markdown_text as _markdown_text

register = template.Library()

# A row shows two lines of its summary; the whole text is on the session's page.
SUMMARY_CHARS = 240


@register.filter
def markdown_text(value: str | None, limit: int = SUMMARY_CHARS) -> str:
    """Markdown as plain text, one line, cut at ``limit``; escaped by the template (never
    marked safe)."""
    return _markdown_text(value, int(limit))
