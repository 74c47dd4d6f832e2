"""The sub-agent runner's tools and guardrails, with stand-in sub-agents (no database,
no model): each 'sub-agent' sleeps, then reports; a stop goes through RunControl as a
real one does."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from agents.controller import AgentResult
from agents.runs import Outcome, RunControl
from agents.sub_agents import CANCEL, DISPATCH, LIST, SubAgentRunner
from config.types import AgentConfig, OrchestratorConfig
from sessions.models import ExecutionStatus

CATALOG = [
    AgentConfig(name="LogAgent", description="Reads logs."),
    AgentConfig(name="EventsAgent", description="Reads events."),
]


def runner(
    guardrails: OrchestratorConfig,
    durations: dict[str, float],
    broken: frozenset[str] = frozenset(),
) -> SubAgentRunner:
    """``broken``: sub-agents whose run fails itself (a bug, a lost database), not their work."""
    control = RunControl()
    ids = iter(range(100, 200))

    async def start(name: str, task: str):
        execution = SimpleNamespace(id=next(ids), agent_name=name)

        async def work() -> AgentResult:
            await asyncio.sleep(durations[name])
            return AgentResult(ExecutionStatus.COMPLETED, final_analysis=f"{name} did: {task}")

        async def run() -> Outcome:  # what runs.run_agent does around an agent
            if name in broken:
                await asyncio.sleep(durations[name])
                raise RuntimeError("the run itself failed")
            job = asyncio.create_task(work())
            control.track(execution.id, job)
            try:
                return Outcome(execution, await job)
            except asyncio.CancelledError:
                status, reason = control.stopped_because(execution.id)
                return Outcome(execution, AgentResult(status, error=reason))

        return execution.id, run()

    return SubAgentRunner(catalog=CATALOG, guardrails=guardrails, control=control, start=start)


async def dispatch(subs: SubAgentRunner, name: str, task: str = "look") -> dict:
    result = await subs.call(DISPATCH, {"name": name, "task": task})
    return json.loads(result.content) if not result.is_error else {"error": result.content}


async def test_results_are_pushed_as_they_finish():
    subs = runner(OrchestratorConfig(), {"LogAgent": 0.2, "EventsAgent": 0.05})
    log = await dispatch(subs, "LogAgent", "read the logs")
    events = await dispatch(subs, "EventsAgent", "list events")
    assert (log["status"], events["status"]) == ("accepted", "accepted")
    assert subs.running == 2
    assert subs.drain() == []  # nothing finished yet
    first = await subs.wait()
    assert [m.content.splitlines()[0] for m in first] == [
        f"[Sub-agent completed] EventsAgent (execution {events['execution_id']}):"
    ]
    second = await subs.wait()
    assert "LogAgent did: read the logs" in second[0].content
    assert subs.running == 0


async def test_a_sub_agent_whose_run_fails_is_still_told_so_the_wait_ends():
    subs = runner(OrchestratorConfig(), {"LogAgent": 0.01}, broken=frozenset({"LogAgent"}))
    log = await dispatch(subs, "LogAgent")
    async with asyncio.timeout(5):
        told = await subs.wait()
    assert [m.content.splitlines()[0] for m in told] == [
        f"[Sub-agent failed] LogAgent (execution {log['execution_id']}):"
    ]
    assert subs.running == 0


async def test_max_concurrent_agents_refuses_a_dispatch_over_the_limit():
    subs = runner(OrchestratorConfig(max_concurrent_agents=1), {"LogAgent": 0.2, "EventsAgent": 0})
    await dispatch(subs, "LogAgent")
    refused = await dispatch(subs, "EventsAgent")
    assert "the most allowed at once" in refused["error"]
    await subs.wait()
    assert (await dispatch(subs, "EventsAgent"))["status"] == "accepted"
    await subs.cancel_all("done")


async def test_agent_timeout_ends_a_sub_agent_timed_out():
    subs = runner(OrchestratorConfig(agent_timeout=0.1), {"LogAgent": 5, "EventsAgent": 0})
    await dispatch(subs, "LogAgent")
    [message] = await asyncio.wait_for(subs.wait(), 2)
    assert message.content.startswith("[Sub-agent timed_out] LogAgent")
    assert "sub-agent LogAgent timed out after 0.1 s" in message.content


async def test_max_budget_cancels_the_running_and_refuses_new_ones():
    subs = runner(OrchestratorConfig(max_budget=0.2), {"LogAgent": 5, "EventsAgent": 5})
    await dispatch(subs, "LogAgent")
    await dispatch(subs, "EventsAgent")
    messages = await asyncio.wait_for(subs.wait(), 2)
    assert sorted(m.content.split(" (")[0] for m in messages) == [
        "[Sub-agent cancelled] EventsAgent",
        "[Sub-agent cancelled] LogAgent",
    ]
    assert "budget" in messages[0].content
    assert "time budget for sub-agents is used up" in (await dispatch(subs, "LogAgent"))["error"]


async def test_cancel_agent_stops_one_and_the_other_goes_on():
    subs = runner(OrchestratorConfig(), {"LogAgent": 5, "EventsAgent": 0.1})
    log = await dispatch(subs, "LogAgent")
    await dispatch(subs, "EventsAgent")
    stopped = await subs.call(CANCEL, {"execution_id": log["execution_id"], "reason": "not needed"})
    assert json.loads(stopped.content)["status"] == "cancelling"
    messages = []
    while subs.running or not messages or len(messages) < 2:
        messages += await asyncio.wait_for(subs.wait(), 2)
    texts = " ".join(m.content for m in messages)
    assert "[Sub-agent cancelled] LogAgent" in texts
    assert "Cancelled by the dispatching agent: not needed" in texts
    assert "[Sub-agent completed] EventsAgent" in texts
    listed = json.loads((await subs.call(LIST, {})).content)
    assert {d["name"]: d["status"] for d in listed["dispatched"]} == {
        "LogAgent": "cancelled",
        "EventsAgent": "completed",
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"name": "Ghost", "task": "x"},
            "Unknown agent 'Ghost'; you may dispatch: EventsAgent, LogAgent",
        ),
        ({"name": "LogAgent", "task": " "}, "'task' is required"),
    ],
)
async def test_bad_dispatches_are_tool_errors_not_crashes(arguments, message):
    subs = runner(OrchestratorConfig(), {"LogAgent": 0, "EventsAgent": 0})
    result = await subs.call(DISPATCH, arguments)
    assert result.is_error
    assert message in result.content


async def test_cancelling_an_unknown_sub_agent_is_a_tool_error():
    subs = runner(OrchestratorConfig(), {"LogAgent": 0, "EventsAgent": 0})
    result = await subs.call(CANCEL, {"execution_id": 12345})
    assert result.is_error
    assert "No sub-agent with execution id 12345" in result.content
