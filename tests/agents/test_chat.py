"""The chat agent: which agent and tools answer, what it reads of the investigation, and
the demo provider's answer to a question (what a new user sees with no API key)."""

from __future__ import annotations

import pytest

from agents.chat import chat_context, chat_settings
from config.loader import get_config
from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    Chat,
    ChatMessage,
    LLMInteraction,
    Stage,
    TimelineEvent,
)
from worker.tasks import run_chat_message, run_session

# --- which agent, which tools --------------------------------------------------------------------


def test_the_chat_agent_gets_the_tools_the_chains_agents_used():
    config = get_config()
    single = chat_settings(config, config.chains["kubernetes-investigation"])
    assert (single.name, single.type, single.mcp_servers) == ("ChatAgent", "", ("kubernetes",))
    assert single.iterating
    assert "follow-up questions" in single.custom_instructions
    deep = chat_settings(config, config.chains["deep-investigation"])
    assert deep.mcp_servers == ("workloads", "changes")


def test_the_chains_chat_settings_choose_servers_provider_and_steps(tarsy_config):
    def change(config):
        config["agent_chains"]["deep-investigation"]["chat"] = {
            "mcp_servers": ["kubernetes"],
            "llm_provider": "other",
            "llm_backend": "scripted",
            "max_iterations": 3,
        }

    tarsy_config(change)
    config = get_config()
    settings = chat_settings(config, config.chains["deep-investigation"])
    assert settings.mcp_servers == ("kubernetes",)
    assert (settings.llm_provider, settings.llm_backend) == ("other", "scripted")
    assert settings.max_iterations == 3


# --- what it reads -----------------------------------------------------------------------------


@pytest.fixture
def investigated(db):
    """An ended parallel investigation, as rows: two agents (one failed), a synthesis,
    a sub-agent, the executive summary, and one earlier chat turn."""
    session = AlertSession.objects.create(
        alert_type="DeepInvestigation",
        alert_data="namespace: payments",
        runbook="Check the rollout first.",
        chain_id="deep-investigation",
        status="completed",
        final_analysis="Merged: the rollout broke start-up.",
        executive_summary="A rollout broke payments-api.",
    )
    parallel = Stage.objects.create(session=session, name="parallel investigation", index=0)
    workload = AgentExecution.objects.create(
        session=session,
        stage=parallel,
        agent_name="WorkloadAgent",
        status="completed",
        final_analysis="DATABASE_URL is not set.",
    )
    AgentExecution.objects.create(
        session=session,
        stage=parallel,
        agent_name="ChangeAgent",
        agent_index=2,
        status="failed",
        error_message="LLM error [quota]",
    )
    AgentExecution.objects.create(
        session=session,
        stage=parallel,
        agent_name="LogReader",
        parent_execution=workload,
        status="completed",
        final_analysis="sub-agent detail",
    )
    synthesis = Stage.objects.create(
        session=session, name="parallel investigation - Synthesis", index=1, stage_type="synthesis"
    )
    AgentExecution.objects.create(
        session=session,
        stage=synthesis,
        agent_name="SynthesisAgent",
        status="completed",
        final_analysis="Merged: the rollout broke start-up.",
    )
    summary = Stage.objects.create(
        session=session, name="Executive Summary", index=2, stage_type="exec_summary"
    )
    AgentExecution.objects.create(
        session=session,
        stage=summary,
        agent_name="ExecSummaryAgent",
        status="completed",
        final_analysis="A rollout broke payments-api.",
    )
    chat = Chat.objects.create(session=session)
    for index, (question, status, answer) in enumerate(
        [("Which pod?", "completed", "payments-api-7d9f."), ("Since when?", "cancelled", "")],
        start=3,
    ):
        stage = Stage.objects.create(session=session, name="Chat", index=index, stage_type="chat")
        ChatMessage.objects.create(
            chat=chat, session=session, content=question, author="bob", stage=stage, status=status
        )
        AgentExecution.objects.create(
            session=session,
            stage=stage,
            agent_name="ChatAgent",
            status=status,
            final_analysis=answer,
        )
    current = Stage.objects.create(session=session, name="Chat", index=5, stage_type="chat")
    message = ChatMessage.objects.create(
        chat=chat, session=session, content="And the fix?", author="alice", stage=current
    )
    return session, message


def test_the_context_holds_the_alert_each_stages_result_and_the_earlier_turns(investigated):
    session, message = investigated
    context = chat_context(session, message)
    assert "Type: DeepInvestigation\n\nnamespace: payments" in context
    assert "## Runbook\n\nCheck the rollout first." in context
    assert (
        "### Stage 'parallel investigation', agent 'WorkloadAgent'\n\nDATABASE_URL is not set."
        in context
    )
    assert "agent 'ChangeAgent' — failed\n\nLLM error [quota]" in context
    assert "agent 'SynthesisAgent'" in context
    assert "sub-agent detail" not in context  # it reached WorkloadAgent, whose result is here
    assert "ExecSummaryAgent" not in context  # the summary is there once, as the summary
    assert "## Final analysis\n\nMerged: the rollout broke start-up." in context
    assert "## Executive summary\n\nA rollout broke payments-api." in context
    assert "## Outcome\n\nThe investigation ended with status completed." in context
    assert "**Q1** (bob): Which pod?\n\n**A1:** payments-api-7d9f." in context
    assert "**Q2** (bob): Since when?\n\n**A2:** (no answer: cancelled)" in context
    assert "And the fix?" not in context  # the question itself comes after the context
    # An earlier question does not see the later ones.
    first = ChatMessage.objects.get(content="Which pod?")
    assert "Q1" not in chat_context(session, first)


# --- the demo provider --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_demo_provider_answers_a_question_with_what_it_found_and_sees_now(demo_provider):
    session = services.session_create(
        alert_type="PodCrashLooping",
        alert_data="alert: PodCrashLooping\nnamespace: payments",
        chain_id="kubernetes-investigation",
        author="alice",
    )
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    message = services.chat_message_send(
        session=session, content="Why does payments-api keep restarting?", author="alice"
    )
    assert run_chat_message(str(message.id)) == "completed"

    tool = TimelineEvent.objects.get(stage=message.stage, event_type="llm_tool_call")
    assert tool.metadata["tool_name"] == "kubernetes.get_pods"
    answer = TimelineEvent.objects.get(stage=message.stage, event_type="final_analysis").content
    assert "Why does payments-api keep restarting?" in answer
    root_cause = session.final_analysis.split("## Root cause", 1)[1].strip().splitlines()[0]
    assert root_cause in answer  # what the investigation found
    assert "CrashLoopBackOff" in answer  # what the pods say now, from the tool
    assert LLMInteraction.objects.filter(execution__stage=message.stage).count() == 2
