from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml
from django import template
from django.core.cache import caches
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()
fragments = caches["fragments"]


@register.filter
def pretty_json(value: Any) -> str:
    """Tool-call arguments as a model sent them: the providers bound their depth, but an
    old row or a new backend may not have, and a page must render anyway."""
    from masking.bounded import MAX_DEPTH, deeper_than, json_text

    if deeper_than(value, MAX_DEPTH):
        return f"(nested more than {MAX_DEPTH} levels deep: not shown)"
    return json_text(value, indent=2, sort_keys=True, default=str)


@register.filter
def status_class(status: str) -> str:
    return {
        "pending": "queued",
        "in_progress": "running",
        "cancelling": "running",
        "completed": "ok",
        "failed": "bad",
        "timed_out": "bad",
        "cancelled": "muted",
    }.get(status, "muted")


@register.filter
def cancellable(execution) -> bool:
    from web.fragments import cancellable as offers_cancel

    return offers_cancel(execution)


@register.simple_tag
def sort_link(state, column: str) -> str:
    return state.sort_link(column)


@register.simple_tag
def sort_state(state, column: str) -> str:
    return state.sort_state(column)


@register.simple_tag
def page_link(state, page: int) -> str:
    return state.params(page=page)


@register.filter
def get_item(mapping: dict, key: Any) -> Any:
    return mapping.get(key) if mapping else None


@register.filter
def duration(seconds: float | None) -> str:
    """``42.1 s``, ``3 min 05 s``, ``2 h 04 min``."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@register.simple_tag
def elapsed(since) -> str:
    """Time since ``since`` as rendered on the server; the page's script keeps it ticking."""
    if since is None:
        return ""
    return duration((timezone.now() - since).total_seconds())


@register.filter
def highlight(snippet: str) -> str:
    """A search snippet with its matches in ``<mark>``; everything else escaped."""
    from sessions.search import MARK_END, MARK_START

    text = escape(snippet)
    return mark_safe(text.replace(MARK_START, "<mark>").replace(MARK_END, "</mark>"))


@register.filter
def markdown(text: str) -> str:
    from web.markdown import render

    return render(text)


# Larger alert data is shown as sent: building YAML objects is slow even with libyaml.
YAML_PARSE_LIMIT = 64 * 1024
# Deeper alert data is shown as sent: indenting it would only push it off the page.
FORMAT_MAX_DEPTH = 100


@register.filter
def alert_format(data: str) -> dict[str, str]:
    """Alert data for display: ``{"format": "json"|"yaml"|"text", "text": …}``; JSON is
    re-indented, YAML and text are shown as sent. Whatever cannot be parsed within the
    limits is shown as text."""
    from masking.bounded import json_text, load_json, load_yaml

    stripped = (data or "").strip()
    if stripped[:1] in ("{", "["):
        try:
            parsed = load_json(stripped, max_depth=FORMAT_MAX_DEPTH)
            return {"format": "json", "text": json_text(parsed, indent=2)}
        except ValueError:  # not JSON, or too deep (bounded.UnsafeInput)
            pass
    try:
        parsed = load_yaml(stripped, max_chars=YAML_PARSE_LIMIT, max_depth=FORMAT_MAX_DEPTH)
    except (ValueError, yaml.YAMLError):
        parsed = None
    if isinstance(parsed, dict | list):
        return {"format": "yaml", "text": data}
    return {"format": "text", "text": data}


@register.simple_tag
def stage_progress(session) -> str:
    from sessions.selectors import stage_progress as progress

    return progress(session)


@register.simple_tag
def timeline_item(item) -> str:
    """An item as the session page shows it. A finished item never changes, so its HTML
    is kept (per process) and the next render of a long session reuses it."""
    from web.fragments import render_item

    if item.is_streaming:
        return render_item(item)
    # Everything the partial reads, hashed: a reused id or a changed row is a new key.
    digest = hashlib.blake2b(digest_size=16)
    for part in (item.event_type, item.status, item.content, str(item.content_length)):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(json.dumps(item.metadata, sort_keys=True, default=str).encode())
    key = f"item:{item.id}:{digest.hexdigest()}"
    html = fragments.get(key)
    if html is None:
        html = render_item(item)
        fragments.set(key, html)
    return mark_safe(html)


@register.simple_tag
def trace_entry(entry) -> str:
    """One LLM or MCP interaction's line on the trace page. An interaction is written
    once and never changes, so its HTML is kept like a finished timeline item's."""
    from django.template.loader import render_to_string

    interaction = entry.interaction
    key = f"trace:{entry.kind}:{interaction.id}:{interaction.created_at.isoformat()}"
    html = fragments.get(key)
    if html is None:
        template = "_trace_llm.html" if entry.kind == "llm" else "_trace_mcp.html"
        html = render_to_string(f"sessions/partials/{template}", {"interaction": interaction})
        fragments.set(key, html)
    return mark_safe(html)


@register.simple_tag
def configured_providers() -> list:
    """llm-providers.yaml's providers (and the built-in ones tarsy.yaml names), for the
    admin's provider list: shown there, edited in the file."""
    from config.loader import get_config
    from sessions.selectors.system import listed_providers

    return [row for row in listed_providers(get_config()) if row.source != "admin"]


@register.filter
def safe_url(url: str) -> str:
    """A URL as TARSy's config viewer shows it: no user, password, query or fragment."""
    from masking.shown import safe_url as strip

    return strip(url or "")


@register.inclusion_tag("sessions/partials/_budget.html")
def budget_meters(session, live: bool = False) -> dict[str, Any]:
    """The session's budget as meters, and which limit stopped it (sessions/budget.py);
    nothing for a session without a budget."""
    from sessions.budget import meters

    return {"meters": meters(session), "stop": session.budget_stop or "", "live": live}
