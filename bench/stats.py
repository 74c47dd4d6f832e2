"""Shared by the benchmark scripts: percentiles, one-line summaries, the machine's load."""

from __future__ import annotations

import os
import statistics


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, values: list[float], aim: float, unit: str = "ms") -> str:
    median = statistics.median(values)
    return (
        f"{name:<40} n={len(values):<4} median={median:8.1f} {unit}  "
        f"p95={percentile(values, 0.95):8.1f} {unit}  max={max(values):8.1f} {unit}  "
        f"median/aim={median / aim:5.2f} (aim {aim:g} {unit})"
    )


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"
