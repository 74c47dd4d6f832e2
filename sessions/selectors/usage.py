"""LLM usage over a time window: tokens and estimated cost by day, provider, model or
alert type (the usage page), and the bar chart that shows them.

Everything is added up by the database in one grouped query; Python only fills in the
days without calls and the totals row, whose size is the number of groups, not calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from sessions.models import LLMInteraction

# The longest window a page may add up: a year, leap day included.
MAX_WINDOW_DAYS = 366

# "24h" is the last 24 hours; the others are whole days in the server's time zone,
# today included, so a "7 d" chart shows seven bars rather than eight partial ones.
PRESET_DAYS = {"7d": 7, "30d": 30, "90d": 90}
PRESETS = {
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "90d": "Last 90 days",
}
DEFAULT_PRESET = "7d"

GROUPINGS = {
    "day": "Day",
    "provider": "Provider",
    "model": "Model",
    "alert_type": "Alert type",
}
DEFAULT_GROUPING = "day"
_GROUP_EXPRESSIONS = {
    "provider": F("provider"),
    "model": F("model_name"),
    "alert_type": F("session__alert_type"),
}
# What a group with an empty name (a call recorded without a model name) is called.
UNNAMED_GROUP = "(none)"


class WindowError(ValueError):
    """A window the page cannot add up; the message says why and what to do."""


@dataclass(frozen=True)
class UsageWindow:
    start: datetime  # inclusive
    end: datetime  # exclusive

    def days(self) -> list[date]:
        """Every day the window touches, in the server's time zone."""
        local = timezone.get_default_timezone()
        first = timezone.localtime(self.start, local).date()
        last = timezone.localtime(self.end - timedelta(microseconds=1), local).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def preset_window(preset: str, *, now: datetime) -> UsageWindow:
    if preset == "24h":
        return UsageWindow(now - timedelta(hours=24), now)
    today = timezone.localtime(now, timezone.get_default_timezone()).date()
    first = today - timedelta(days=PRESET_DAYS[preset] - 1)
    return UsageWindow(_midnight(first), now)


def dates_window(first: date, last: date) -> UsageWindow:
    """Whole days from ``first`` to ``last`` inclusive, in the server's time zone."""
    if last < first:
        raise WindowError(
            f"'to' ({last.isoformat()}) is before 'from' ({first.isoformat()}): swap the dates."
        )
    days = (last - first).days + 1
    if days > MAX_WINDOW_DAYS:
        raise WindowError(
            f"The window is {days} days long; the limit is {MAX_WINDOW_DAYS}. "
            "Choose a shorter range."
        )
    try:
        return UsageWindow(_midnight(first), _midnight(last + timedelta(days=1)))
    except OverflowError:
        raise WindowError(
            f"{last.isoformat()} is too far in the future; choose an earlier date."
        ) from None


def _midnight(day: date) -> datetime:
    zone: tzinfo = timezone.get_default_timezone()
    return timezone.make_aware(datetime.combine(day, time.min), zone)


@dataclass(frozen=True)
class UsageRow:
    label: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    total_tokens: int = 0
    # The sum over the calls that had a configured rate; None when none of them had one.
    estimated_cost_usd: Decimal | None = None
    calls_without_rate: int = 0


@dataclass(frozen=True)
class UsageReport:
    rows: list[UsageRow]
    total: UsageRow

    @property
    def is_empty(self) -> bool:
        return self.total.calls == 0


