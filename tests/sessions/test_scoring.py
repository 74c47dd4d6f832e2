from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from django_q.models import OrmQ

from agents.scoring import execute_scoring
from live.relay import event_message
from sessions import services
from sessions.models import (
    AlertSession,
    LLMInteraction,
    SessionEvent,
    SessionScore,
    Stage,
    TimelineEvent,
)
from sessions.services import scoring as score_services
from tests.conftest import running_session
from web.consumers import SessionConsumer
from worker.supervision import Interruption
from worker.tasks import run_session, score_session

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = {"alert_type": "DeepInvestigation", "chain_id": "deep-investigation"}
KUBERNETES = {"alert_type": "kubernetes", "chain_id": "kubernetes-investigation"}


def ended(status: str = "completed", **fields) -> AlertSession:
    """A session that ran (one investigation stage) and ended with ``status``."""
    session, lease = running_session(**{**DEEP, **fields})
    stage = services.stage_start(lease=lease, name="parallel investigation", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="WorkloadAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )
    services.execution_finish(lease=lease, execution=execution, status="completed")
    services.stage_finish(lease=lease, stage=stage, status="completed")
    services.session_end(lease=lease, status=status, final_analysis="## Root cause\nbad config")
    session.refresh_from_db()
    return session


def scoring_script(scripted_provider, *answers: str | dict) -> None:
    """The ScoringAgent's turns, in order; a dict is a turn as the script writes it."""
    turns = [a if isinstance(a, dict) else {"text": a} for a in answers]
    scripted_provider([], agents={"ScoringAgent": {"turns": turns}})


def queued_tasks(name: str) -> list[str]:
    """The arguments of the queued django-q2 tasks running ``name``."""
    tasks = [q.task for q in OrmQ.objects.all()]
    return [t["args"][0] for t in tasks if t["func"] == name]


def score_now(session: AlertSession) -> SessionScore:
    score = session.scores.get(status="pending")
    score_session(str(score.id))
    score.refresh_from_db()
    return score


GOOD = "## Outcome\nCorrect and supported.\n\nTAGS: none\nSCORE: 86"
REPORT = "### Part 1: Missing tools\nNone.\n\n### Part 2: Existing tool improvements\nNone."


# --- when a scoring is queued ------------------------------------------------------------------


def test_a_completed_session_of_a_chain_with_scoring_gets_a_pending_auto_score_and_its_task():
    session = ended()
    score = SessionScore.objects.get(session=session)
    assert (score.status, score.score_triggered_by) == ("pending", "auto")
    assert queued_tasks("worker.tasks.score_session") == [str(score.id)]
    assert SessionEvent.objects.filter(session=session, type="session.score_updated").exists()


@pytest.mark.parametrize("status", ["failed", "timed_out"])
def test_a_session_that_did_not_complete_is_not_scored_automatically(status):
    session = ended(status)
    assert not session.scores.exists()
    assert queued_tasks("worker.tasks.score_session") == []


def test_a_chain_without_scoring_enabled_is_not_scored_automatically():
    session = ended(**KUBERNETES)
    assert not session.scores.exists()


def test_the_queued_score_rolls_back_with_the_end_of_the_session():
    _, lease = running_session(**DEEP)

    def end_then_fail() -> None:
        with transaction.atomic():
            services.session_end(lease=lease, status="completed")
            raise RuntimeError("the transaction fails after the end")

    with pytest.raises(RuntimeError):
        end_then_fail()
    assert not SessionScore.objects.exists()
    assert queued_tasks("worker.tasks.score_session") == []


# --- the scoring run ---------------------------------------------------------------------------


def scored_demo_session() -> tuple[AlertSession, SessionScore]:
    session = services.session_create(
        alert_data="alert: PodCrashLooping\nnamespace: payments", author="t", **DEEP
    )
    assert run_session(str(session.id)) == "completed"
    return session, score_now(session)


def test_the_demo_judge_scores_a_demo_investigation_end_to_end(demo_provider):
    session, score = scored_demo_session()
    assert score.status == "completed"
    assert 60 <= score.total_score <= 100
    assert "Part 2: Existing tool improvements" in score.tool_improvement_report
    assert len(score.prompt_hash) == 64
    stage = Stage.objects.get(session=session, stage_type="scoring")
    assert (score.stage_id, stage.status) == (stage.id, "completed")
    calls = LLMInteraction.objects.filter(session=session, interaction_type="scoring")
    assert calls.count() == 2  # the evaluation and the tool report, one conversation
    # The judge read the investigation: the tool results the agents got.
    prompt = calls.order_by("id").first().request_messages[1]["content"]
    assert "CrashLoopBackOff" in prompt
    assert "### Tools that were available" in prompt
    session.refresh_from_db()
    assert session.status == "completed"


def test_the_scoring_model_calls_are_on_the_trace_page(browser_client, demo_provider):
    session, score = scored_demo_session()
    html = browser_client.get(f"/sessions/{session.id}/trace/").content.decode()
    stage = f'id="trace-stage-{score.stage_id}" class="trace-stage" data-stage-type="scoring"'
    assert stage in html


def test_the_score_tags_analysis_and_report_come_from_the_judges_answers(scripted_provider):
    scoring_script(
        scripted_provider,
        "## Outcome\nRight cause, thin evidence.\n\nTAGS: incomplete_evidence\nSCORE: 58",
        REPORT,
    )
    score = score_now(ended())
    assert score.status == "completed"
    assert score.total_score == 58
    assert score.failure_tags == ["incomplete_evidence"]
    assert score.score_analysis == "## Outcome\nRight cause, thin evidence."
    assert score.tool_improvement_report == REPORT
    assert score.error_message == ""
    assert score.completed_at is not None


def test_a_malformed_answer_is_sent_back_once_with_a_correction(scripted_provider):
    scoring_script(
        scripted_provider, "A good investigation, I would say high.", "Fine.\nSCORE: 71", REPORT
    )
    session = ended()
    score = score_now(session)
    assert (score.status, score.total_score) == ("completed", 71)
    calls = LLMInteraction.objects.filter(session=session, interaction_type="scoring").order_by(
        "id"
    )
    assert calls.count() == 3
    correction = calls[1].request_messages[-1]
    assert correction["role"] == "user"
    assert "could not be read: it has no 'SCORE: <0-100>' line" in correction["content"]


def test_a_correction_that_only_gives_the_score_keeps_the_first_analysis(scripted_provider):
    scoring_script(scripted_provider, "The evidence is thorough.", "TAGS: none\nSCORE: 90", REPORT)
    score = score_now(ended())
    assert (score.total_score, score.score_analysis) == (90, "The evidence is thorough.")


def test_a_second_malformed_answer_is_recorded_as_a_scoring_failure(scripted_provider):
    scoring_script(scripted_provider, "Good.", "Still good, SCORE: very high", REPORT)
    session = ended()
    score = score_now(session)
    assert score.status == "failed"
    assert score.total_score is None
    assert score.error_message == (
        "The scoring model gave no valid score, even when asked again: "
        "it has no 'SCORE: <0-100>' line."
    )
    # No tool report was asked for; the failure is the scoring's, not the session's.
    assert LLMInteraction.objects.filter(session=session).count() == 2
    session.refresh_from_db()
    assert session.status == "completed"
    assert Stage.objects.get(session=session, stage_type="scoring").status == "failed"


def test_a_provider_error_fails_the_scoring_with_the_providers_message(scripted_provider):
    scoring_script(scripted_provider, {"error": {"code": "quota", "message": "out of quota"}})
    score = score_now(ended())
    assert score.status == "failed"
    assert "out of quota" in score.error_message
    assert "quota" in score.error_message


def test_a_missing_tool_report_keeps_the_score_and_says_why(scripted_provider):
    scoring_script(scripted_provider, GOOD, {"error": {"code": "overloaded", "message": "busy"}})
    score = score_now(ended())
    assert (score.status, score.total_score) == ("completed", 86)
    assert score.tool_improvement_report == ""
    assert score.error_message.startswith("No tool report: LLM error [overloaded]")


def test_no_provider_fails_the_scoring_with_what_to_fix():
    score = score_now(ended())
    assert score.status == "failed"
    assert "No LLM provider is configured" in score.error_message


def test_running_a_score_task_twice_scores_once(scripted_provider):
    scoring_script(scripted_provider, GOOD, REPORT)
    session = ended()
    score = session.scores.get()
    assert score_session(str(score.id)) == "completed"
    assert score_session(str(score.id)) == "skipped"
    assert LLMInteraction.objects.filter(session=session, interaction_type="scoring").count() == 2


def test_a_worker_that_lost_its_score_writes_nothing(scripted_provider):
    scoring_script(scripted_provider, GOOD, REPORT)
    session = ended()
    score = session.scores.get()
    lease = services.score_claim(score_id=score.id, worker_id="stalled")
    SessionScore.objects.filter(id=score.id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=120)
    )
    assert services.scores_time_out_orphans(threshold_seconds=60) == [score.id]
    # The stalled worker wakes up and runs: it may not record a single thing.
    assert asyncio.run(execute_scoring(lease)) == "lease_lost"
    score.refresh_from_db()
    assert score.status == "timed_out"
    assert "stopped reporting progress" in score.error_message
    assert not LLMInteraction.objects.filter(session=session).exists()
    assert not Stage.objects.filter(session=session, stage_type="scoring").exists()
    session.refresh_from_db()
    assert session.status == "completed"


