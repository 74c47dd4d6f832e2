"""Budgets end real runs (scripted model, the demo MCP server over stdio): at each kind
of limit the running agents get one forced conclusion without tools, marked with the
reason ``budget``; the rest of the chain is skipped or only summarised, as configured;
the session completes and says which limit stopped it."""

from __future__ import annotations

import pytest

from sessions import services
from sessions.budget import as_json
from sessions.models import (
    AgentExecution,
    AlertSession,
    LLMInteraction,
    MCPInteraction,
    Stage,
    TimelineEvent,
)
from sessions.selectors.trace import request_messages
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)

GET_PODS = {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}


def tool_turns(count: int = 12, *, delay: float | None = None) -> list[dict]:
    turns = []
    for step in range(1, count + 1):
        turn: dict = {"text": f"Step {step}: looking at the pods.", "tool_calls": [GET_PODS]}
        if delay is not None:
            turn["chunk_delay"] = delay
        turns.append(turn)
    return turns


@pytest.fixture
def budgeted(tarsy_config):
    """A two-stage chain (one agent, then two side by side) with ``budget``."""

    def use(budget: dict, stages: list | None = None, chain_keys: dict | None = None) -> None:
        chain_keys = chain_keys or {}

        def change(config: dict) -> None:
            config["defaults"]["memory"] = {"enabled": False}
            for name in ("PodAgent", "EventAgent"):
                config["agents"][name] = {
                    "description": "Reads pods.",
                    "mcp_servers": ["kubernetes"],
                }
            config["agent_chains"]["budgeted"] = {
                "alert_types": ["Budgeted"],
                "budget": budget,
                "stages": stages
                or [
                    {"name": "first", "agents": [{"name": "KubernetesAgent"}]},
                    {
                        "name": "second",
                        "agents": [{"name": "PodAgent"}, {"name": "EventAgent"}],
                    },
                ],
                **chain_keys,
            }
            config.setdefault("system", {})["cost_estimation"] = {
                # A dollar a token: the scripted model counts a word as a token.
                "model_rates": {"script": {"input_per_million": 1e6, "output_per_million": 1e6}}
            }

        tarsy_config(change)

    return use


def start(budget: dict | None = None) -> AlertSession:
    from config.loader import get_config
    from sessions.intake import alert_budget

    config = get_config()
    return services.session_create(
        alert_type="Budgeted",
        alert_data="pods failing in payments",
        chain_id="budgeted",
        author="t",
        budget=alert_budget(
            budget, config.budget_for(config.chains["budgeted"], "Budgeted"), "Budgeted"
        ),
    )


def forced(session) -> list[TimelineEvent]:
    return [
        item
        for item in TimelineEvent.objects.filter(session=session, event_type="final_analysis")
        if item.metadata.get("forced_conclusion")
    ]


def warnings(session) -> list[str]:
    return list(
        TimelineEvent.objects.filter(
            session=session, event_type="warning", metadata__source="budget"
        ).values_list("content", flat=True)
    )


def test_tool_calls_limit_stops_the_agent_with_one_conclusion_and_the_summary_still_runs(
    budgeted, scripted_provider
):
    budgeted({"tool_calls": 3})
    scripted_provider([{"text": "unused"}], agents={"KubernetesAgent": {"turns": tool_turns()}})
    session = start()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop == "tool calls 3 of 3"
    assert MCPInteraction.objects.filter(session=session, interaction_type="tool_call").count() == 3
    # One conclusion, without tools, marked as TARSy marks one, with the reason.
    (conclusion,) = forced(session)
    assert conclusion.metadata["reason"] == "budget"
    assert conclusion.metadata["iterations_used"] == 3
    call = LLMInteraction.objects.get(session=session, interaction_type="forced_conclusion")
    assert call.tools == []
    sent = request_messages(call)
    assert sent[-1]["role"] == "user"
    assert "budget is spent (tool calls 3 of 3)" in sent[-1]["content"]
    # The second stage is skipped; the executive summary (after_limit summarize) runs.
    assert list(Stage.objects.filter(session=session).values_list("name", flat=True)) == [
        "first",
        "Executive Summary",
    ]
    assert session.executive_summary
    assert warnings(session) == [
        "Stopped by budget: tool calls 3 of 3. The running agents conclude now without "
        "tools; the rest of the chain is skipped; the synthesis and executive summary still "
        "run.",
        "Skipped by budget: second",
    ]
    assert session.final_analysis == conclusion.content
    shown = as_json(session)
    assert shown["limits"] == {"tool_calls": 3}
    assert shown["spent"]["tool_calls"] == 3
    assert shown["stopped_by"] == "tool calls 3 of 3"


