"""Budgets end real runs (issue 23): real daphne and qcluster, the scripted model, the
demo MCP server over stdio, and Chromium. Each alert lowers one limit of the configured
budget; each run is ended by that limit with one forced conclusion (reason ``budget``),
the executive summary still written, and the session ``completed`` saying which limit
stopped it. The session page shows the meters and the stop, live."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import ROOT, deployment, log_in

pytestmark = pytest.mark.e2e

TOOL = {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
STEERING_SERVER = str(ROOT / "tests" / "agents" / "steering_mcp_server.py")
LIMITS = {"tokens": 10_000_000, "cost_usd": 1000, "wall_time": 600, "tool_calls": 100}


def _config(root: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "tarsy.yaml").read_text())
    config["defaults"]["memory"] = {"enabled": False}
    config["defaults"]["budget"] = {**LIMITS, "llm_calls": 100}
    # GateAgent first waits in a tool call for the test's gate file: the page is open
    # before the run reaches its limit.
    config["mcp_servers"]["gate"] = {
        "transport": {"type": "stdio", "command": sys.executable, "args": [STEERING_SERVER]}
    }
    config["agents"]["GateAgent"] = {
        "description": "Waits for the test, then reads pods.",
        "mcp_servers": ["gate", "kubernetes"],
    }
    config["agent_chains"]["gated"] = {
        "alert_types": ["Gated"],
        "stages": [{"name": "gated", "agents": [{"name": "GateAgent"}]}],
    }
    # $300 a million tokens: the scripted model counts a word as a token, so a call of a
    # few hundred words costs about $0.1.
    config.setdefault("system", {})["cost_estimation"] = {
        "model_rates": {"script": {"input_per_million": 300, "output_per_million": 300}}
    }
    path = root / "tarsy.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _script(root: Path) -> Path:
    turns = [
        {"text": f"Step {step}: the pods of payments.", "tool_calls": [TOOL], "chunk_delay": 0.03}
        for step in range(1, 40)
    ]
    wait = {"name": "gate.wait_for_file", "arguments": {"path": str(root / "released")}}
    gated = [{"text": "Waiting for the gate.", "tool_calls": [wait]}, *turns]
    path = root / "script.json"
    path.write_text(json.dumps({"turns": turns, "agents": {"GateAgent": {"turns": gated}}}))
    return path


@pytest.fixture(scope="module")
def tarsy(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    provider = {
        "name": "script",
        "type": "scripted",
        "model": "script",
        "options": {"script": str(_script(root))},
        "is_default": True,
    }
    with deployment(root, provider=provider, extra_env={"TARSY_CONFIG": str(_config(root))}) as dep:
        dep.token = dep.api_token()
        dep.gate = root / "released"
        yield dep


def _submit(tarsy, budget: dict, alert_type: str = "PodCrashLooping") -> str:
    status, accepted = tarsy.api(
        "POST",
        "/api/v1/alerts",
        tarsy.token,
        {"alert_type": alert_type, "data": "pods crash in payments", "budget": budget},
    )
    assert status == 202, accepted
    return accepted["session_id"]


def _ended(tarsy, session_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, detail = tarsy.api("GET", f"/api/v1/sessions/{session_id}", tarsy.token)
        assert status == 200, detail
        if detail["status"] not in ("pending", "in_progress", "cancelling"):
            return detail
        time.sleep(0.2)
    raise AssertionError(f"session {session_id} did not end\n{tarsy.log_tail()}")


@pytest.mark.parametrize(
    ("asked", "stopped_by"),
    [
        ({"tool_calls": 2}, "tool calls 2 of 2"),
        ({"llm_calls": 3}, "LLM calls 3 of 3"),
        ({"tokens": 1_000}, "tokens "),
        ({"cost_usd": 0.25}, "cost $"),
        ({"wall_time": 3}, "wall time "),
    ],
)
def test_each_limit_ends_a_real_run_with_one_forced_conclusion(tarsy, asked, stopped_by):
    (kind,) = asked
    session_id = _submit(tarsy, asked)
    detail = _ended(tarsy, session_id)
    assert detail["status"] == "completed", detail
    budget = detail["budget"]
    assert budget["limits"][kind] == asked[kind]
    # The alert lowered one limit; the others are the configured ones.
    assert {k: v for k, v in budget["limits"].items() if k != kind} == {
        k: v for k, v in {**LIMITS, "llm_calls": 100}.items() if k != kind
    }
    assert budget["stopped_by"].startswith(stopped_by), budget
    assert budget["stopped_by"].endswith(f"of {_amount(kind, asked[kind])}"), budget
    assert budget["spent"][kind] >= asked[kind]

    status, items = tarsy.api("GET", f"/api/v1/sessions/{session_id}/timeline", tarsy.token)
    assert status == 200, items
    forced = [i for i in items if (i.get("metadata") or {}).get("forced_conclusion")]
    assert len(forced) == 1, forced
    assert forced[0]["metadata"]["reason"] == "budget"
    assert forced[0]["event_type"] == "final_analysis"
    warnings = [i["content"] for i in items if i["event_type"] == "warning"]
    assert f"Stopped by budget: {budget['stopped_by']}." in warnings[0]
    # Never silently cut: the answer is the forced conclusion, and the summary is written.
    assert detail["final_analysis"] == forced[0]["content"]
    assert detail["executive_summary"]
    assert detail["error_message"] in (None, "")


def _amount(kind: str, value: float) -> str:
    if kind == "cost_usd":
        return f"${value:,.2f}"
    if kind == "wall_time":
        return f"{value:,.0f} s"
    return f"{int(value):,}"


def test_an_alert_asking_for_more_is_refused(tarsy):
    status, refused = tarsy.api(
        "POST",
        "/api/v1/alerts",
        tarsy.token,
        {"alert_type": "PodCrashLooping", "data": "pods crash", "budget": {"tool_calls": 101}},
    )
    assert status == 400, refused
    assert "an alert may ask for less, never more" in refused["message"]


def test_the_page_shows_the_meters_and_the_stop_live(tarsy, browser):
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    log_in(page, tarsy.base_url)
    session_id = _submit(tarsy, {"tool_calls": 4}, alert_type="Gated")
    page.goto(f"{tarsy.base_url}/sessions/{session_id}/")
    meter = page.locator('#budget-meters .budget-meter[data-kind="tool_calls"]')
    meter.wait_for()
    # The agent waits in its first tool call: the page is open before the limit.
    page.locator("article.item.llm_tool_call.streaming").first.wait_for(timeout=60_000)
    assert page.locator("#budget-stop").count() == 0
    assert meter.locator(".budget-figures").inner_text().endswith(" of 4")
    # Nothing is recorded while the agent waits, yet the wall-time meter moves with the clock.
    wall = page.locator('#budget-meters [data-kind="wall_time"] .budget-figures')
    before = wall.inner_text()
    assert before.endswith(" of 600 s")
    page.wait_for_function(
        "before => document.querySelector("
        "'#budget-meters [data-kind=wall_time] .budget-figures').textContent !== before",
        arg=before,
    )
    tarsy.gate.write_text("go")
    # The stop arrives without a reload, and the meter moved with the calls.
    page.locator("#budget-stop").wait_for(timeout=90_000)
    assert page.locator("#budget-stop").inner_text() == "Stopped by budget: tool calls 4 of 4"
    page.wait_for_function(
        "() => document.querySelector('#budget-meters [data-kind=tool_calls] .budget-figures')"
        ".textContent === '4 of 4'"
    )
    assert "reached" in (meter.get_attribute("class") or "")
    assert page.locator("#budget-tool_calls").get_attribute("value") == "100"
    # Every limit of the budget has its meter, labelled.
    kinds = page.locator("#budget-meters .budget-meter").evaluate_all(
        "els => els.map(e => e.dataset.kind)"
    )
    assert sorted(kinds) == sorted([*LIMITS, "llm_calls"])
    assert page.get_by_label("cost", exact=True).count() == 1
    _ended(tarsy, session_id)
    page.reload()
    assert page.locator("#budget-stop").inner_text() == "Stopped by budget: tool calls 4 of 4"
    page.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_meters_and_the_forms_budget_pass_axe(tarsy, browser, theme):
    from tests.e2e.test_accessibility import AXE, BLOCKING, RUN_AXE, audit, themed_context

    session_id = _submit(tarsy, {"tool_calls": 2})
    _ended(tarsy, session_id)
    context = themed_context(browser, theme)
    try:
        page = context.new_page()
        log_in(page, tarsy.base_url)
        findings = {"session": audit(page, f"{tarsy.base_url}/sessions/{session_id}/")}
        assert page.locator("#budget-stop").count() == 1
        page.goto(f"{tarsy.base_url}/sessions/new/")
        page.click("#budget-override summary")
        page.locator("#id_budget_cost_usd").wait_for()
        page.add_script_tag(path=str(AXE))
        findings["new alert, budget open"] = page.evaluate(RUN_AXE)
    finally:
        context.close()
    blocking = [
        (name, v["id"], v["nodes"])
        for name, violations in findings.items()
        for v in violations
        if v["impact"] in BLOCKING
    ]
    assert not blocking, blocking