def test_a_scoring_whose_worker_cluster_goes_ends_failed_at_once(scripted_provider, settings):
    """As a session does: the keeper sees the cluster go (``should_stop``) and ends the
    scoring failed with the reason, keeping what had streamed, its stage closed."""
    settings.TARSY_LEASE_CHECK_INTERVAL = 0.1
    slow = {"text": " ".join(f"w{n}" for n in range(200)), "chunk_delay": 0.05}
    scoring_script(scripted_provider, slow, REPORT)
    session = ended()
    score = session.scores.get()
    lease = services.score_claim(score_id=score.id, worker_id="w")
    reason = "this worker's cluster stopped"
    deadline = time.monotonic() + 1.0
    should_stop = lambda: Interruption(reason) if time.monotonic() > deadline else None  # noqa: E731
    assert asyncio.run(execute_scoring(lease, should_stop=should_stop)) == "failed"
    score.refresh_from_db()
    assert (score.status, score.error_message, score.lease_token) == ("failed", reason, None)
    stage = Stage.objects.get(session=session, stage_type="scoring")
    assert stage.status == "failed"
    streamed = TimelineEvent.objects.get(execution__stage=stage, event_type="llm_response")
    assert streamed.status == "failed"
    assert 0 < len(streamed.content.split()) < 200
    session.refresh_from_db()
    assert session.status == "completed"


