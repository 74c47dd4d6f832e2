from __future__ import annotations

import pytest

from agents.scoring import (
    FAILURE_TAGS,
    MalformedScore,
    investigation_text,
    parse_score,
    prompt_hash,
    scoring_messages,
)
from config.builtin import SCORING_INSTRUCTIONS
from llm.demo_script import demo_turn
from llm.types import GenerateRequest, ProviderConfig
from sessions import services
from sessions.models import AlertSession, MCPInteraction, StageType, TimelineEventType
from tests.conftest import running_session


def test_the_score_tags_and_analysis_are_read_from_the_answer():
    answer = parse_score(
        "## Investigation outcome\nRight cause, thin evidence: premature_conclusion.\n\n"
        "TAGS: premature_conclusion, incomplete_evidence\nSCORE: 58"
    )
    assert answer.score == 58
    assert answer.tags == ["premature_conclusion", "incomplete_evidence"]
    assert answer.analysis == (
        "## Investigation outcome\nRight cause, thin evidence: premature_conclusion."
    )


@pytest.mark.parametrize(
    ("line", "score"),
    [
        ("SCORE: 0", 0),
        ("SCORE: 100", 100),
        ("**Score:** 72/100", 72),
        ("score = 81.", 81),
        ("`SCORE: 64`", 64),
    ],
)
def test_decorated_score_lines_are_read(line, score):
    assert parse_score(f"Fine work.\n\n{line}").score == score


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("A careful investigation; I would give it a high mark.", "no 'SCORE: <0-100>' line"),
        ("Good.\nSCORE: 101", "SCORE line says '101'"),
        ("Good.\nSCORE: high", "SCORE line says 'high'"),
        ("Good.\nSCORE: 7.5", "SCORE line says '7.5'"),
        ("Good.\nSCORE:", "SCORE line says ''"),
    ],
)
def test_an_answer_without_a_whole_score_from_0_to_100_is_malformed(text, problem):
    with pytest.raises(MalformedScore, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_score(text)


def test_tarsys_ending_a_number_alone_on_the_last_line_is_the_score():
    answer = parse_score("## Overall\nSound, but incomplete_evidence.\n\n75")
    assert (answer.score, answer.tags) == (75, ["incomplete_evidence"])
    assert answer.analysis == "## Overall\nSound, but incomplete_evidence."
    with pytest.raises(MalformedScore, match="'101'"):
        parse_score("Good.\n101")
    with pytest.raises(MalformedScore, match="no 'SCORE"):
        parse_score("75\nGood.")  # a number not on the last line is not a score


def test_the_last_score_line_counts():
    # An analysis may quote a score ("a SCORE: 90 would be too generous").
    answer = parse_score("SCORE: 90 would be generous.\nSCORE: 40")
    assert answer.score == 40
    assert answer.analysis == "SCORE: 90 would be generous."


def test_tags_outside_the_vocabulary_are_dropped_and_none_means_none():
    assert parse_score("x\nTAGS: wrong_conclusion, made_up_tag\nSCORE: 20").tags == [
        "wrong_conclusion"
    ]
    assert parse_score("x\nTAGS: none\nSCORE: 90").tags == []


def test_without_a_tags_line_the_analysis_is_scanned_for_the_vocabulary():
    answer = parse_score("It shows hallucinated_evidence and a wrong_conclusion.\nSCORE: 10")
    # In the vocabulary's order, whatever the order in the text.
    assert answer.tags == ["hallucinated_evidence", "wrong_conclusion"]


def test_the_evaluation_request_names_every_failure_tag_and_the_closing_lines():
    request = scoring_messages("judge", "the investigation")[1].content
    for tag in FAILURE_TAGS:
        assert f"- {tag}:" in request
    assert request.rstrip().endswith("SCORE: <a whole number from 0 to 100>")
    assert "60-100" in request
    assert "35-59" in request
    assert "0-34" in request


def test_the_prompt_hash_changes_with_the_instructions():
    assert prompt_hash(SCORING_INSTRUCTIONS) == prompt_hash(SCORING_INSTRUCTIONS)
    assert prompt_hash(SCORING_INSTRUCTIONS) != prompt_hash(SCORING_INSTRUCTIONS + " Be strict.")
    assert len(prompt_hash(SCORING_INSTRUCTIONS)) == 64


@pytest.mark.django_db
def test_the_judge_reads_the_alert_stages_tool_calls_results_and_available_tools():
    session, lease = running_session(alert_data="pod web-1 is crash-looping")
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )
    services.timeline_event_add(
        lease=lease,
        execution=execution,
        event_type=TimelineEventType.LLM_TOOL_CALL,
        content="web-1 CrashLoopBackOff " + "x" * 5000,
        metadata={"tool_name": "k8s.get_pods", "arguments": {"namespace": "web"}},
    )
    services.timeline_event_add(
        lease=lease,
        execution=execution,
        event_type=TimelineEventType.FINAL_ANALYSIS,
        content="Root cause: bad config.",
    )
    MCPInteraction.objects.create(
        session=session,
        execution=execution,
        interaction_type="tool_list",
        server_name="k8s",
        available_tools=["get_pods", "get_logs"],
    )
    chat = services.stage_start(lease=lease, name="chat", index=1, stage_type=StageType.CHAT)
    chat_execution = services.execution_start(
        lease=lease,
        stage=chat,
        agent_name="ChatAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )
    services.timeline_event_add(
        lease=lease,
        execution=chat_execution,
        event_type=TimelineEventType.FINAL_ANALYSIS,
        content="a chat answer",
    )

    text = investigation_text(session)
    assert "pod web-1 is crash-looping" in text
    assert "#### Agent KubernetesAgent" in text
    assert 'Tool call `k8s.get_pods` {"namespace": "web"}' in text
    assert "web-1 CrashLoopBackOff" in text
    assert "more characters not shown" in text  # a long result is cut for the judge
    assert "Answer: Root cause: bad config." in text
    assert "- k8s.get_logs\n- k8s.get_pods" in text
    assert "a chat answer" not in text  # chats are not part of the investigation
    assert "Guidance an SRE gave" not in text
    assert "Stopped by its budget" not in text

    # What an SRE told the agents, and a budget's stop, are the judge's to know.
    services.steering_note_add(session_id=session.id, text="the deploy changed it", author="al")
    AlertSession.objects.filter(id=session.id).update(budget_stop="tool calls 3 of 3")
    session.refresh_from_db()
    text = investigation_text(session)
    assert "### Guidance an SRE gave the agents while they ran" in text
    assert " UTC, al: the deploy changed it" in text
    assert "### Stopped by its budget\n\ntool calls 3 of 3: the running agents" in text


def test_the_demo_judge_answers_in_the_format_the_scoring_parses():
    investigation = (
        "### Stage 1\n\nTool call `k8s.get_pods` {}\nResult:\n```\nok\n```\n\n"
        "Tool call `k8s.get_logs` {}\nResult:\n```\nok\n```\n\n"
        "Answer: ## Root cause\nbad config\n\n### Tools that were available\n\n"
        "- k8s.get_events\n- k8s.get_logs\n- k8s.get_pods"
    )
    messages = scoring_messages("judge", investigation)
    config = ProviderConfig(name="demo", type="scripted", model="demo")
    turn = demo_turn(GenerateRequest(messages=tuple(messages), config=config))
    answer = parse_score(turn.text)
    assert answer.score == 75  # a root cause with evidence, one tool left unused
    assert answer.tags == ["missed_available_tool"]
