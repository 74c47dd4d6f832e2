"""``GET /usage/summary``: tokens and estimated cost over a window, as TARSy's clients
read them (TARSY-API §1.13)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router

from api.rest import schemas
from api.rest.common import ApiRejected, iso, respond
from api.rest.shapes import cost_estimation_enabled
from sessions.selectors.usage import UsageWindow, usage_summary

router = Router(tags=["usage"])

MAX_WINDOW = timedelta(days=365)
RANKS = ("cost", "tokens")


def _moment(value: str | None, name: str) -> datetime:
    if not value:
        raise ApiRejected(f"{name} is required (RFC3339, e.g. 2026-11-01T00:00:00Z)", 400)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiRejected(f"{name} is not an RFC3339 time: {value[:60]!r}", 400) from None
    if moment.tzinfo is None:
        raise ApiRejected(f"{name} needs a time zone (Z or +hh:mm): {value[:60]!r}", 400)
    return moment


def _row(entry: dict[str, Any], costs: bool, **keys: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        **keys,
        "session_count": entry["session_count"],
        "interaction_count": entry["calls"],
        "input_tokens": entry["input_tokens_sum"] or 0,
        "output_tokens": entry["output_tokens_sum"] or 0,
        "total_tokens": entry["total_tokens_sum"] or 0,
    }
    if costs:
        cost = float(entry["cost"] or 0)
        unpriced = entry["calls"] - entry["priced"]
        row["estimated_cost_usd"] = cost
        row["average_cost_usd"] = cost / entry["session_count"] if entry["session_count"] else 0
        row["cost_completeness"] = (
            "none" if not entry["priced"] else "partial" if unpriced else "complete"
        )
        row["unpriced_interaction_count"] = unpriced
    return row


@router.get(
    "/usage/summary", response={200: dict[str, Any], 400: schemas.Error, 401: schemas.Error}
)
def usage_summary_view(
    request: HttpRequest,
    start_date: str | None = None,
    end_date: str | None = None,
    alert_type: str | None = None,
    chain_id: str | None = None,
    rank_by: str | None = None,
) -> JsonResponse:
    """Tokens (and estimated cost, when estimation is on) from ``start_date`` to
    ``end_date`` (RFC3339, at most 365 days), by model, alert type and chain, and the
    sessions that used the most."""
    start, end = _moment(start_date, "start_date"), _moment(end_date, "end_date")
    if start >= end:
        raise ApiRejected("start_date must be before end_date", 400)
    if end - start > MAX_WINDOW:
        raise ApiRejected("the window may be at most 365 days", 400)
    costs = cost_estimation_enabled()
    rank = rank_by or ("cost" if costs else "tokens")
    if rank not in RANKS:
        raise ApiRejected(f"rank_by must be one of: {', '.join(RANKS)}", 400)
    if rank == "cost" and not costs:
        raise ApiRejected("rank_by=cost needs cost estimation (system.cost_estimation)", 400)
    groups = usage_summary(
        window=UsageWindow(start, end),
        alert_type=alert_type or None,
        chain_id=chain_id or None,
        rank_by=rank,
    )
    key = "estimated_cost_usd" if rank == "cost" else "total_tokens"

    def ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda row: row.get(key, 0), reverse=True)

    by_model = [
        _row(e, costs, model_name=e["model"], llm_provider=e["provider_name"])
        for e in groups["by_model"]
    ]
    total_entry = {
        "calls": sum(e["calls"] for e in groups["by_model"]),
        "session_count": groups["session_count"],
        "input_tokens_sum": sum(e["input_tokens_sum"] or 0 for e in groups["by_model"]),
        "output_tokens_sum": sum(e["output_tokens_sum"] or 0 for e in groups["by_model"]),
        "total_tokens_sum": sum(e["total_tokens_sum"] or 0 for e in groups["by_model"]),
        "cost": sum(float(e["cost"] or 0) for e in groups["by_model"]),
        "priced": sum(e["priced"] for e in groups["by_model"]),
    }
    totals = _row(total_entry, costs)
    return respond(
        {
            "cost_estimation_enabled": costs,
            "window": {"start": iso(start), "end": iso(end)},
            "rank_by": rank,
            "totals": totals,
            "by_model": ranked(by_model),
            "by_alert_type": ranked(
                [_row(e, costs, alert_type=e["alert_type_name"]) for e in groups["by_alert_type"]]
            ),
            "by_chain": ranked([_row(e, costs, chain_id=e["chain"]) for e in groups["by_chain"]]),
            # Ranked and cut to TOP_SESSIONS by the database.
            "top_sessions": [
                _row(e, costs, session_id=str(e["session_ref"]), alert_type=e["alert_type_name"])
                for e in groups["top_sessions"]
            ],
        }
    )