def test_an_orphaned_running_score_is_timed_out_with_its_stage_closed(scripted_provider):
    session = ended()
    score = session.scores.get()
    lease = services.score_claim(score_id=score.id, worker_id="dead")
    score_services.score_stage_start(
        lease=lease, agent_name="ScoringAgent", llm_provider="p", llm_backend="b", model_name="m"
    )
    # TARSy's name for the scoring stage, which says it started.
    stage = Stage.objects.get(session=session, stage_type="scoring")
    assert stage.name == "Reflection"
    started = session.events.filter(type="stage.status").last()
    assert (started.payload["stage_id"], started.payload["status"]) == (stage.id, "active")
    assert services.scores_time_out_orphans(threshold_seconds=60) == []  # still beating
    SessionScore.objects.filter(id=score.id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=120)
    )
    assert services.scores_time_out_orphans(threshold_seconds=60) == [score.id]
    assert services.scores_time_out_orphans(threshold_seconds=60) == []
    assert Stage.objects.get(session=session, stage_type="scoring").status == "timed_out"
    # The session can be scored again.
    services.score_request(session_id=session.id, triggered_by="alice")


def test_the_workers_recovery_pass_times_out_orphaned_scores(settings):
    from worker import supervision

    session = ended()
    score = session.scores.get()
    services.score_claim(score_id=score.id, worker_id="killed")
    SessionScore.objects.filter(id=score.id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.TARSY_ORPHAN_THRESHOLD + 1)
    )
    supervision.recover()
    score.refresh_from_db()
    assert score.status == "timed_out"
    session.refresh_from_db()
    assert session.status == "completed"


