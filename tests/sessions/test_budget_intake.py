"""Budgets in tarsy.yaml (``defaults.budget``, a chain's ``budget``, per alert type) and
an alert's own ``budget``: it may ask for less, never more; every wrong value named."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from config.schema import TarsyFile
from sessions.models import AlertSession
from tests.sessions.test_dedup import post


def load(text: str):
    return TarsyFile.model_validate(yaml.safe_load(text)).to_config("tarsy.yaml")


CHAIN = """
agent_chains:
  c:
    alert_types: [A, B]
    budget: {tool_calls: 30, tokens: 5000, after_limit: stop}
    stages: [{name: s, agents: [{name: KubernetesAgent}]}]
"""


def test_defaults_then_the_chain_then_the_alert_type():
    config = load(
        "defaults:\n  budget:\n    cost_usd: 0.5\n    tokens: 100000\n    wall_time: 10m\n"
        "    alert_types:\n      A: {tokens: 2000, after_limit: summarize}\n" + CHAIN
    )
    chain = config.chains["c"]
    a = config.budget_for(chain, "A")
    assert a.limits() == {"tokens": 2000, "cost_usd": 0.5, "wall_time": 600.0, "tool_calls": 30}
    assert a.after_limit == "summarize"
    b = config.budget_for(chain, "B")
    assert b.limits() == {"tokens": 5000, "cost_usd": 0.5, "wall_time": 600.0, "tool_calls": 30}
    assert b.after_limit == "stop"


def test_no_budget_unless_configured():
    config = load("{}")
    budget = config.budget_for(config.chains["kubernetes"], "kubernetes")
    assert budget.limits() == {}
    assert budget.after_limit == "summarize"


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("cost_usd: 0", "defaults.budget.cost_usd", "more than 0"),
        ("cost_usd: cheap", "defaults.budget.cost_usd", "expected a number"),
        ("tokens: 0", "defaults.budget.tokens", "at least 1"),
        ("tokens: 1.5", "defaults.budget.tokens", "whole number"),
        ("wall_time: soon", "defaults.budget.wall_time", "expected a duration"),
        ("llm_calls: -1", "defaults.budget.llm_calls", "at least 1"),
        ("after_limit: later", "defaults.budget.after_limit", "allowed: summarize, stop"),
        ("alert_types: {nope: {}}", "defaults.budget.alert_types.nope", "unknown alert type"),
        ("cost: 1", "defaults.budget.cost", "unknown key"),
        ("cost_usd: .inf", "defaults.budget.cost_usd", "at most 1e+12"),
        ("wall_time: 1.0e+400", "defaults.budget.wall_time", "at most 1e+12"),
        (f"tokens: {10**30}", "defaults.budget.tokens", "at most 1e+12"),
    ],
)
def test_config_errors_name_the_key(text, key, problem):
    with pytest.raises(ValidationError) as raised:
        load(f"defaults:\n  budget:\n    {text}\n")
    message = str(raised.value)
    assert key in message
    assert problem in message


def test_a_chains_budget_error_names_the_chain():
    with pytest.raises(ValidationError) as raised:
        load(CHAIN.replace("tool_calls: 30", "tool_calls: none"))
    assert "agent_chains.c.budget.tool_calls" in str(raised.value)


# --- an alert's own budget ----------------------------------------------------------------------


@pytest.fixture
def budget_on(tarsy_config):
    tarsy_config(
        lambda config: config["defaults"].update(
            budget={"cost_usd": 0.5, "tool_calls": 20, "after_limit": "stop"}
        )
    )


@pytest.mark.django_db
def test_the_configured_budget_is_kept_on_the_session(client, api_token, budget_on):
    response = post(client, api_token, {"data": "pod down"})
    assert response.status_code == 202, response.content
    session = AlertSession.objects.get(id=response.json()["session_id"])
    assert session.budget == {"cost_usd": 0.5, "tool_calls": 20, "after_limit": "stop"}
    detail = client.get(
        f"/api/v1/sessions/{session.id}", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    ).json()
    assert detail["budget"]["limits"] == {"cost_usd": 0.5, "tool_calls": 20}
    assert detail["budget"]["spent"]["tool_calls"] == 0
    assert detail["budget"]["stopped_by"] is None


@pytest.mark.django_db
def test_an_alert_may_ask_for_less(client, api_token, budget_on):
    response = post(
        client, api_token, {"data": "pod down", "budget": {"cost_usd": 0.1, "llm_calls": 5}}
    )
    assert response.status_code == 202, response.content
    session = AlertSession.objects.get(id=response.json()["session_id"])
    assert session.budget == {
        "cost_usd": 0.1,
        "tool_calls": 20,
        "llm_calls": 5,
        "after_limit": "stop",
    }


@pytest.mark.django_db
def test_an_alert_may_not_ask_for_more(client, api_token, budget_on):
    response = post(client, api_token, {"data": "pod down", "budget": {"cost_usd": 2}})
    assert response.status_code == 400
    assert response.json()["message"] == (
        "'budget.cost_usd' asks for 2, more than the 0.5 configured for alert type "
        "'kubernetes': an alert may ask for less, never more"
    )
    assert not AlertSession.objects.exists()


@pytest.mark.django_db
def test_without_a_configured_budget_an_alert_brings_its_own(client, api_token):
    response = post(client, api_token, {"data": "pod down", "budget": {"wall_time": 120}})
    assert response.status_code == 202, response.content
    session = AlertSession.objects.get(id=response.json()["session_id"])
    assert session.budget == {"wall_time": 120.0, "after_limit": "summarize"}
    plain = post(client, api_token, {"data": "pod down"})
    assert AlertSession.objects.get(id=plain.json()["session_id"]).budget is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("budget", "problem"),
    [
        ([1], "'budget' must be an object of limits"),
        ({"money": 1}, "unknown field(s) in 'budget': 'money'"),
        (
            {"tokens": 0},
            "'budget.tokens' must be a whole number of at least 1, at most 1e+12, got 0",
        ),
        ({"tokens": 2.5}, "'budget.tokens' must be a whole number"),
        ({"tool_calls": True}, "'budget.tool_calls' must be a whole number"),
        (
            {"cost_usd": "0.1"},
            "'budget.cost_usd' must be a number more than 0, at most 1e+12, got '0.1'",
        ),
        ({"wall_time": -5}, "'budget.wall_time' must be a number more than 0 (seconds)"),
        ({"tokens": 10**400}, "'budget.tokens' must be a whole number of at least 1, at most"),
        ({"llm_calls": 1e300}, "'budget.llm_calls' must be a whole number"),
    ],
)
def test_wrong_budgets_are_refused_by_name(client, api_token, budget, problem):
    response = post(client, api_token, {"data": "pod down", "budget": budget})
    assert response.status_code == 400, response.content
    assert problem in response.json()["message"]
    assert not AlertSession.objects.exists()


def test_a_cost_limit_without_rates_is_warned_about_by_key():
    config = load(
        "defaults:\n  budget:\n    cost_usd: 0.5\n" + CHAIN.replace("tool_calls: 30", "cost_usd: 1")
    )
    assert any(
        "defaults.budget.cost_usd" in warning and "model_rates" in warning
        for warning in config.warnings
    ), config.warnings
    assert any("agent_chains.c.budget.cost_usd" in warning for warning in config.warnings)
    priced = load(
        "defaults:\n  budget:\n    cost_usd: 0.5\nsystem:\n  cost_estimation:\n"
        "    model_rates: {gemini: {input_per_million: 1, output_per_million: 2}}\n"
    )
    assert not any("model_rates" in warning for warning in priced.warnings)


@pytest.mark.django_db
def test_a_number_too_large_for_a_float_is_refused(client, api_token):
    response = client.post(
        "/api/v1/alerts",
        data='{"data": "pod down", "budget": {"cost_usd": 1e400}}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )
    assert response.status_code == 400, response.content
    assert "'budget.cost_usd' must be a number more than 0" in response.json()["message"]


# --- the web form -------------------------------------------------------------------------------


def submit_form(browser_client, **fields):
    browser_client.get("/sessions/new/")
    return browser_client.post(
        "/sessions/new/",
        {
            "csrfmiddlewaretoken": browser_client.cookies["csrftoken"].value,
            "alert_type": "kubernetes",
            "data": "pod down",
            **fields,
        },
    )


@pytest.mark.django_db
def test_the_form_asks_for_less(browser_client, budget_on):
    page = browser_client.get("/sessions/new/").content.decode()
    assert 'id="budget-override"' in page
    assert 'name="budget_cost_usd"' in page
    response = submit_form(browser_client, budget_cost_usd="0.2", budget_llm_calls="8")
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert AlertSession.objects.get().budget == {
        "cost_usd": 0.2,
        "tool_calls": 20,
        "llm_calls": 8,
        "after_limit": "stop",
    }


@pytest.mark.django_db
def test_the_form_refuses_more_and_keeps_what_was_typed(browser_client, budget_on):
    response = submit_form(browser_client, budget_tool_calls="500")
    assert response.status_code == 400
    page = response.content.decode()
    assert "more than the 20 configured for alert type" in page
    assert 'value="500"' in page  # nothing typed is lost
    assert " open>" in page.split('id="budget-override"', 1)[1][:20]
    assert not AlertSession.objects.exists()
    response = submit_form(browser_client, budget_tokens="lots")
    assert response.status_code == 400
    assert "Enter a whole number." in response.content.decode()
