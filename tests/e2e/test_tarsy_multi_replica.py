"""TARSy's ``test/e2e/multi_replica_test.go`` (TestE2E_MultiReplica), replayed here.

Two web processes (daphne) on one database, with one qcluster doing the work: a
session created through replica 1 is followed by a WebSocket client on replica 2, which
must get the session's status, stage status and timeline events, and replica 2's REST
API must show the completed session and its timeline. TARSy's replicas share PostgreSQL
and deliver events through NOTIFY/LISTEN; here the web processes are API/WebSocket only
(the qcluster is the worker, as TARSy's replica 2 with no workers) and share SQLite.

Configuration ``multi-replica`` unchanged. One difference in the script's timing, not its
content: SimpleAgent's answer is held until replica 2's socket has subscribed, so the
events that end the session are created after the subscription and must reach replica 2
live, not only in the replay a subscription starts with (TARSy's client may get either).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.tarsy_scenarios import SocketClient, dump, scenario_deployment, wait

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def multi_replica(tmp_path_factory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("multi-replica")
    with scenario_deployment("multi-replica", tmp_path, webs=2) as run:
        replica1, replica2 = run.tarsy.web_urls
        assert run.tarsy.base_url == replica1
        # Connected to replica 2 before the session exists, as TARSy's test.
        socket = SocketClient(replica2, run.token)
        try:
            session_id = run.submit(
                "test-multi-replica", "Multi-replica cross-pod event delivery test"
            )
            socket.subscribe(f"session:{session_id}")
            wait(
                lambda: any(c["blocked"] for c in run.scenario.llm_calls()),
                "SimpleAgent waiting on the model",
            )
            # Everything stored so far (up to the stage's start) has reached the socket,
            # whether live or in the subscription's replay; nothing more is stored while
            # the model holds its answer. What follows the release can only come live.
            socket.wait_for(
                lambda e: e["type"] == "stage.status" and e.get("status") == "started",
                "replica 2: the stage's start",
            )
            released_at = len(socket.events)
            run.scenario.record.with_name("llm-calls.subscribed.release").touch()
            run.wait_status(session_id, "completed")  # polled on replica 1

            def received(matches, what):
                return socket.wait_for(matches, f"replica 2: {what}", timeout=10)

            received(
                lambda e: e["type"] == "session.status" and e.get("status") == "completed",
                "session.status completed",
            )
            received(lambda e: e["type"] == "stage.status", "stage.status")
            received(lambda e: e["type"] == "timeline_event.created", "timeline_event.created")

            def on_replica2(path: str) -> tuple[int, Any]:
                return run.tarsy.api("GET", f"/api/v1{path}", run.token, base_url=replica2)

            outputs = {
                "session_id": session_id,
                "events": list(socket.events),
                "after_release": list(socket.events[released_at:]),
                "session": on_replica2(f"/sessions/{session_id}"),
                "timeline": on_replica2(f"/sessions/{session_id}/timeline"),
                "llm_calls": run.scenario.llm_calls(),
                "log": run.tarsy.log_tail(100),
            }
            dump("multi-replica", outputs)
            return outputs
        finally:
            socket.close()


def test_replica_2s_socket_gets_the_session_status_stage_status_and_timeline(multi_replica):
    session_id = multi_replica["session_id"]
    events = [e for e in multi_replica["events"] if e.get("session_id") == session_id]
    kinds = {e["type"] for e in events}
    assert {"session.status", "stage.status", "timeline_event.created"} <= kinds, kinds
    assert any(e["type"] == "session.status" and e["status"] == "completed" for e in events)


def test_the_events_that_end_the_session_reach_replica_2_live(multi_replica):
    # Created after the model was let go, once the subscription's replay was over: only
    # the live path between the two web processes can have carried them.
    later = multi_replica["after_release"]
    answer = [e for e in later if e.get("content") == "Analysis complete: system is healthy."]
    assert [e["type"] for e in answer] == ["timeline_event.completed"], [e["type"] for e in later]
    assert any(e["type"] == "timeline_event.created" for e in later)
    assert any(
        e["type"] == "stage.status" and e["stage_name"] == "analysis" and e["status"] == "completed"
        for e in later
    )
    assert any(e["type"] == "session.status" and e["status"] == "completed" for e in later)


def test_replica_2s_rest_api_shows_the_completed_session_and_its_timeline(multi_replica):
    status, session = multi_replica["session"]
    assert status == 200, session
    assert session["status"] == "completed", multi_replica["log"]
    status, timeline = multi_replica["timeline"]
    assert status == 200
    assert timeline


def test_the_model_is_called_twice_as_in_tarsy(multi_replica):
    # 1 session x (1 SimpleAgent + 1 executive summary).
    calls = multi_replica["llm_calls"]
    assert [c["agent"] for c in calls] == ["SimpleAgent", ""]
    assert all(c["answered"] for c in calls)
