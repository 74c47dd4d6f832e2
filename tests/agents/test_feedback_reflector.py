"""The feedback Reflector: what an SRE's review feedback teaches, kept as lessons trusted
more than the model's own (TARSy's ADR-0014), run by a worker under a lease of its own."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.memory import FEEDBACK_REFLECTOR, REFLECTOR
from llm.models import LLMProvider
from sessions import services
from sessions.models import (
    AgentExecution,
    AlertSession,
    FeedbackReflection,
    InvestigationMemory,
    LLMInteraction,
    ScoreStatus,
)
from sessions.selectors.trace import request_messages
from sessions.services.reflection import (
    feedback_reflections_requeue_lost,
    feedback_reflections_time_out_orphans,
)
from tests.agents.test_memory_runs import DEEP, first_system_prompt, investigate, score_now
from worker.tasks import reflect_on_feedback

pytestmark = pytest.mark.django_db(transaction=True)

ALERT = "alert: PodCrashLooping\nnamespace: payments"
FIRST_LESSON = "PodCrashLooping in payments: the config map is the usual cause"
FEEDBACK_LESSON = "Check the resource limits of payments pods before blaming the config map"
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2


def reflector_answer(create=(), reinforce=(), deprecate=()) -> dict:
    return {
        "turns": [
            {
                "text": json.dumps(
                    {
                        "create": [
                            {"content": c, "category": "procedural", "valence": "positive"}
                            for c in create
                        ],
                        "reinforce": [{"memory_id": i} for i in reinforce],
                        "deprecate": [{"memory_id": i, "reason": "r"} for i in deprecate],
                    }
                )
            }
        ]
    }


@pytest.fixture
def script(scripted_provider, write_script):
    """Script the model; called again, the same provider answers from the new script."""

    def use(feedback_turns: dict) -> None:
        turns = [{"text": "## Root cause\nbad config"}]
        agents = {
            "ScoringAgent": {"turns": [{"text": "Fine.\nSCORE: 70"}, {"text": "None."}]},
            REFLECTOR: reflector_answer(create=[FIRST_LESSON]),
            FEEDBACK_REFLECTOR: feedback_turns,
        }
        provider = LLMProvider.objects.filter(name="scripted-test").first()
        if provider is None:
            scripted_provider(turns, agents=agents)
        else:
            provider.options = {"script": write_script(turns, agents=agents)}
            provider.save()

    return use


def review(session: AlertSession, feedback: str | None, rating: str = "partially_accurate"):
    return services.review_apply(
        session_id=session.id,
        change=services.ReviewChange(
            action="complete", quality_rating=rating, investigation_feedback=feedback
        ),
        actor="sre-alice",
    )


def scored_session() -> AlertSession:
    session = investigate(ALERT, **DEEP)
    score_now(session)
    return session


def test_review_feedback_teaches_a_trusted_lesson_on_the_scoring_stage(script, memory_on):
    script(reflector_answer(create=[FEEDBACK_LESSON]))
    session = scored_session()
    [first] = InvestigationMemory.objects.filter(source_session=session)
    script(reflector_answer(create=[FEEDBACK_LESSON], reinforce=[str(first.id)]))
    review(session, f"Missed the resource limits. The deploy token {TOKEN} leaked in logs.")

    [run] = FeedbackReflection.objects.filter(session=session)
    assert (run.status, run.triggered_by, run.quality_rating) == (
        "pending",
        "sre-alice",
        "partially_accurate",
    )
    assert TOKEN not in run.feedback  # masked with the review, before anything reads it
    assert reflect_on_feedback(str(run.id)) == "completed"
    run.refresh_from_db()
    assert run.status == "completed"
    assert run.lease_token is None

    learned = InvestigationMemory.objects.get(source_session=session, content=FEEDBACK_LESSON)
    assert learned.confidence == pytest.approx(0.9)
    first.refresh_from_db()
    # Rated partially accurate (x0.6), then confirmed by the feedback (x1.1).
    assert first.confidence == pytest.approx(0.7 * 0.6 * 1.1)
    assert first.seen_count == 2

    # TARSy's shape: a FeedbackReflector execution on the session's scoring stage.
    execution = AgentExecution.objects.get(session=session, agent_name=FEEDBACK_REFLECTOR)
    assert execution.stage.stage_type == "scoring"
    assert execution.status == "completed"
    call = LLMInteraction.objects.get(execution=execution)
    assert call.interaction_type == "memory_extraction"
    prompt = request_messages(call)[1]["content"]
    assert "Missed the resource limits." in prompt
    assert TOKEN not in prompt
    assert str(first.id) in prompt  # the lessons it may reinforce are listed to it

    # A re-delivered task finds the run ended and does nothing.
    assert reflect_on_feedback(str(run.id)) == "skipped"
    assert InvestigationMemory.objects.filter(source_session=session).count() == 2


def test_it_runs_only_for_new_feedback_with_memory_on(script, memory_on):
    script(reflector_answer())
    session = scored_session()
    review(session, None)
    assert not FeedbackReflection.objects.exists()  # no feedback, nothing to learn
    services.review_apply(
        session_id=session.id,
        change=services.ReviewChange(action="update_feedback", investigation_feedback="Limits."),
        actor="sre-bob",
    )
    assert FeedbackReflection.objects.count() == 1
    services.review_apply(
        session_id=session.id,
        change=services.ReviewChange(action="update_feedback", investigation_feedback="Limits."),
        actor="sre-bob",
    )
    assert FeedbackReflection.objects.count() == 1  # the same words again teach nothing new


def test_with_memory_off_feedback_queues_nothing(script, memory_off):
    script(reflector_answer())
    session = investigate(ALERT, **DEEP)
    review(session, "Check the limits.")
    assert not FeedbackReflection.objects.exists()


def test_a_session_never_scored_is_not_reflected_on(script, memory_on):
    script(reflector_answer(create=[FEEDBACK_LESSON]))
    session = investigate(ALERT, **DEEP)
    session.scores.all().delete()
    review(session, "Check the limits.")
    run = FeedbackReflection.objects.get(session=session)
    assert reflect_on_feedback(str(run.id)) == "completed"
    assert not InvestigationMemory.objects.exists()
    assert not AgentExecution.objects.filter(agent_name=FEEDBACK_REFLECTOR).exists()


def test_a_failed_model_call_fails_the_run_and_keeps_nothing(script, memory_on):
    script(reflector_answer())
    session = scored_session()
    before = list(InvestigationMemory.objects.values_list("id", "confidence"))
    script({"turns": [{"error": {"code": "quota", "message": "no quota"}}]})
    review(session, "Check the limits.", rating="accurate")
    run = FeedbackReflection.objects.get(session=session)
    assert reflect_on_feedback(str(run.id)) == "failed"
    run.refresh_from_db()
    assert run.status == "failed"
    assert "no quota" in run.error_message
    # Only the rating's effect (x1.2) touched the lessons.
    after = list(InvestigationMemory.objects.values_list("id", "confidence"))
    assert [(i, pytest.approx(c * 1.2)) for i, c in before] == after
    execution = AgentExecution.objects.get(session=session, agent_name=FEEDBACK_REFLECTOR)
    assert execution.status == "failed"
    session.refresh_from_db()
    assert session.status == "completed"


def test_recovery_ends_an_orphaned_run_and_requeues_a_lost_one(script, memory_on):
    script(reflector_answer())
    session = scored_session()
    review(session, "Check the limits.")
    run = FeedbackReflection.objects.get(session=session)
    old = timezone.now() - timedelta(hours=1)
    FeedbackReflection.objects.filter(id=run.id).update(heartbeat_at=old)
    assert feedback_reflections_requeue_lost(older_than_seconds=60) == [run.id]
    assert feedback_reflections_requeue_lost(older_than_seconds=60) == []  # queued once
    lease = services.feedback_reflection_claim(reflection_id=run.id, worker_id="w:1")
    assert lease is not None
    FeedbackReflection.objects.filter(id=run.id).update(heartbeat_at=old)
    assert feedback_reflections_time_out_orphans(threshold_seconds=60) == [run.id]
    run.refresh_from_db()
    assert run.status == ScoreStatus.TIMED_OUT
    assert "stopped reporting" in run.error_message
    # Its worker, back, writes nothing more.
    assert services.session_lease_status(lease=lease) is None


def test_the_demo_learns_from_feedback_and_a_like_alert_is_told(demo_provider, memory_on):
    """No key: the demo's feedback Reflector keeps the reviewer's correction, and the
    next like alert's investigation reads it."""
    session = investigate(ALERT, **DEEP)
    score_now(session)
    review(session, "The pods ran out of memory; the config map was fine.", rating="inaccurate")
    run = FeedbackReflection.objects.get(session=session)
    assert reflect_on_feedback(str(run.id)) == "completed"
    lesson = InvestigationMemory.objects.get(source_session=session, deprecated=False)
    assert "ran out of memory" in lesson.content
    assert (lesson.valence, lesson.confidence) == ("negative", pytest.approx(0.9))
    again = investigate(ALERT + "\npod: payments-api-3", **DEEP)
    assert lesson.content in first_system_prompt(again)
