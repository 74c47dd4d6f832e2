"""GET /metrics: Prometheus text, read back with prometheus_client's own parser. The
workers' metrics come from the rows they wrote; this process's from its registry."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from api import metrics
from sessions import selectors, services
from sessions.auth import api_token_create
from sessions.models import (
    AgentExecution,
    AlertSession,
    LLMInteraction,
    MCPInteraction,
    SessionStatus,
    Stage,
    WorkerCluster,
)

pytestmark = pytest.mark.django_db

TOKEN = "scrape-me-" + "x" * 30


@pytest.fixture(autouse=True)
def fresh_database_metrics():
    """The database part is cached for a few seconds per process; each test starts cold."""
    metrics.DATABASE.clear()
    yield
    metrics.DATABASE.clear()


@pytest.fixture
def staff_client(db) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return client


def scrape(client: Client, query: str = "", **headers) -> dict[str, float]:
    """Every sample of a 200 scrape, keyed ``name{label="value",…}`` (labels sorted)."""
    metrics.DATABASE.clear()
    response = client.get(f"/metrics{query}", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def session(status: str = SessionStatus.COMPLETED, **times: timedelta) -> AlertSession:
    """A session whose created_at, started_at, completed_at are ``now - <timedelta>``."""
    created = AlertSession.objects.create(
        alert_type="kubernetes", alert_data="d", chain_id="c", status=status
    )
    now = timezone.now()
    # created_at is auto_now_add: only an UPDATE can put it in the past.
    AlertSession.objects.filter(id=created.id).update(
        **{field: now - ago for field, ago in times.items()}
    )
    return created


def execution() -> AgentExecution:
    owner = session()
    stage = Stage.objects.create(session=owner, name="investigate", index=1)
    return AgentExecution.objects.create(session=owner, stage=stage, agent_name="K8sAgent")


def llm_call(run: AgentExecution, *, provider="gemini", model="gemini-2.5-pro", ms=0, **fields):
    return LLMInteraction.objects.create(
        session_id=run.session_id,
        execution=run,
        provider=provider,
        backend="langchain",
        model_name=model,
        duration_ms=ms,
        **fields,
    )


def mcp_call(run: AgentExecution, *, server="kubernetes", tool="get_pods", ms=0, **fields):
    return MCPInteraction.objects.create(
        session_id=run.session_id,
        execution=run,
        server_name=server,
        tool_name=tool,
        duration_ms=ms,
        **fields,
    )


# --- what is reported -------------------------------------------------------------------


def test_sessions_are_counted_by_status_and_every_status_is_reported(staff_client):
    session(SessionStatus.COMPLETED)
    session(SessionStatus.COMPLETED)
    session(SessionStatus.FAILED)
    session(SessionStatus.PENDING)
    samples = scrape(staff_client)
    assert samples['tarsy_sessions{status="completed"}'] == 2
    assert samples['tarsy_sessions{status="failed"}'] == 1
    assert samples['tarsy_sessions{status="pending"}'] == 1
    assert samples['tarsy_sessions{status="cancelling"}'] == 0
    assert {key for key in samples if key.startswith("tarsy_sessions{")} == {
        f'tarsy_sessions{{status="{status}"}}' for status in SessionStatus.values
    }
    assert samples["tarsy_database_up{}"] == 1


def test_the_queue_depth_and_the_age_of_the_oldest_pending_session(staff_client):
    assert scrape(staff_client)["tarsy_queue_oldest_pending_age_seconds{}"] == 0
    session(SessionStatus.PENDING, created_at=timedelta(seconds=90))
    session(SessionStatus.PENDING, created_at=timedelta(seconds=10))
    session(SessionStatus.IN_PROGRESS, created_at=timedelta(seconds=500))
    samples = scrape(staff_client)
    assert samples["tarsy_queue_pending_sessions{}"] == 2
    assert 90 <= samples["tarsy_queue_oldest_pending_age_seconds{}"] < 100


def test_queue_wait_is_creation_to_claim_in_buckets(staff_client):
    session(created_at=timedelta(seconds=100), started_at=timedelta(seconds=97))  # 3 s
    session(created_at=timedelta(seconds=100), started_at=timedelta(seconds=55))  # 45 s
    session(SessionStatus.PENDING, created_at=timedelta(seconds=100))  # not claimed yet
    samples = scrape(staff_client)
    wait = "tarsy_session_queue_wait_seconds"
    assert samples[f'{wait}_bucket{{le="1.0"}}'] == 0
    assert samples[f'{wait}_bucket{{le="5.0"}}'] == 1
    assert samples[f'{wait}_bucket{{le="30.0"}}'] == 1
    assert samples[f'{wait}_bucket{{le="60.0"}}'] == 2
    assert samples[f'{wait}_bucket{{le="+Inf"}}'] == 2
    assert samples[f"{wait}_count{{}}"] == 2
    assert samples[f"{wait}_sum{{}}"] == pytest.approx(48, abs=0.01)


def test_session_duration_is_claim_to_end_by_final_status(staff_client):
    started = timedelta(seconds=1000)
    session(SessionStatus.COMPLETED, started_at=started, completed_at=timedelta(seconds=955))
    session(SessionStatus.COMPLETED, started_at=started, completed_at=timedelta(seconds=401))
    session(SessionStatus.TIMED_OUT, started_at=started, completed_at=timedelta(seconds=0))
    session(SessionStatus.IN_PROGRESS, started_at=started)  # still running: not counted
    samples = scrape(staff_client)
    duration = "tarsy_session_duration_seconds"
    assert samples[f'{duration}_bucket{{le="60.0",status="completed"}}'] == 1
    assert samples[f'{duration}_bucket{{le="300.0",status="completed"}}'] == 1
    assert samples[f'{duration}_bucket{{le="600.0",status="completed"}}'] == 2
    assert samples[f'{duration}_count{{status="completed"}}'] == 2
    assert samples[f'{duration}_sum{{status="completed"}}'] == pytest.approx(644, abs=0.01)
    assert samples[f'{duration}_bucket{{le="900.0",status="timed_out"}}'] == 0
    assert samples[f'{duration}_bucket{{le="1800.0",status="timed_out"}}'] == 1
    assert f'{duration}_count{{status="in_progress"}}' not in samples


def test_llm_calls_latency_tokens_and_errors_by_provider_and_model(staff_client):
    run = execution()
    llm_call(run, ms=300, input_tokens=100, output_tokens=20, thinking_tokens=5)
    llm_call(run, ms=1500, input_tokens=1000, output_tokens=200)
    llm_call(run, ms=70_000, error_code="rate_limit")
    llm_call(run, provider="openai", model="gpt-5", ms=2000, error_code="timeout")
    samples = scrape(staff_client)

    gemini = 'model="gemini-2.5-pro",provider="gemini"'
    latency = "tarsy_llm_call_duration_seconds"
    assert samples[f'{latency}_bucket{{le="0.25",{gemini}}}'] == 0
    assert samples[f'{latency}_bucket{{le="0.5",{gemini}}}'] == 1
    assert samples[f'{latency}_bucket{{le="2.5",{gemini}}}'] == 2
    assert samples[f'{latency}_bucket{{le="60.0",{gemini}}}'] == 2
    assert samples[f'{latency}_bucket{{le="120.0",{gemini}}}'] == 3
    assert samples[f"{latency}_count{{{gemini}}}"] == 3
    assert samples[f"{latency}_sum{{{gemini}}}"] == pytest.approx(71.8)
    assert samples[f'{latency}_count{{model="gpt-5",provider="openai"}}'] == 1

    tokens = "tarsy_llm_tokens_total"
    assert samples[f'{tokens}{{kind="input",{gemini}}}'] == 1100
    assert samples[f'{tokens}{{kind="output",{gemini}}}'] == 220
    assert samples[f'{tokens}{{kind="thinking",{gemini}}}'] == 5

    errors = "tarsy_llm_errors_total"
    assert samples[f'{errors}{{code="rate_limit",{gemini}}}'] == 1
    assert samples[f'{errors}{{code="timeout",model="gpt-5",provider="openai"}}'] == 1
    assert len([key for key in samples if key.startswith(errors + "{")]) == 2


def test_mcp_tool_calls_latency_and_errors_by_server_and_tool(staff_client):
    run = execution()
    mcp_call(run, ms=40)
    mcp_call(run, ms=3000, is_error=True)
    mcp_call(run, tool="get_pod_logs", ms=200)
    # Listing a server's tools is not a tool call.
    mcp_call(run, tool="", interaction_type="tool_list", ms=900, is_error=True)
    samples = scrape(staff_client)

    pods = 'server="kubernetes",tool="get_pods"'
    latency = "tarsy_mcp_call_duration_seconds"
    assert samples[f'{latency}_bucket{{le="0.05",{pods}}}'] == 1
    assert samples[f'{latency}_bucket{{le="2.5",{pods}}}'] == 1
    assert samples[f'{latency}_bucket{{le="5.0",{pods}}}'] == 2
    assert samples[f"{latency}_count{{{pods}}}"] == 2
    assert samples[f"{latency}_sum{{{pods}}}"] == pytest.approx(3.04)
    assert samples[f"tarsy_mcp_errors_total{{{pods}}}"] == 1
    logs = 'server="kubernetes",tool="get_pod_logs"'
    assert samples[f"tarsy_mcp_errors_total{{{logs}}}"] == 0
    assert not [key for key in samples if 'tool=""' in key]


def test_only_live_worker_clusters_and_their_workers_are_counted(staff_client, settings):
    settings.TARSY_RECOVERY_INTERVAL = 10
    for workers in (2, 4, 8):
        services.worker_cluster_beat(cluster_id=uuid.uuid4(), host="h", pid=1, workers=workers)
    dead = WorkerCluster.objects.get(workers=8)
    WorkerCluster.objects.filter(id=dead.id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=31)
    )
    samples = scrape(staff_client)
    assert samples["tarsy_worker_clusters{}"] == 2
    assert samples["tarsy_workers{}"] == 6


@pytest.mark.django_db(transaction=True)
def test_a_session_run_by_the_scripted_provider_is_reported(demo_provider):
    from worker.tasks import run_session

    ran = services.session_create(
        alert_type="PodCrashLooping",
        alert_data="alert: PodCrashLooping\nnamespace: payments",
        chain_id="kubernetes-investigation",
        author="t",
    )
    assert run_session(str(ran.id)) == "completed"
    staff = get_user_model().objects.create_user("ops", is_staff=True)
    client = Client()
    client.force_login(staff)
    samples = scrape(client)

    demo = 'model="demo-investigator",provider="demo"'
    calls = LLMInteraction.objects.filter(provider="demo", model_name="demo-investigator")
    assert calls.count() >= 2
    assert samples[f"tarsy_llm_call_duration_seconds_count{{{demo}}}"] == calls.count()
    input_tokens = sum(calls.values_list("input_tokens", flat=True))
    assert input_tokens > 0
    assert samples[f'tarsy_llm_tokens_total{{kind="input",{demo}}}'] == input_tokens
    pods = 'server="kubernetes",tool="get_pods"'
    assert samples[f"tarsy_mcp_call_duration_seconds_count{{{pods}}}"] >= 1
    assert samples['tarsy_sessions{status="completed"}'] == 1
    assert samples['tarsy_session_duration_seconds_count{status="completed"}'] == 1
    assert samples["tarsy_session_queue_wait_seconds_count{}"] == 1


def test_this_process_reports_relay_lag_and_open_websockets(staff_client):
    metrics.RELAY_LAG.observe(0.03)
    metrics.WEBSOCKET_CONNECTIONS.labels(kind="page").inc()
    try:
        samples = scrape(staff_client)
        assert samples['tarsy_websocket_connections{kind="page"}'] >= 1
        assert samples['tarsy_relay_lag_seconds_bucket{le="0.05"}'] >= 1
        assert samples["tarsy_relay_lag_seconds_count{}"] >= 1
        assert "process_cpu_seconds_total{}" in samples
    finally:
        metrics.WEBSOCKET_CONNECTIONS.labels(kind="page").dec()


def test_a_scope_serves_this_process_or_the_database_alone(staff_client):
    session()
    process = scrape(staff_client, "?scope=process")
    assert 'tarsy_sessions{status="completed"}' not in process
    assert "tarsy_relay_lag_seconds_count{}" in process
    database = scrape(staff_client, "?scope=database")
    assert database['tarsy_sessions{status="completed"}'] == 1
    assert "tarsy_relay_lag_seconds_count{}" not in database
    assert "process_cpu_seconds_total{}" not in database


def test_an_unknown_scope_is_a_400_naming_it(staff_client):
    response = staff_client.get("/metrics?scope=workers")
    assert response.status_code == 400
    assert response.content.decode() == "unknown scope 'workers': use all, process or database\n"


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it(staff_client):
    session()
    response = staff_client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    body = response.content.decode()
    assert body.endswith("# EOF\n")
    assert body.count("# EOF") == 1  # both scopes in one exposition
    assert 'tarsy_sessions{status="completed"} 1.0' in body


def test_a_database_failure_is_reported_not_a_500(staff_client, monkeypatch, caplog):
    def locked() -> None:
        raise OperationalError("database is locked")

    monkeypatch.setattr(selectors, "queue_state", locked)
    with caplog.at_level(logging.WARNING, logger="api.metrics"):
        samples = scrape(staff_client)
    assert samples["tarsy_database_up{}"] == 0
    assert not [key for key in samples if key.startswith("tarsy_sessions")]
    assert "tarsy_relay_lag_seconds_count{}" in samples  # this process's part still works
    assert "database is locked" in caplog.text


def test_the_database_part_is_cached_for_a_few_seconds(staff_client):
    first = staff_client.get("/metrics?scope=database").content.decode()
    session()
    assert staff_client.get("/metrics?scope=database").content.decode() == first
    metrics.DATABASE.clear()
    assert 'tarsy_sessions{status="completed"} 1.0' in staff_client.get("/metrics").content.decode()


# --- cost -------------------------------------------------------------------------------


def test_the_number_of_queries_does_not_grow_with_the_rows(staff_client):
    def queries() -> int:
        metrics.DATABASE.clear()
        with CaptureQueriesContext(connection) as captured:
            assert staff_client.get("/metrics?scope=database").status_code == 200
        return len(captured)

    run = execution()
    llm_call(run, ms=10)
    mcp_call(run, ms=10)
    few = queries()
    for n in range(20):
        llm_call(run, provider=f"p{n}", ms=n * 100, error_code="timeout")
        mcp_call(run, server=f"s{n}", ms=n * 10, is_error=True)
        session(SessionStatus.FAILED, started_at=timedelta(seconds=9), completed_at=timedelta(0))
    assert queries() == few


def test_a_scrape_of_20000_calls_and_2000_sessions_takes_well_under_a_second(staff_client):
    now = timezone.now()
    sessions = AlertSession.objects.bulk_create(
        AlertSession(
            alert_type="kubernetes",
            alert_data="d",
            chain_id="c",
            status=SessionStatus.COMPLETED,
            started_at=now,
            completed_at=now + timedelta(seconds=n % 900),
        )
        for n in range(2000)
    )
    stages = Stage.objects.bulk_create(Stage(session=s, name="s", index=1) for s in sessions)
    runs = AgentExecution.objects.bulk_create(
        AgentExecution(session=s, stage=stage, agent_name="A")
        for s, stage in zip(sessions, stages, strict=True)
    )
    models = ["gemini-2.5-pro", "gemini-2.5-flash", "gpt-5", "claude"]
    LLMInteraction.objects.bulk_create(
        (
            LLMInteraction(
                session_id=runs[n % 2000].session_id,
                execution=runs[n % 2000],
                provider=models[n % 4].split("-")[0],
                backend="langchain",
                model_name=models[n % 4],
                request_messages=[{"role": "user", "content": "y" * 1000}],
                input_tokens=n,
                duration_ms=n * 7 % 90_000,
                error_code="timeout" if n % 50 == 0 else "",
            )
            for n in range(20_000)
        ),
        batch_size=2000,
    )
    MCPInteraction.objects.bulk_create(
        (
            MCPInteraction(
                session_id=runs[n % 2000].session_id,
                execution=runs[n % 2000],
                server_name=f"server{n % 3}",
                tool_name=f"tool{n % 7}",
                result="r" * 1000,
                duration_ms=n % 20_000,
                is_error=n % 31 == 0,
            )
            for n in range(20_000)
        ),
        batch_size=2000,
    )
    metrics.DATABASE.clear()
    # CPU time, not wall time: other test runs share this machine's cores.
    started = time.process_time()
    response = staff_client.get("/metrics")
    took = time.process_time() - started
    assert response.status_code == 200
    assert 'tarsy_llm_call_duration_seconds_count{model="gpt-5",provider="gpt"} 5000.0' in (
        response.content.decode()
    )
    assert took < 1.0, f"a scrape took {took:.2f} s"


# --- who may read it --------------------------------------------------------------------


def test_with_a_token_set_the_token_is_required_and_enough(client, settings):
    settings.TARSY_METRICS_TOKEN = TOKEN
    assert scrape(client, Authorization=f"Bearer {TOKEN}")["tarsy_database_up{}"] == 1
    assert scrape(client, Authorization=f"bearer {TOKEN}")["tarsy_database_up{}"] == 1


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "send 'Authorization: Bearer <TARSY_METRICS_TOKEN>'"),
        (f"Bearer {TOKEN}x", "wrong metrics token"),
        (f"Bearer {TOKEN[:-1]}", "wrong metrics token"),
        ("Bearer ", "wrong metrics token"),
        (f"Basic {TOKEN}", "the Authorization header must be 'Bearer <token>'"),
    ],
)
def test_with_a_token_set_anything_else_is_a_401(client, settings, caplog, header, message):
    settings.TARSY_METRICS_TOKEN = TOKEN
    headers = {"Authorization": header} if header is not None else {}
    with caplog.at_level(logging.DEBUG):
        response = client.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="tarsy-metrics"'
    assert response.content.decode() == message + "\n"
    assert TOKEN not in caplog.text


def test_with_a_token_set_a_staff_login_is_not_enough(staff_client, settings):
    settings.TARSY_METRICS_TOKEN = TOKEN
    assert staff_client.get("/metrics").status_code == 401


def test_with_a_token_set_public_does_not_open_it(client, settings):
    settings.TARSY_METRICS_TOKEN = TOKEN
    settings.TARSY_METRICS_PUBLIC = True
    assert client.get("/metrics").status_code == 401


def test_without_a_token_staff_may_read_it_and_others_may_not(client, staff_client, user):
    assert scrape(staff_client)["tarsy_database_up{}"] == 1
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401  # a scraper: no redirect to the login page
    assert "log in as a staff user, or set TARSY_METRICS_TOKEN" in anonymous.content.decode()
    client.force_login(user)
    refused = client.get("/metrics")
    assert refused.status_code == 403
    assert refused.content.decode() == "only staff users may read /metrics\n"


def test_without_a_token_an_api_token_does_not_open_it(client):
    api_token = api_token_create(username="ci-bot")
    response = client.get("/metrics", headers={"Authorization": f"Bearer {api_token}"})
    assert response.status_code == 401
    assert "no TARSY_METRICS_TOKEN set" in response.content.decode()


def test_public_opens_it_to_anyone_when_no_token_is_set(client, settings):
    settings.TARSY_METRICS_PUBLIC = True
    assert scrape(client)["tarsy_database_up{}"] == 1


def test_only_get_and_head(staff_client):
    assert staff_client.head("/metrics").status_code == 200
    assert staff_client.post("/metrics").status_code == 405