def test_a_pending_score_whose_task_was_lost_is_queued_again_once():
    session = ended()
    score = session.scores.get()
    SessionScore.objects.filter(id=score.id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=120)
    )
    assert services.scores_requeue_lost(older_than_seconds=60) == [score.id]
    assert services.scores_requeue_lost(older_than_seconds=60) == []
    assert queued_tasks("worker.tasks.score_session") == [str(score.id)] * 2


# --- re-scoring and the API ----------------------------------------------------------------


def auth(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_rescoring_keeps_the_earlier_scores_as_history(client, api_token, scripted_provider):
    scoring_script(scripted_provider, GOOD, REPORT)
    session = ended()
    first = score_now(session)
    url = f"/api/v1/sessions/{session.id}/score"

    response = client.post(url, **auth(api_token))
    assert response.status_code == 202
    second_id = response.json()["score_id"]
    second = SessionScore.objects.get(id=second_id)
    assert (second.status, second.score_triggered_by) == ("pending", "alice")
    score_session(second_id)

    assert list(session.scores.values_list("id", flat=True)) == [second.id, first.id]
    assert session.scores.filter(status="completed").count() == 2
    body = client.get(url, **auth(api_token)).json()
    assert body["score_id"] == second_id
    assert body["score_triggered_by"] == "alice"
    # Each scoring is a stage of its own; the earlier one is still there.
    assert Stage.objects.filter(session=session, stage_type="scoring").count() == 2


def test_get_score_has_tarsys_shape(client, api_token, scripted_provider):
    scoring_script(
        scripted_provider, "Thin.\nTAGS: premature_conclusion\nSCORE: 40", "No tools missing."
    )
    session = ended()
    score = score_now(session)
    body = client.get(f"/api/v1/sessions/{session.id}/score", **auth(api_token)).json()
    assert body == {
        "score_id": str(score.id),
        "total_score": 40,
        "score_analysis": "Thin.",
        "tool_improvement_report": "No tools missing.",
        "failure_tags": ["premature_conclusion"],
        "prompt_hash": score.prompt_hash,
        "score_triggered_by": "auto",
        "status": "completed",
        "stage_id": str(score.stage_id),
        "started_at": body["started_at"],
        "completed_at": body["completed_at"],
        "error_message": None,
    }
    assert body["completed_at"].endswith("Z")
    detail = client.get(f"/api/v1/sessions/{session.id}", **auth(api_token)).json()
    assert (detail["latest_score"], detail["scoring_status"], detail["score_id"]) == (
        40,
        "completed",
        str(score.id),
    )
    listed = client.get("/api/v1/sessions", **auth(api_token)).json()["sessions"][0]
    assert (listed["latest_score"], listed["scoring_status"]) == (40, "completed")


def test_score_api_errors_are_tarsys(client, api_token):
    missing = "/api/v1/sessions/00000000-0000-4000-8000-000000000000/score"
    for method in (client.get, client.post):
        response = method(missing, **auth(api_token))
        assert response.status_code == 404
        assert response.json()["message"] == "resource not found"

    running, _ = running_session(**DEEP)
    response = client.post(f"/api/v1/sessions/{running.id}/score", **auth(api_token))
    assert response.status_code == 409
    assert response.json()["message"] == "session is not in a terminal state"

    session = ended(**KUBERNETES)  # scoring not enabled: asking still works
    url = f"/api/v1/sessions/{session.id}/score"
    assert client.get(url, **auth(api_token)).status_code == 404  # never scored
    assert client.post(url, **auth(api_token)).status_code == 202
    response = client.post(url, **auth(api_token))
    assert response.status_code == 409
    assert response.json()["message"] == "scoring already in progress for this session"
    assert session.scores.count() == 1
    assert client.put(url, **auth(api_token)).status_code == 405


def test_the_database_refuses_a_second_open_score_whatever_was_read_before():
    session = ended()  # an auto score is pending
    with pytest.raises(services.ScoringInProgress):
        services.score_request(session_id=session.id, triggered_by="bob")
    assert session.scores.count() == 1


# --- the pages ---------------------------------------------------------------------------------


def test_the_session_page_shows_the_score_its_analysis_tags_report_and_history(
    browser_client, scripted_provider
):
    scoring_script(
        scripted_provider,
        "## Outcome\n**Correct**, <script>x</script>\n\nTAGS: missed_available_tool\nSCORE: 65",
        "### Part 1: Missing tools\n- `get_metrics`",
    )
    session = ended()
    score_now(session)
    services.score_request(session_id=session.id, triggered_by="bob")
    score_now(session)
    html = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert 'id="score-badge"' in html
    assert 'class="badge score score-mid" data-score-status="completed" data-score="65"' in html
    assert "<strong>Correct</strong>" in html  # Markdown
    assert "<script>x" not in html
    assert '<code class="failure-tag">missed_available_tool</code>' in html
    assert "<code>get_metrics</code>" in html
    assert "Earlier scores (1)" in html
    assert 'id="rescore"' in html
    # The scoring stage is not drawn as a step of the investigation.
    scoring_stage = Stage.objects.filter(session=session, stage_type="scoring").first()
    assert f'id="stage-{scoring_stage.id}"' not in html


@pytest.mark.parametrize(
    ("answer", "tone"),
    [("SCORE: 80", "score-high"), ("SCORE: 79", "score-mid"), ("SCORE: 59", "score-low")],
)
def test_the_list_row_badge_is_coloured_by_score(browser_client, scripted_provider, answer, tone):
    scoring_script(scripted_provider, f"ok\n{answer}", REPORT)
    session = ended()
    score_now(session)
    html = browser_client.get("/").content.decode()
    row = html.split(f'id="session-row-{session.id}"', 1)[1].split("</tr>", 1)[0]
    assert f"badge score {tone}" in row


def test_running_and_failed_scorings_show_as_such(browser_client):
    session = ended()  # pending, no provider configured
    html = browser_client.get("/").content.decode()
    assert ">scoring…</span>" in html
    score_now(session)
    html = browser_client.get(f"/sessions/{session.id}/").content.decode()
    assert ">score failed</span>" in html
    assert 'id="score-error">Scoring failed: No LLM provider is configured' in html


def test_the_rescore_button_queues_a_scoring_and_says_why_it_cannot(browser_client):
    session = ended(**KUBERNETES)
    url = f"/sessions/{session.id}/score/"
    response = browser_client.post(
        url, HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=csrf(browser_client, session)
    )
    assert response.status_code == 200
    assert 'id="score-waiting">Scoring is queued' in response.content.decode()
    response = browser_client.post(
        url, HTTP_HX_REQUEST="true", HTTP_X_CSRFTOKEN=csrf(browser_client, session)
    )
    assert response.status_code == 409
    assert (
        "Not re-scored: scoring already in progress for this session." in response.content.decode()
    )
    assert session.scores.count() == 1


def csrf(browser_client, session) -> str:
    browser_client.get(f"/sessions/{session.id}/")
    return browser_client.cookies["csrftoken"].value


def test_the_scoring_stage_stays_out_of_the_live_timeline():
    session = ended()
    lease = services.score_claim(score_id=session.scores.get().id, worker_id="w")
    first = SessionEvent.objects.latest("id").id
    score_services.score_stage_start(
        lease=lease, agent_name="ScoringAgent", llm_provider="p", llm_backend="b", model_name="m"
    )
    consumer = SessionConsumer()
    consumer.session_id = session.id
    started = SessionEvent.objects.filter(
        id__gt=first, type__in=("stage.status", "execution.status")
    )
    assert len(started) == 2
    assert [consumer._render(event_message(event)) for event in started] == ["", ""]


def test_a_score_update_re_renders_the_section_and_badge_live():
    session = ended()
    event = SessionEvent.objects.filter(session=session, type="session.score_updated").last()
    consumer = SessionConsumer()
    consumer.session_id = session.id
    html = consumer._render(event_message(event))
    assert (
        '<section id="scoring" class="scoring panel" aria-labelledby="scoring-title" hx-swap-oob="true">'
        in html
    )
    assert 'id="score-badge" hx-swap-oob="true"' in html
    assert "scoring…" in html
    assert json.loads(json.dumps(event.payload))["scoring_status"] == "pending"