def usage_report(*, window: UsageWindow, grouping: str) -> UsageReport:
    """One row per group (per day of the window for ``day``, days without calls
    included), biggest first for the other groupings, and their total."""
    calls = LLMInteraction.objects.filter(created_at__gte=window.start, created_at__lt=window.end)
    if grouping == "day":
        group: TruncDate | F = TruncDate("created_at", tzinfo=timezone.get_default_timezone())
    else:
        group = _GROUP_EXPRESSIONS[grouping]
    # Annotations may not reuse the model's field names, hence the sum_ prefixes.
    grouped = (
        calls.values(group=group)
        .annotate(
            calls=Count("id"),
            sum_input=Sum("input_tokens"),
            sum_output=Sum("output_tokens"),
            sum_thinking=Sum("thinking_tokens"),
            sum_total=Sum("total_tokens"),
            sum_cost=Sum("estimated_cost_usd"),
            # COUNT(column) skips NULLs: the calls that had a rate.
            calls_with_rate=Count("estimated_cost_usd"),
        )
        .order_by("-sum_total", "group")
    )
    found = {
        entry["group"]: UsageRow(
            label=str(entry["group"] or UNNAMED_GROUP),
            calls=entry["calls"],
            input_tokens=entry["sum_input"],
            output_tokens=entry["sum_output"],
            thinking_tokens=entry["sum_thinking"],
            total_tokens=entry["sum_total"],
            estimated_cost_usd=entry["sum_cost"],
            calls_without_rate=entry["calls"] - entry["calls_with_rate"],
        )
        for entry in grouped
    }
    if grouping == "day":
        rows = [found.get(day) or UsageRow(label=day.isoformat()) for day in window.days()]
    else:
        rows = list(found.values())
    return UsageReport(rows=rows, total=_total(rows))


def _total(rows: Sequence[UsageRow]) -> UsageRow:
    costs = [row.estimated_cost_usd for row in rows if row.estimated_cost_usd is not None]
    return UsageRow(
        label="Total",
        calls=sum(row.calls for row in rows),
        input_tokens=sum(row.input_tokens for row in rows),
        output_tokens=sum(row.output_tokens for row in rows),
        thinking_tokens=sum(row.thinking_tokens for row in rows),
        total_tokens=sum(row.total_tokens for row in rows),
        estimated_cost_usd=sum(costs, Decimal(0)) if costs else None,
        calls_without_rate=sum(row.calls_without_rate for row in rows),
    )


# The chart's coordinate system; the SVG scales to its container's width.
CHART_WIDTH = 900
CHART_PLOT_TOP = 24
CHART_PLOT_HEIGHT = 200
# Room on the left for the first bar's label, which is rotated back under the axis.
CHART_LEFT = 60
CHART_RIGHT = 8
MAX_BAR_WIDTH = 80
CHART_LABEL_SPACE = 90
# Beyond these, labels would overlap: every n-th bar is labelled, values only in titles.
MAX_AXIS_LABELS = 16
MAX_VALUE_LABELS = 16
MAX_LABEL_CHARS = 16


def bar_chart_svg(rows: Sequence[UsageRow], *, title: str) -> SafeString:
    """Total tokens per row as an inline SVG bar chart, the tallest bar at full height.

    Colours come from CSS classes (``currentColor``), so the chart follows the theme;
    every name is escaped, and each bar carries its exact figures in a ``<title>``.
    """
    peak = max((row.total_tokens for row in rows), default=0)
    slot = (CHART_WIDTH - CHART_LEFT - CHART_RIGHT) / max(len(rows), 1)
    bar_width = min(max(slot * 0.7, 1), MAX_BAR_WIDTH)
    baseline = CHART_PLOT_TOP + CHART_PLOT_HEIGHT
    label_step = math.ceil(len(rows) / MAX_AXIS_LABELS) or 1
    bars = []
    for index, row in enumerate(rows):
        height = CHART_PLOT_HEIGHT * row.total_tokens / peak if peak else 0
        x = CHART_LEFT + index * slot + (slot - bar_width) / 2
        center = x + bar_width / 2
        parts = [
            format_html(
                '<rect class="bar" x="{}" y="{}" width="{}" height="{}"></rect>',
                _number(x),
                _number(baseline - height),
                _number(bar_width),
                _number(height),
            )
        ]
        if len(rows) <= MAX_VALUE_LABELS and row.total_tokens:
            parts.append(
                format_html(
                    '<text class="value" x="{}" y="{}" text-anchor="middle">{}</text>',
                    _number(center),
                    _number(baseline - height - 4),
                    compact_number(row.total_tokens),
                )
            )
        if index % label_step == 0:
            parts.append(
                format_html(
                    '<text class="label" x="{}" y="{}" text-anchor="end" '
                    'transform="rotate(-40 {} {})">{}</text>',
                    _number(center),
                    baseline + 14,
                    _number(center),
                    baseline + 14,
                    _truncated(row.label),
                )
            )
        bars.append(
            format_html(
                '<g class="bar-group"><title>{}: {} tokens in {} call{}</title>{}</g>',
                row.label,
                row.total_tokens,
                row.calls,
                "" if row.calls == 1 else "s",
                _joined(parts),
            )
        )
    return format_html(
        '<svg class="usage-chart" viewBox="0 0 {} {}" role="img" aria-label="{}" '
        'preserveAspectRatio="xMidYMid meet"><title>{}</title>'
        '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"></line>'
        '<text class="peak" x="{}" y="{}">{}</text>{}</svg>',
        CHART_WIDTH,
        baseline + CHART_LABEL_SPACE,
        title,
        title,
        CHART_LEFT,
        baseline,
        CHART_WIDTH - CHART_RIGHT,
        baseline,
        CHART_LEFT,
        CHART_PLOT_TOP - 10,
        f"max {compact_number(peak)} tokens",
        _joined(bars),
    )