def test_llm_calls_limit_with_after_limit_stop_writes_no_summary(budgeted, scripted_provider):
    budgeted({"llm_calls": 2, "after_limit": "stop"})
    scripted_provider([{"text": "unused"}], agents={"KubernetesAgent": {"turns": tool_turns()}})
    session = start()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop == "LLM calls 2 of 2"
    types = list(
        LLMInteraction.objects.filter(session=session)
        .order_by("id")
        .values_list("interaction_type", flat=True)
    )
    assert types == ["iteration", "iteration", "forced_conclusion"]
    assert list(Stage.objects.filter(session=session).values_list("name", flat=True)) == ["first"]
    assert session.executive_summary == ""
    assert "stopped by its budget (LLM calls 2 of 2)" in session.executive_summary_error


def test_tokens_and_cost_count_every_agent_side_by_side(budgeted, scripted_provider):
    """The second stage's two agents share the budget: the first to reach it stops both."""
    budgeted({"cost_usd": 1_000_000, "llm_calls": 100})
    scripted_provider(
        [{"text": "unused"}],
        agents={
            "KubernetesAgent": {"turns": [{"text": "Stage one: the pods crash."}]},
            "PodAgent": {"turns": tool_turns()},
            "EventAgent": {"turns": tool_turns()},
        },
    )
    # The cost of the first stage's one call: a run stopped by the budget right after it.
    first_run = start({"llm_calls": 1})
    assert run_session(str(first_run.id)) == "completed"
    (stage_one,) = LLMInteraction.objects.filter(session=first_run, interaction_type="iteration")
    assert AlertSession.objects.get(id=first_run.id).budget_stop == "LLM calls 1 of 1"
    # Stopped between the stages: the second never started.
    assert not Stage.objects.filter(session=first_run, name="second").exists()
    # A limit the first stage's call stays under, and the second stage goes over.
    limit = float(stage_one.estimated_cost_usd) * 1.5
    session = start({"cost_usd": limit})
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop.startswith("cost $")
    assert session.budget_stop.endswith(f"of ${limit:,.2f}")
    second = AgentExecution.objects.filter(session=session, stage__name="second")
    assert {e.agent_name for e in second} == {"PodAgent", "EventAgent"}
    # Both agents of the stage concluded on the budget, each once.
    concluded = [item.execution.agent_name for item in forced(session)]
    assert sorted(concluded) == ["EventAgent", "PodAgent"]
    assert all(e.status == "completed" for e in second)
    # The synthesis of the parallel stage still runs (after_limit summarize).
    assert Stage.objects.filter(session=session, name="second - Synthesis").exists()


def test_tokens_limit(budgeted, scripted_provider):
    budgeted({"tokens": 10_000_000})
    scripted_provider([{"text": "unused"}], agents={"KubernetesAgent": {"turns": tool_turns()}})
    session = start({"tokens": 50})
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop.startswith("tokens ")
    assert session.budget_stop.endswith(" of 50")
    assert len(forced(session)) == 1


def test_wall_time_limit(budgeted, scripted_provider):
    budgeted({"wall_time": "1s"})
    scripted_provider(
        [{"text": "unused"}], agents={"KubernetesAgent": {"turns": tool_turns(delay=0.2)}}
    )
    session = start()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop.startswith("wall time ")
    assert session.budget_stop.endswith(" of 1 s")
    assert len(forced(session)) == 1


def test_no_budget_no_stop(budgeted, scripted_provider):
    budgeted({})
    scripted_provider(
        [{"text": "unused"}],
        agents={
            "KubernetesAgent": {"turns": [{"text": "Concluded."}]},
            "PodAgent": {"turns": [{"text": "Concluded too."}]},
            "EventAgent": {"turns": [{"text": "Concluded as well."}]},
        },
    )
    session = start()
    assert session.budget is None
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop is None
    assert forced(session) == []
    assert as_json(session) is None


