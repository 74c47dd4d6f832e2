"""/health tells the truth: the database, whether any worker cluster is alive, whether
pending work is being picked up, and this process's relay."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from sessions import services
from sessions.models import AlertSession, SessionStatus

pytestmark = pytest.mark.django_db


def beat(seconds_ago: float = 0, workers: int = 2) -> None:
    services.worker_cluster_beat(cluster_id=uuid.uuid4(), host="h", pid=1, workers=workers)
    if seconds_ago:
        from sessions.models import WorkerCluster

        WorkerCluster.objects.update(heartbeat_at=timezone.now() - timedelta(seconds=seconds_ago))


def pending(seconds_ago: float) -> AlertSession:
    session = AlertSession.objects.create(alert_type="k", alert_data="d", chain_id="c")
    AlertSession.objects.filter(id=session.id).update(
        created_at=timezone.now() - timedelta(seconds=seconds_ago)
    )
    return session


def test_healthy_with_a_live_cluster_and_nothing_waiting(client):
    beat()
    body = client.get("/health").json()
    assert body["status"] == "healthy", body
    assert body["checks"]["worker_pool"] == {
        "status": "healthy",
        "message": "1 cluster(s), 2 worker(s)",
    }
    assert body["version"]


def test_degraded_when_no_cluster_has_beaten_recently(client, settings):
    settings.TARSY_RECOVERY_INTERVAL = 10
    beat(seconds_ago=31)  # the only cluster was killed half a minute ago
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["worker_pool"]["status"] == "degraded"
    assert "manage.py qcluster" in body["checks"]["worker_pool"]["message"]


def test_degraded_when_pending_work_is_not_picked_up(client, settings):
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    beat()
    pending(seconds_ago=90)
    body = client.get("/health").json()
    assert body["status"] == "degraded"
    queue = body["checks"]["queue"]
    assert queue["pending"] == 1
    assert queue["oldest_pending_seconds"] >= 90
    assert "not being picked up" in queue["message"]


def running(count: int) -> None:
    for _ in range(count):
        AlertSession.objects.create(
            alert_type="k", alert_data="d", chain_id="c", status=SessionStatus.IN_PROGRESS
        )


def test_degraded_when_pending_work_waits_beside_free_worker_room(client, settings):
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    settings.TARSY_WORKER_SESSIONS = 3
    settings.TARSY_MAX_CONCURRENT_SESSIONS = 20
    beat(workers=2)  # room for 6; 5 run
    running(5)
    pending(seconds_ago=90)
    queue = client.get("/health").json()["checks"]["queue"]
    assert queue["status"] == "degraded", queue
    assert queue["capacity"] == 6
    assert "5 of 6 running" in queue["message"]
    assert "not being picked up" in queue["message"]


def test_busy_workers_with_work_waiting_is_healthy(client, settings):
    """The default two workers, full, below TARSY_MAX_CONCURRENT_SESSIONS: new sessions
    wait for a worker, and nothing is wrong."""
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    settings.TARSY_WORKER_SESSIONS = 3
    settings.TARSY_MAX_CONCURRENT_SESSIONS = 20
    beat(workers=2)
    running(6)
    pending(seconds_ago=600)
    body = client.get("/health").json()
    assert body["status"] == "healthy", body
    queue = body["checks"]["queue"]
    assert queue["status"] == "healthy"
    assert (queue["pending"], queue["running"], queue["capacity"]) == (1, 6, 6)
    assert "all 2 worker(s) are busy" in queue["message"]


def test_busy_workers_are_counted_across_live_clusters_only(client, settings):
    """A dead cluster's workers give no room: two live workers full is busy, not stalled;
    a second live cluster's free room makes the same wait a stall."""
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    settings.TARSY_RECOVERY_INTERVAL = 10
    settings.TARSY_WORKER_SESSIONS = 2
    settings.TARSY_MAX_CONCURRENT_SESSIONS = 0
    beat(seconds_ago=120, workers=4)  # dead: silent for 4 beats
    beat(workers=2)
    running(4)
    pending(seconds_ago=90)
    assert client.get("/health").json()["checks"]["queue"]["status"] == "healthy"
    beat(workers=1)
    queue = client.get("/health").json()["checks"]["queue"]
    assert queue["status"] == "degraded", queue
    assert "4 of 6 running" in queue["message"]


def test_each_cluster_counts_with_its_own_sessions_per_worker(client, settings):
    """The web host's TARSY_WORKER_SESSIONS (12) is not the worker hosts': each cluster
    reports its own, and /health counts the room by it."""
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    settings.TARSY_WORKER_SESSIONS = 12
    settings.TARSY_MAX_CONCURRENT_SESSIONS = 0
    services.worker_cluster_beat(
        cluster_id=uuid.uuid4(), host="a", pid=1, workers=2, sessions_per_worker=1
    )
    services.worker_cluster_beat(
        cluster_id=uuid.uuid4(), host="b", pid=1, workers=1, sessions_per_worker=3
    )
    running(5)
    pending(seconds_ago=600)
    queue = client.get("/health").json()["checks"]["queue"]
    assert (queue["status"], queue["capacity"]) == ("healthy", 5), queue
    assert "busy" in queue["message"]
    # One that did not report it counts with this host's.
    beat(workers=1)
    queue = client.get("/health").json()["checks"]["queue"]
    assert (queue["status"], queue["capacity"]) == ("degraded", 17), queue


def test_pending_work_with_no_worker_at_all_is_stalled(client, settings):
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    pending(seconds_ago=90)
    body = client.get("/health").json()
    assert body["status"] == "degraded"
    queue = body["checks"]["queue"]
    assert queue["status"] == "degraded"
    assert queue["capacity"] == 0
    assert "no worker cluster is alive" in queue["message"]


def test_recent_pending_work_is_not_a_stall(client, settings):
    settings.TARSY_PENDING_RECOVERY_AFTER = 60
    pending(seconds_ago=5)
    queue = client.get("/health").json()["checks"]["queue"]
    assert queue["status"] == "healthy", queue
    assert "message" not in queue


def test_waiting_for_room_under_the_limit_is_healthy(client, settings):
    settings.TARSY_MAX_CONCURRENT_SESSIONS = 1
    beat()
    AlertSession.objects.create(
        alert_type="k", alert_data="d", chain_id="c", status=SessionStatus.IN_PROGRESS
    )
    pending(seconds_ago=600)
    body = client.get("/health").json()
    assert body["status"] == "healthy", body
    assert "TARSY_MAX_CONCURRENT_SESSIONS" in body["checks"]["queue"]["message"]


def test_unhealthy_503_when_the_database_is_down(client, monkeypatch):
    from django.db import connection

    def down():
        raise OperationalError("unable to open database file")

    monkeypatch.setattr(connection, "cursor", down)
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy"
    assert "unable to open database file" in body["checks"]["database"]["message"]