def _joined(fragments: Sequence[SafeString]) -> SafeString:
    return format_html_join("", "{}", ((fragment,) for fragment in fragments))


def compact_number(value: int) -> str:
    """1234 → "1.2k", 5_600_000 → "5.6M": short enough to sit above a bar."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.1f}".removesuffix(".0") + suffix
    return str(value)


def _number(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _truncated(label: str) -> str:
    if len(label) <= MAX_LABEL_CHARS:
        return label
    return label[: MAX_LABEL_CHARS - 1] + "…"


# --- TARSy's /usage/summary ----------------------------------------------------------

TOP_SESSIONS = 20


def usage_summary(
    *,
    window: UsageWindow,
    alert_type: str | None = None,
    chain_id: str | None = None,
    rank_by: str = "tokens",
) -> dict[str, Any]:
    """The window's calls added up by model, alert type and chain, the number of sessions,
    and the ``TOP_SESSIONS`` sessions that used the most (``rank_by`` cost or tokens),
    ranked and cut in SQL (TARSY-API §1.13): one query each."""
    calls = LLMInteraction.objects.filter(created_at__gte=window.start, created_at__lt=window.end)
    if alert_type:
        calls = calls.filter(session__alert_type=alert_type)
    if chain_id:
        calls = calls.filter(session__chain_id=chain_id)

    def grouped(**group: F) -> QuerySet:
        return (
            calls.values(**group)
            .annotate(
                calls=Count("id"),
                session_count=Count("session", distinct=True),
                input_tokens_sum=Sum("input_tokens"),
                output_tokens_sum=Sum("output_tokens"),
                total_tokens_sum=Sum("total_tokens"),
                cost=Sum("estimated_cost_usd"),
                priced=Count("estimated_cost_usd"),
            )
            .order_by("-total_tokens_sum")
        )

    # Sessions without a priced call have no cost (NULL): last, on either database.
    first = F("cost").desc(nulls_last=True) if rank_by == "cost" else F("total_tokens_sum").desc()
    top = grouped(session_ref=F("session_id"), alert_type_name=F("session__alert_type"))
    return {
        "by_model": list(grouped(model=F("model_name"), provider_name=F("provider"))),
        "by_alert_type": list(grouped(alert_type_name=F("session__alert_type"))),
        "by_chain": list(grouped(chain=F("session__chain_id"))),
        "session_count": calls.values("session_id").distinct().count(),
        "top_sessions": list(
            top.order_by(first, F("total_tokens_sum").desc(), "session_id")[:TOP_SESSIONS]
        ),
    }