def test_sub_agents_spend_the_same_budget_and_conclude_before_their_orchestrator(
    budgeted, scripted_provider
):
    budgeted(
        {"llm_calls": 5},
        stages=[
            {
                "name": "orchestrated",
                "agents": [{"name": "KubernetesAgent"}],
                "sub_agents": ["PodAgent", "EventAgent"],
            }
        ],
    )
    dispatch = [
        {"name": "orchestrator.dispatch_agent", "arguments": {"name": name, "task": f"{name}."}}
        for name in ("PodAgent", "EventAgent")
    ]
    scripted_provider(
        [{"text": "unused"}],
        agents={
            "KubernetesAgent": {
                "turns": [
                    {"text": "Two questions at once.", "tool_calls": dispatch},
                    *[{"text": "Orchestrator: what my sub-agents found."}] * 4,
                ]
            },
            "PodAgent": {"turns": tool_turns()},
            "EventAgent": {"turns": tool_turns()},
        },
    )
    session = start()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop.startswith("LLM calls ")
    assert session.budget_stop.endswith(" of 5")
    # Each agent, the sub-agents too, concluded once on the budget.
    concluded = sorted(item.execution.agent_name for item in forced(session))
    assert concluded == ["EventAgent", "KubernetesAgent", "PodAgent"]
    executions = AgentExecution.objects.filter(session=session, stage__name="orchestrated")
    assert {e.agent_name: e.status for e in executions} == {
        "KubernetesAgent": "completed",
        "PodAgent": "completed",
        "EventAgent": "completed",
    }
    # The orchestrator's conclusion was asked after both sub-agents' answers came in.
    last = LLMInteraction.objects.filter(
        session=session, execution__agent_name="KubernetesAgent"
    ).latest("id")
    assert last.interaction_type == "forced_conclusion"
    conversation = " ".join(m["content"] for m in request_messages(last))
    assert "[Sub-agent completed] PodAgent" in conversation
    assert "[Sub-agent completed] EventAgent" in conversation


def test_a_fallback_providers_calls_count_against_the_same_budget(
    budgeted, scripted_provider, write_script
):
    from llm.models import LLMProvider, ProviderType

    budgeted(
        {"llm_calls": 3},
        stages=[{"name": "first", "agents": [{"name": "KubernetesAgent"}]}],
        chain_keys={"fallback_providers": [{"provider": "backup"}]},
    )
    failing = {"error": {"code": "auth_error", "message": "bad key", "retryable": False}}
    scripted_provider([{"text": "unused"}], agents={"KubernetesAgent": {"turns": [failing]}})
    LLMProvider.objects.create(
        name="backup",
        type=ProviderType.SCRIPTED,
        model="script",
        options={
            "script": write_script(
                [{"text": "unused"}], agents={"KubernetesAgent": {"turns": tool_turns()}}
            )
        },
    )
    session = start()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    # The primary's failed call, then two on the fallback: three calls.
    calls = list(
        LLMInteraction.objects.filter(session=session)
        .exclude(interaction_type="executive_summary")
        .order_by("id")
        .values_list("provider", "interaction_type")
    )
    assert calls == [
        ("scripted-test", "iteration"),
        ("backup", "iteration"),
        ("backup", "iteration"),
        ("backup", "forced_conclusion"),
    ]
    assert session.budget_stop == "LLM calls 3 of 3"


def test_a_resumed_run_starts_from_what_the_session_already_spent(budgeted, scripted_provider):
    """A run after a lost worker counts the calls made before it (a chat's do not count)."""
    budgeted({"llm_calls": 3}, stages=[{"name": "first", "agents": [{"name": "KubernetesAgent"}]}])
    scripted_provider([{"text": "unused"}], agents={"KubernetesAgent": {"turns": tool_turns()}})
    session = start()
    for index, stage_type in ((50, "investigation"), (51, "chat")):
        stage = Stage.objects.create(
            session=session, name=f"earlier {stage_type}", index=index, stage_type=stage_type
        )
        execution = AgentExecution.objects.create(
            session=session, stage=stage, agent_name="KubernetesAgent"
        )
        for _ in range(2):
            LLMInteraction.objects.create(
                session=session, execution=execution, provider="p", backend="b", total_tokens=10
            )
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    assert session.budget_stop == "LLM calls 3 of 3"
    ran = LLMInteraction.objects.filter(session=session, execution__stage__name="first")
    assert list(ran.order_by("id").values_list("interaction_type", flat=True)) == [
        "iteration",
        "forced_conclusion",
    ]
