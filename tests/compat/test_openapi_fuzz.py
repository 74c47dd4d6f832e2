"""Fuzz every operation of ``/api/v1/openapi.json`` in-process with schemathesis: no
input may give a 500, and every documented response must match its schema."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings

from api.rest import api
from sessions.models import (
    AgentExecution,
    AlertSession,
    ReviewActivity,
    SessionScore,
    Stage,
    TimelineEvent,
)

pytestmark = pytest.mark.django_db

CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.content_type_conformance,
]


def seed_sessions() -> list[str]:
    """Sessions in every shape the reads serialize: ended with stages, a sub-agent, a
    timeline, a score and a review; running; pending."""
    now = timezone.now()
    done = AlertSession.objects.create(
        alert_type="kubernetes",
        alert_data="pod down",
        chain_id="kubernetes-investigation",
        status="completed",
        author="alice",
        started_at=now - timedelta(seconds=30),
        completed_at=now,
        final_analysis="root cause",
        review_status="needs_review",
        mcp_selection={"servers": [{"name": "kubernetes"}]},
    )
    stage = Stage.objects.create(
        session=done, name="investigate", index=0, status="completed", parallel_type="multi_agent"
    )
    parent = AgentExecution.objects.create(
        session=done, stage=stage, agent_name="Orchestrator", status="completed", task=""
    )
    child = AgentExecution.objects.create(
        session=done,
        stage=stage,
        agent_name="LogAgent",
        parent_execution=parent,
        task="read the logs",
        status="completed",
    )
    TimelineEvent.objects.create(
        session=done,
        stage=stage,
        execution=child,
        sequence_number=1,
        event_type="llm_tool_call",
        content="[]",
        metadata={"server_name": "kubernetes", "tool_name": "get_pods"},
    )
    TimelineEvent.objects.create(
        session=done, sequence_number=2, event_type="final_analysis", content="root cause"
    )
    SessionScore.objects.create(session=done, status="completed", total_score=80)
    ReviewActivity.objects.create(
        session=done, actor="system", action="acknowledge", to_status="needs_review"
    )
    running = AlertSession.objects.create(
        alert_type="kubernetes",
        alert_data="d",
        chain_id="kubernetes-investigation",
        status="in_progress",
        started_at=now,
    )
    pending = AlertSession.objects.create(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation"
    )
    return [str(done.id), str(running.id), str(pending.id), str(parent.id), str(child.id)]


@pytest.fixture
def seeded(db, settings):
    settings.ALLOWED_HOSTS = ["*"]
    # Requests run in this test's transaction: Django must not close its connection
    # around each one (Django's test client disconnects these signals the same way).
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield seed_sessions()
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


# The document /api/v1/openapi.json serves (the test below checks they are the same).
# It is built here rather than fetched: fetching needs a token, so the database, which
# pytest does not allow while collecting (and schemathesis' lazy fixture loader does
# not work with pytest 9).
DOCUMENT = api.get_openapi_schema(path_prefix="/api/v1/")
schema = schemathesis.openapi.from_dict(DOCUMENT)
APP = get_wsgi_application()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_gives_a_server_error(case, api_token, seeded):
    # Half the generated ids are replaced by real ones, so reads and writes also meet
    # sessions and executions that exist.
    session_ids, execution_ids = seeded[:3], seeded[3:]
    parameters = case.path_parameters or {}
    generated = parameters.get("session_id")
    if isinstance(generated, str) and generated[:1] in "01234567":
        parameters["session_id"] = session_ids[int(generated[:1]) % len(session_ids)]
        if "execution_id" in parameters:
            parameters["execution_id"] = execution_ids[int(generated[:1]) % 2]
    case.call_and_validate(app=APP, headers={"Authorization": f"Bearer {api_token}"}, checks=CHECKS)


def test_the_fuzzed_document_is_the_served_one(client, api_token):
    response = client.get("/api/v1/openapi.json", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps(DOCUMENT))


def test_the_fuzzer_reaches_real_sessions(client, api_token, seeded):
    """The replaced ids above are real: a read of one is found."""
    response = client.get(f"/api/v1/sessions/{seeded[0]}", HTTP_AUTHORIZATION=f"Bearer {api_token}")
    assert response.status_code == 200
    assert uuid.UUID(response.json()["id"])
