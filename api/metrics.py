"""Prometheus metrics (served at /metrics).

Two kinds: what a web process itself observes (relay lag, open WebSockets) lives in this
process's registry (``live/metrics.py``, beside what observes it); what workers do
(sessions, queue, LLM and MCP calls) is computed from
the database at scrape time, so worker processes on any host are counted without a
multiprocess directory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import DatabaseError
from django.db.models import Count, F, FloatField, Func, Q, QuerySet, Sum
from prometheus_client import REGISTRY
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# Imported so this process's own metrics are registered wherever /metrics is served.
from live.metrics import RELAY_LAG, WEBSOCKET_CONNECTIONS  # noqa: F401
from sessions import selectors
from sessions.models import (
    TERMINAL_SESSION_STATUSES,
    AlertSession,
    LLMInteraction,
    MCPInteraction,
    SessionStatus,
)

logger = logging.getLogger(__name__)

# Bucket bounds, in seconds, of the histograms computed from the database.
LLM_CALL_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
MCP_CALL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
QUEUE_WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
SESSION_DURATION_BUCKETS = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
TOKEN_KINDS = ("input", "output", "thinking")

# Several Prometheus servers (an HA pair) or a fast scrape interval would each pay for
# the database queries; within this many seconds a process answers from its last result.
DATABASE_CACHE_SECONDS = 5.0


class DatabaseCollector:
    """The workers' side, read from the database at scrape time: identical in every web
    process (see docs/operations.md for how to scrape it once)."""

    def __init__(self, cache_seconds: float = DATABASE_CACHE_SECONDS) -> None:
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: list[Metric] = []
        self._expires = 0.0

    def clear(self) -> None:
        with self._lock:
            self._expires = 0.0

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if now >= self._expires:
                self._cached = self._read()
                self._expires = now + self.cache_seconds
            return iter(self._cached)

    def _read(self) -> list[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily(
            "tarsy_database_up",
            "1 when the database answered this scrape's queries; 0 when the metrics read "
            "from it are missing.",
        )
        try:
            metrics = [
                *session_metrics(),
                *worker_metrics(),
                *llm_metrics(),
                *mcp_metrics(),
            ]
        except DatabaseError as exc:
            logger.warning("/metrics: the database did not answer: %s: %s", type(exc).__name__, exc)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        took = GaugeMetricFamily(
            "tarsy_metrics_database_read_seconds",
            "How long the database queries behind the last uncached scrape took.",
            value=time.perf_counter() - started,
        )
        return [*metrics, up, took]


class _Scopes:
    """``collect()`` over several collectors: what ``generate_latest`` needs."""

    def __init__(self, *collectors: Any) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


DATABASE = DatabaseCollector()
# What /metrics?scope=… serves: this process's own metrics (the default registry, with
# prometheus_client's process_* and python_* metrics), the database's, or both.
SCOPES: dict[str, Collector] = {
    "all": _Scopes(REGISTRY, DATABASE),
    "process": REGISTRY,
    "database": DATABASE,
}


def session_metrics() -> list[Metric]:
    by_status = dict(
        AlertSession.objects.order_by()
        .values("status")
        .annotate(count=Count("id"))
        .values_list("status", "count")
    )
    sessions = GaugeMetricFamily(
        "tarsy_sessions", "Sessions in the database, by status.", labels=["status"]
    )
    for status in SessionStatus.values:
        sessions.add_metric([status], by_status.get(status, 0))

    state = selectors.queue_state()
    pending = GaugeMetricFamily(
        "tarsy_queue_pending_sessions",
        "Sessions waiting for a worker (status pending).",
        value=by_status.get(SessionStatus.PENDING, 0),
    )
    oldest = GaugeMetricFamily(
        "tarsy_queue_oldest_pending_age_seconds",
        "How long the oldest pending session has waited; 0 when none waits.",
        value=state.oldest_pending_seconds or 0,
    )
    wait, _ = _histogram(
        AlertSession.objects.filter(started_at__isnull=False),
        SecondsBetween("created_at", "started_at"),
        bounds=QUEUE_WAIT_BUCKETS,
        name="tarsy_session_queue_wait_seconds",
        documentation="Time from a session's creation to a worker claiming it.",
    )
    duration, _ = _histogram(
        AlertSession.objects.filter(
            status__in=TERMINAL_SESSION_STATUSES,
            started_at__isnull=False,
            completed_at__isnull=False,
        ),
        SecondsBetween("started_at", "completed_at"),
        labels={"status": "status"},
        bounds=SESSION_DURATION_BUCKETS,
        name="tarsy_session_duration_seconds",
        documentation="Time from a worker claiming a session to its end, by final status.",
    )
    return [sessions, pending, oldest, wait, duration]


def worker_metrics() -> list[Metric]:
    # Imported here: the relay imports this module, and supervision imports the services.
    from sessions.selectors import cluster_silence_limit

    clusters = selectors.live_worker_clusters(within_seconds=cluster_silence_limit())
    return [
        GaugeMetricFamily(
            "tarsy_worker_clusters",
            "Worker clusters (manage.py qcluster) that have reported within three "
            "recovery intervals.",
            value=len(clusters),
        ),
        GaugeMetricFamily(
            "tarsy_workers",
            "Worker processes of the live worker clusters.",
            value=sum(cluster.workers for cluster in clusters),
        ),
    ]


def llm_metrics() -> list[Metric]:
    labels = {"provider": "provider", "model": "model_name"}
    calls, rows = _histogram(
        LLMInteraction.objects.all(),
        F("duration_ms"),
        per_second=1000,
        labels=labels,
        bounds=LLM_CALL_BUCKETS,
        extra={kind: Sum(f"{kind}_tokens") for kind in TOKEN_KINDS},
        name="tarsy_llm_call_duration_seconds",
        documentation="LLM calls by provider and model: how long each took, failed ones included.",
    )
    tokens = CounterMetricFamily(
        "tarsy_llm_tokens",
        "Tokens of LLM calls by provider, model and kind (input, output, thinking).",
        labels=[*labels, "kind"],
    )
    for row in rows:
        for kind in TOKEN_KINDS:
            tokens.add_metric([row["provider"], row["model_name"], kind], row[kind] or 0)

    errors = CounterMetricFamily(
        "tarsy_llm_errors",
        "LLM calls that ended in an error, by provider, model and error code.",
        labels=[*labels, "code"],
    )
    for provider, model, code, count in (
        LLMInteraction.objects.exclude(error_code="")
        .values_list("provider", "model_name", "error_code")
        .annotate(count=Count("id"))
        .order_by("provider", "model_name", "error_code")
    ):
        errors.add_metric([provider, model, code], count)
    return [calls, tokens, errors]


def mcp_metrics() -> list[Metric]:
    labels = {"server": "server_name", "tool": "tool_name"}
    calls, rows = _histogram(
        MCPInteraction.objects.filter(interaction_type="tool_call"),
        F("duration_ms"),
        per_second=1000,
        labels=labels,
        bounds=MCP_CALL_BUCKETS,
        extra={"errors": Count("id", filter=Q(is_error=True))},
        name="tarsy_mcp_call_duration_seconds",
        documentation="MCP tool calls by server and tool: how long each took, failed ones "
        "included.",
    )
    errors = CounterMetricFamily(
        "tarsy_mcp_errors",
        "MCP tool calls whose result was an error, by server and tool.",
        labels=list(labels),
    )
    for row in rows:
        errors.add_metric([row["server_name"], row["tool_name"]], row["errors"])
    return [calls, errors]


class SecondsBetween(Func):
    """``end - start`` in seconds, worked out by the database: Django's own datetime
    subtraction calls back into Python for every row on SQLite (ten times slower here)."""

    output_field = FloatField()

    def __init__(self, start: str, end: str) -> None:
        super().__init__(F(start), F(end))

    # Written out whole: none of Func's template arguments apply.
    def as_sql(self, compiler, connection, **extra_context):  # type: ignore[override]
        start, end, params = self._compiled(compiler)
        return f"EXTRACT(EPOCH FROM ({end} - {start}))::double precision", params

    def as_sqlite(self, compiler, connection, **extra_context):
        start, end, params = self._compiled(compiler)
        return f"((julianday({end}) - julianday({start})) * 86400.0)", params

    def _compiled(self, compiler) -> tuple[str, str, list[Any]]:
        start, start_params = compiler.compile(self.source_expressions[0])
        end, end_params = compiler.compile(self.source_expressions[1])
        return start, end, [*start_params, *end_params]


def _histogram(
    queryset: QuerySet,
    value: Any,
    *,
    bounds: Sequence[float],
    name: str,
    documentation: str,
    per_second: int = 1,
    labels: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[HistogramMetricFamily, list[dict[str, Any]]]:
    """A histogram of ``value`` (in units of 1/``per_second`` s) over ``queryset``, one
    series per combination of the ``labels`` (label name → field). One grouped query: a
    conditional count per bucket. Also returns the rows, with the ``extra`` aggregates."""
    labels = labels or {}
    aggregates = {
        "count": Count("id"),
        "value_total": Sum("value"),
        # Bounds in the column's own unit: PostgreSQL would otherwise turn every
        # millisecond into a numeric before comparing it.
        **{
            f"le_{i}": Count("id", filter=Q(value__lte=_in_units(bound, per_second)))
            for i, bound in enumerate(bounds)
        },
        **(extra or {}),
    }
    queryset = queryset.order_by().annotate(value=value)
    if labels:
        fields = list(labels.values())
        rows = list(queryset.values(*fields).annotate(**aggregates).order_by(*fields))
    else:
        row = queryset.aggregate(**aggregates)
        rows = [row] if row["count"] else []
    histogram = HistogramMetricFamily(name, documentation, labels=list(labels))
    for row in rows:
        buckets = [(floatToGoString(b), row[f"le_{i}"]) for i, b in enumerate(bounds)]
        histogram.add_metric(
            [row[field] for field in labels.values()],
            [*buckets, ("+Inf", row["count"])],
            sum_value=float(row["value_total"] or 0) / per_second,
        )
    return histogram, rows


def _in_units(seconds: float, per_second: int) -> float | int:
    units = seconds * per_second
    return int(units) if float(units).is_integer() else units
