"""``GET /usage/summary``'s top sessions are ranked and cut by the database: the right 20
by cost or by tokens, sessions without a priced call last, and every session counted."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from sessions.models import AgentExecution, AlertSession, LLMInteraction, Stage

pytestmark = pytest.mark.django_db


def session_with(tokens: int, cost: str | None) -> AlertSession:
    session = AlertSession.objects.create(alert_type="k", alert_data="d", chain_id="c")
    stage = Stage.objects.create(session=session, name="s", index=0)
    execution = AgentExecution.objects.create(session=session, stage=stage, agent_name="a")
    LLMInteraction.objects.create(
        session=session,
        execution=execution,
        provider="p",
        backend="b",
        model_name="m",
        total_tokens=tokens,
        estimated_cost_usd=None if cost is None else Decimal(cost),
    )
    return session


def summary(client, api_token, rank: str) -> dict:
    now = timezone.now()
    start = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    response = client.get(
        f"/api/v1/usage/summary?start_date={start}&end_date={end}&rank_by={rank}",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_the_top_twenty_by_cost_and_by_tokens(client, api_token, tarsy_config):
    tarsy_config(
        lambda config: config.setdefault("system", {}).update(
            cost_estimation={
                "model_rates": {"m": {"input_per_million": 1, "output_per_million": 1}}
            }
        )
    )
    # Cost rises with n, tokens fall with it; one session has no priced call at all.
    sessions = [session_with(tokens=1000 - n, cost=f"0.{n:03d}") for n in range(1, 26)]
    unpriced = session_with(tokens=5000, cost=None)
    by_cost = summary(client, api_token, "cost")
    assert by_cost["totals"]["session_count"] == 26
    assert [row["session_id"] for row in by_cost["top_sessions"]] == [
        str(s.id) for s in reversed(sessions[5:])
    ]
    by_tokens = summary(client, api_token, "tokens")
    assert [row["session_id"] for row in by_tokens["top_sessions"]] == [
        str(unpriced.id),
        *[str(s.id) for s in sessions[:19]],
    ]
    assert by_tokens["top_sessions"][0]["total_tokens"] == 5000
