from __future__ import annotations

import pytest

from sessions import services
from sessions.models import AlertSession, SessionEvent, TimelineEvent
from worker.tasks import run_session

pytestmark = pytest.mark.django_db(transaction=True)


def submit() -> AlertSession:
    return services.session_create(
        alert_type="PodCrashLooping",
        alert_data="alert: PodCrashLooping\nnamespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
    )


def test_the_demo_provider_investigates_the_demo_cluster_for_real(demo_provider):
    session = submit()
    assert run_session(str(session.id)) == "completed"
    session.refresh_from_db()
    tools = list(
        TimelineEvent.objects.filter(session=session, event_type="llm_tool_call").values_list(
            "metadata__tool_name", flat=True
        )
    )
    assert tools[:2] == ["kubernetes.get_pods", "kubernetes.get_events"]
    assert "kubernetes.get_pod_logs" in tools
    assert "kubernetes.describe_pod" in tools
    logs = TimelineEvent.objects.get(
        session=session, event_type="llm_tool_call", metadata__tool_name="kubernetes.get_pod_logs"
    ).content
    # The analysis quotes what the logs said: it read the tool results.
    cause = next(line.strip() for line in logs.splitlines() if "is not set" in line)
    root_cause = session.final_analysis.split("## Root cause", 1)[1]
    assert cause in root_cause
    crit = next(line.strip() for line in logs.splitlines() if "CRITICAL" in line)
    assert crit in session.final_analysis
    assert "## Root cause" in session.final_analysis


def test_running_a_session_twice_does_nothing_the_second_time(demo_provider):
    session = submit()
    assert run_session(str(session.id)) == "completed"
    events = SessionEvent.objects.filter(session=session).count()
    assert run_session(str(session.id)) == "skipped"
    assert SessionEvent.objects.filter(session=session).count() == events


def test_a_missing_provider_fails_the_session_with_a_clear_message():
    session = submit()
    assert run_session(str(session.id)) == "failed"
    session.refresh_from_db()
    assert "No LLM provider is configured" in session.error_message
    assert TimelineEvent.objects.filter(session=session, event_type="error").exists()


def test_a_disabled_default_provider_is_reported_as_disabled(demo_provider):
    demo_provider.enabled = False
    demo_provider.save()
    session = submit()
    assert run_session(str(session.id)) == "failed"
    session.refresh_from_db()
    assert "The default LLM provider 'demo' is disabled" in session.error_message
