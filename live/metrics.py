"""What a web process observes of its own live path, in this process's Prometheus registry
(served with the rest at /metrics, ``api/metrics.py``)."""

from __future__ import annotations

from prometheus_client import Gauge, Histogram

# Event written by a worker (its created_at) → handed to this process's consumers.
RELAY_LAG = Histogram(
    "tarsy_relay_lag_seconds",
    "Time from an event-log row being written to this web process's relay delivering it.",
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# kind: "page" (the HTMX pages' sockets) or "api" (/api/v1/ws).
WEBSOCKET_CONNECTIONS = Gauge(
    "tarsy_websocket_connections", "Open WebSocket connections in this web process.", ["kind"]
)
