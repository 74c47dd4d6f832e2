"""``/api/v1/ws`` speaks TARSy's WebSocket protocol (docs/api.md §2).

Driven through the real ASGI application (origin check, cookie and bearer auth,
routing, consumer) with sessions written by the real services; live events come from
the real relay, or are handed to the channel layer as the relay hands them.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from api import protocol
from live import relay
from live.metrics import WEBSOCKET_CONNECTIONS
from live.relay import event_message, session_group
from sessions import services, streams
from sessions.auth import api_token_create
from sessions.models import (
    ApiToken,
    ExecutionStatus,
    SessionEvent,
    SessionEventType,
    SessionStatus,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services.events import publish_session_status
from tarsy_site.asgi import application
from tests.conftest import running_session

# Every consumer test needs a real transaction: the consumer reads from other threads.
pytestmark = pytest.mark.django_db(transaction=True)

SITE = "127.0.0.1:8000"
# How long to wait for a message that must come: channels' default of 1 s failed a test
# on a loaded CI machine (CI5). Only a missing message waits this long.
WAIT = 10
PATH = "/api/v1/ws"


def login_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(
    *, token: str | None = None, cookie: str | None = None, origin: str | None = None
) -> tuple[WebsocketCommunicator, bool]:
    headers = [(b"host", SITE.encode())]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if cookie is not None:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    communicator = WebsocketCommunicator(application, PATH, headers=headers)
    connected, _ = await communicator.connect(timeout=3)
    return communicator, connected


async def connected_client(token: str) -> WebsocketCommunicator:
    communicator, connected = await open_socket(token=token)
    assert connected
    hello = await communicator.receive_json_from(timeout=WAIT)
    assert hello["type"] == "connection.established"
    return communicator


async def receive_all(communicator, quiet_for: float = 0.4) -> list[dict]:
    # receive_from() kills the application when it times out; receive_nothing() doesn't.
    messages = []
    while not await communicator.receive_nothing(timeout=quiet_for):
        messages.append(json.loads(await communicator.receive_from(timeout=WAIT)))
    return messages


@pytest.fixture
def token(user) -> str:
    return api_token_create(username=user.username)


def investigation() -> tuple:
    """A running session with a stage, an agent, a streamed thinking item (two chunks)
    and a fire-and-forget final analysis."""
    session, lease = running_session()
    stage = services.stage_start(lease=lease, name="investigation", index=0)
    execution = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    thinking = services.timeline_event_add(
        lease=lease,
        event_type=TimelineEventType.LLM_THINKING,
        status=TimelineEventStatus.STREAMING,
        execution=execution,
    )
    services.timeline_event_chunk(lease=lease, event=thinking, delta="Looking ")
    services.timeline_event_chunk(lease=lease, event=thinking, delta="at pods")
    services.timeline_event_complete(lease=lease, event=thinking, content="Looking at pods")
    return session, lease, stage, execution, thinking


def persistent_ids(session) -> list[int]:
    return list(
        SessionEvent.objects.filter(
            session=session, type__in=protocol.PERSISTENT_TYPES
        ).values_list("id", flat=True)
    )


# --- control messages and errors ------------------------------------------------------


async def test_it_says_hello_and_answers_ping(token):
    communicator, connected = await open_socket(token=token)
    assert connected
    hello = await communicator.receive_json_from(timeout=WAIT)
    assert set(hello) == {"type", "connection_id"}
    assert hello["type"] == "connection.established"
    uuid.UUID(hello["connection_id"])

    await communicator.send_json_to({"action": "ping"})
    assert await communicator.receive_json_from(timeout=WAIT) == {"type": "pong"}
    await communicator.disconnect()


@pytest.mark.parametrize("action", ["subscribe", "unsubscribe", "catchup"])
async def test_an_action_without_a_channel_gets_an_error(token, action):
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": action, "last_event_id": 0})
    assert await communicator.receive_json_from(timeout=WAIT) == {
        "type": "error",
        "message": f"channel is required for {action}",
    }
    await communicator.disconnect()


@pytest.mark.parametrize(
    "junk",
    [
        "not json",
        "[1, 2]",
        '"ping"',
        '{"action": "dance"}',
        '{"action": 5}',
        '{"action": "catchup", "channel": "sessions", "last_event_id": "7"}',
        '{"action": "catchup", "channel": "sessions", "last_event_id": 1.5}',
        '{"action": "subscribe", "channel": ["sessions"]}',
        "null",
        "[" * 1_000_000,  # deeper than any parser should go
        '{"action": "subscribe", "channel": "sessions", "x": ' + "[" * 10 + "]" * 10 + "}",
    ],
)
async def test_bad_json_and_unknown_actions_are_ignored(token, junk):
    communicator = await connected_client(token)
    await communicator.send_to(text_data=junk)
    await communicator.send_json_to({"action": "ping"})
    # The connection lives on, and the junk got no answer at all.
    assert await communicator.receive_json_from(timeout=WAIT) == {"type": "pong"}
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


async def test_catchup_without_last_event_id_is_ignored(token):
    session, *_ = await sync_to_async(investigation)()
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "catchup", "channel": f"session:{session.id}"})
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_any_channel_name_is_confirmed(token):
    communicator = await connected_client(token)
    for channel in ["sessions", "session:not-a-uuid", "cancellations", f"session:{uuid.uuid4()}"]:
        await communicator.send_json_to({"action": "subscribe", "channel": channel})
        # Confirmed, and nothing to replay: none of these has stored events.
        assert await receive_all(communicator) == [
            {"type": "subscription.confirmed", "channel": channel}
        ]
    await communicator.disconnect()


# --- catch-up ------------------------------------------------------------------------------


async def test_subscribe_confirms_then_replays_the_sessions_stored_events(token):
    session, _, stage, execution, thinking = await sync_to_async(investigation)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    messages = await receive_all(communicator)
    await communicator.disconnect()

    assert messages[0] == {"type": "subscription.confirmed", "channel": channel}
    replay = messages[1:]
    # Persistent ones only (no chunks, no execution status), in id order, each with its id.
    assert [m["db_event_id"] for m in replay] == await sync_to_async(persistent_ids)(session)
    assert [m["type"] for m in replay] == [
        "stage.status",
        "timeline_event.created",
        "timeline_event.completed",
    ]
    started, created, completed = replay
    for message in replay:
        assert message["session_id"] == str(session.id)
        assert message["timestamp"].endswith("Z")
    assert started == {
        "type": "stage.status",
        "session_id": str(session.id),
        "timestamp": started["timestamp"],
        "stage_id": str(stage.id),
        "stage_name": "investigation",
        "stage_index": 1,
        "stage_type": "investigation",
        "status": "started",
        "db_event_id": started["db_event_id"],
    }
    assert created == {
        "type": "timeline_event.created",
        "session_id": str(session.id),
        "timestamp": created["timestamp"],
        "event_id": str(thinking.id),
        "stage_id": str(stage.id),
        "execution_id": str(execution.id),
        "event_type": "llm_thinking",
        "status": "streaming",
        "content": "",
        "sequence_number": 1,
        "db_event_id": created["db_event_id"],
    }
    assert completed["event_id"] == str(thinking.id)
    assert completed["content"] == "Looking at pods"
    assert completed["status"] == "completed"
    assert "stage_id" not in completed  # not a field of TARSy's completed payload


async def test_catchup_replays_only_what_came_after_last_event_id(token):
    session, *_ = await sync_to_async(investigation)()
    ids = await sync_to_async(persistent_ids)(session)
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to(
        {"action": "catchup", "channel": channel, "last_event_id": ids[0]}
    )
    messages = await receive_all(communicator)
    await communicator.disconnect()
    assert [m["db_event_id"] for m in messages] == ids[1:]


async def test_catchup_on_the_sessions_channel_is_always_empty(token):
    await sync_to_async(investigation)()
    communicator = await connected_client(token)
    await communicator.send_json_to(
        {"action": "catchup", "channel": "sessions", "last_event_id": 0}
    )
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_session_status_pending_and_cancelling_are_never_sent(token):
    def cancelled_while_running():
        session, _ = running_session()
        publish_session_status(session.id)  # in_progress: sent
        services.session_cancel(session_id=session.id, by="sre")  # cancelling: not sent
        pending = services.session_create(
            alert_type="kubernetes",
            alert_data="x",
            chain_id="kubernetes-investigation",
            author="sre",
        )  # pending: not sent
        return session, pending

    session, pending = await sync_to_async(cancelled_while_running)()
    communicator = await connected_client(token)
    for sid, expected in [(session.id, ["in_progress"]), (pending.id, [])]:
        await communicator.send_json_to(
            {"action": "catchup", "channel": f"session:{sid}", "last_event_id": 0}
        )
        assert [m["status"] for m in await receive_all(communicator)] == expected
    await communicator.disconnect()


async def test_catchup_stops_at_the_cap_and_says_so(token):
    def many_items():
        session, lease = running_session()
        for n in range(205):
            services.timeline_event_add(
                lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content=f"item {n}"
            )
        return session

    session = await sync_to_async(many_items)()
    ids = await sync_to_async(persistent_ids)(session)
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    messages = await receive_all(communicator)
    assert messages[0]["type"] == "subscription.confirmed"
    assert [m["db_event_id"] for m in messages[1:201]] == ids[:200]
    assert messages[201] == {"type": "catchup.overflow", "channel": channel, "has_more": True}
    # The relay may still be delivering these events live: only the ones not replayed.
    live = [m["db_event_id"] for m in messages[202:]]
    assert live == sorted(set(live))
    assert set(live) <= set(ids[200:])

    # Resuming from the last one delivered gets the rest, and no overflow.
    await communicator.send_json_to(
        {"action": "catchup", "channel": channel, "last_event_id": ids[199]}
    )
    rest = await receive_all(communicator)
    assert [m["db_event_id"] for m in rest] == ids[200:]
    await communicator.disconnect()


async def test_catchup_past_expired_events_is_an_overflow(token):
    def expired():
        session, lease, *_ = investigation()
        services.session_end(lease=lease, status=SessionStatus.COMPLETED)
        events = SessionEvent.objects.filter(session=session)
        newest = events.latest("id").id
        events.update(created_at=timezone.now() - timedelta(hours=1))
        services.event_log_prune(retention_seconds=60)
        return session, newest

    session, newest = await sync_to_async(expired)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    assert await receive_all(communicator) == [
        {"type": "subscription.confirmed", "channel": channel},
        {"type": "catchup.overflow", "channel": channel, "has_more": True},
    ]
    # From where it expired (what a reload over REST gives): nothing more to replay.
    await communicator.send_json_to(
        {"action": "catchup", "channel": channel, "last_event_id": newest}
    )
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_the_cap_is_the_catchup_limit_setting(token, settings):
    settings.TARSY_CATCHUP_LIMIT = 2
    session, *_ = await sync_to_async(investigation)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "catchup", "channel": channel, "last_event_id": 0})
    messages = await receive_all(communicator)
    assert len(messages) == 3
    assert messages[-1] == {"type": "catchup.overflow", "channel": channel, "has_more": True}
    await communicator.disconnect()


# --- live ----------------------------------------------------------------------------------


async def test_live_events_follow_with_db_event_id_on_persistent_ones_only(token):
    session, lease = await sync_to_async(running_session)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    assert await receive_all(communicator) == [
        {"type": "subscription.confirmed", "channel": channel}
    ]

    def stream():
        stage = services.stage_start(lease=lease, name="investigation", index=0)
        execution = services.execution_start(
            lease=lease,
            stage=stage,
            agent_name="KubernetesAgent",
            agent_index=1,
            llm_backend="scripted",
            llm_provider="demo",
            model_name="demo",
        )
        services.execution_progress(
            lease=lease, execution=execution, phase="investigating", message="Iteration 1/20"
        )
        item = services.timeline_event_add(
            lease=lease,
            event_type=TimelineEventType.LLM_RESPONSE,
            status=TimelineEventStatus.STREAMING,
            execution=execution,
        )
        services.timeline_event_chunk(lease=lease, event=item, delta="All ")
        services.timeline_event_chunk(lease=lease, event=item, delta="good")
        services.timeline_event_complete(lease=lease, event=item, content="All good")
        # slack.status is ours only: never sent.
        services.event_publish(
            session_id=session.id, type=SessionEventType.SLACK_STATUS, payload={"kind": "end"}
        )
        return item, execution

    item, execution = await sync_to_async(stream)()
    messages = await receive_all(communicator, quiet_for=0.6)
    await communicator.disconnect()

    assert [m["type"] for m in messages] == [
        "stage.status",
        "session.progress",
        "execution.status",
        "execution.progress",
        "execution.progress",
        "timeline_event.created",
        "stream.chunk",
        "stream.chunk",
        "timeline_event.completed",
    ]
    persistent = {"stage.status", "timeline_event.created", "timeline_event.completed"}
    for message in messages:
        assert ("db_event_id" in message) == (message["type"] in persistent), message
    chunks = [m for m in messages if m["type"] == "stream.chunk"]
    assert [c["delta"] for c in chunks] == ["All ", "good"]
    assert set(chunks[0]) == {"type", "session_id", "timestamp", "event_id", "delta"}
    assert chunks[0]["event_id"] == str(item.id)
    progress, agent_progress = messages[1], messages[3]
    assert progress == {
        "type": "session.progress",
        "session_id": str(session.id),
        "timestamp": progress["timestamp"],
        "current_stage_name": "investigation",
        "current_stage_index": 1,
        "total_stages": progress["total_stages"],
        # Counted as the event is sent: the agent may have started by then.
        "active_executions": progress["active_executions"],
        "status_text": "Starting stage: investigation",
    }
    assert progress["total_stages"] >= 1
    assert progress["active_executions"] in (0, 1)
    assert agent_progress == {
        "type": "execution.progress",
        "session_id": str(session.id),
        "timestamp": agent_progress["timestamp"],
        "stage_id": str(execution.stage_id),
        "execution_id": str(execution.id),
        "phase": "investigating",
        "message": "KubernetesAgent started",
    }
    # The agent's own phase, as it goes (the controller's; TARSy's ProgressPhase*).
    assert messages[4] == {
        **agent_progress,
        "timestamp": messages[4]["timestamp"],
        "message": "Iteration 1/20",
    }
    status = messages[2]
    assert status == {
        "type": "execution.status",
        "session_id": str(session.id),
        "timestamp": status["timestamp"],
        "stage_id": str(execution.stage_id),
        "execution_id": str(execution.id),
        "agent_index": 1,
        "status": "active",
    }


async def test_streamed_text_is_sent_once_whether_it_comes_live_or_saved(token):
    session, lease = await sync_to_async(running_session)()
    streaming = await sync_to_async(services.timeline_event_add)(
        lease=lease, event_type=TimelineEventType.LLM_THINKING, status=TimelineEventStatus.STREAMING
    )
    await sync_to_async(services.timeline_event_chunk)(lease=lease, event=streaming, delta="Old ")
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    await receive_all(communicator)  # confirmed, and the replay

    async def live(item_id: int, offset: int, text: str) -> None:
        delta = {"session_id": str(session.id), "item_id": item_id, "offset": offset}
        await get_channel_layer().group_send(
            session_group(session.id), {"type": "relay.delta", "delta": {**delta, "text": text}}
        )

    # Chunks are live only (TARSy): from what had streamed when the client subscribed.
    await live(streaming.id, 0, "Old news")
    await sync_to_async(services.timeline_event_chunk)(lease=lease, event=streaming, delta="news!")
    await live(streaming.id, 4, "news!")  # the saved row brought it first
    # A piece that reaches this process before its item's creation is sent after it.
    early = streaming.id + 1  # the next item's id
    relay._relay.take_delta(streams.Delta(str(session.id), early, 0, "Early "))
    item = await sync_to_async(services.timeline_event_add)(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, status=TimelineEventStatus.STREAMING
    )
    assert item.id == early
    await live(item.id + 1, 0, "an item this client does not follow")
    messages = await receive_all(communicator)
    await communicator.disconnect()
    chunks = [(m["event_id"], m["delta"]) for m in messages if m["type"] == "stream.chunk"]
    assert chunks == [(str(streaming.id), "news"), (str(streaming.id), "!"), (str(early), "Early ")]
    assert [m["type"] for m in messages] == [
        "stream.chunk",
        "stream.chunk",
        "timeline_event.created",
        "stream.chunk",
    ]


async def test_the_sessions_channel_gets_status_copies_without_db_event_id(token):
    session, lease = await sync_to_async(running_session)()
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": "sessions"})
    await communicator.send_json_to({"action": "subscribe", "channel": f"session:{session.id}"})
    await receive_all(communicator)

    await sync_to_async(services.session_end)(lease=lease, status=SessionStatus.COMPLETED)
    messages = [m for m in await receive_all(communicator) if m["type"] == "session.status"]
    await communicator.disconnect()
    # On both channels: TARSy's client sees it twice, once stored and once transient.
    assert len(messages) == 2
    assert {m["status"] for m in messages} == {"completed"}
    assert sorted("db_event_id" in m for m in messages) == [False, True]


async def test_interactions_and_stage_progress_reach_tarsys_clients(token):
    """``interaction.created`` (stored) on the session's channel; ``session.progress``
    on the list's too, so a list shows the stage an active session is in."""
    session, lease = await sync_to_async(running_session)()
    session_socket = await connected_client(token)
    await session_socket.send_json_to({"action": "subscribe", "channel": f"session:{session.id}"})
    list_socket = await connected_client(token)
    await list_socket.send_json_to({"action": "subscribe", "channel": "sessions"})
    await receive_all(session_socket)
    await receive_all(list_socket)

    def work():
        stage = services.stage_start(lease=lease, name="investigation", index=0)
        execution = services.execution_start(
            lease=lease,
            stage=stage,
            agent_name="KubernetesAgent",
            agent_index=1,
            llm_backend="scripted",
            llm_provider="demo",
            model_name="demo",
        )
        call = services.mcp_interaction_create(
            lease=lease,
            execution=execution,
            interaction_type="tool_call",
            server_name="kubernetes",
            tool_name="get_pods",
        )
        return execution, call

    execution, call = await sync_to_async(work)()
    on_session = await receive_all(session_socket)
    on_list = await receive_all(list_socket)
    await session_socket.disconnect()
    await list_socket.disconnect()
    [created] = [m for m in on_session if m["type"] == "interaction.created"]
    assert created == {
        "type": "interaction.created",
        "session_id": str(session.id),
        "timestamp": created["timestamp"],
        "stage_id": str(execution.stage_id),
        "execution_id": str(execution.id),
        "interaction_id": str(call.id),
        "interaction_type": "mcp",
        "db_event_id": created["db_event_id"],
    }
    assert [m["type"] for m in on_list] == ["session.progress"]
    assert on_list[0]["current_stage_name"] == "investigation"


async def test_the_sessions_channel_alone_gets_no_timeline(token):
    session, lease = await sync_to_async(running_session)()
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": "sessions"})
    await receive_all(communicator)

    def work():
        services.timeline_event_add(
            lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="hi"
        )
        services.session_end(lease=lease, status=SessionStatus.FAILED, error_message="boom")

    await sync_to_async(work)()
    messages = await receive_all(communicator)
    await communicator.disconnect()
    # The list's events only, as TARSy's transient copies: no db_event_id.
    assert [m["type"] for m in messages] == ["review.status", "session.status"]
    assert messages[1] == {
        "type": "session.status",
        "session_id": str(session.id),
        "timestamp": messages[1]["timestamp"],
        "status": "failed",
    }
    assert "db_event_id" not in messages[0]


async def test_unsubscribe_stops_the_live_events(token):
    session, lease = await sync_to_async(running_session)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    await receive_all(communicator)
    await communicator.send_json_to({"action": "unsubscribe", "channel": channel})
    assert await communicator.receive_nothing(timeout=0.2)  # no reply to unsubscribe

    await sync_to_async(services.timeline_event_add)(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="unseen"
    )
    assert await receive_all(communicator) == []
    await communicator.disconnect()


@pytest.mark.parametrize("then_catchup", [False, True])
async def test_live_copies_of_replayed_events_are_not_sent_twice(token, then_catchup):
    """Events the subscription's replay sent can also reach the socket live (the relay
    delivers them after the socket joined its group): each is sent once. TARSy's
    dashboard subscribes and catches up at once; the second replay does not make the
    first one's live copies news again."""
    session, lease, *_ = await sync_to_async(investigation)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    replay = (await receive_all(communicator))[1:]
    if then_catchup:
        last = replay[-1]["db_event_id"]
        await communicator.send_json_to(
            {"action": "catchup", "channel": channel, "last_event_id": last - 1}
        )
        assert [m["db_event_id"] for m in await receive_all(communicator)] == [last]

    rows = await sync_to_async(lambda: list(SessionEvent.objects.filter(session=session)))()
    layer = get_channel_layer()
    for row in rows:  # as the relay would deliver them, chunks and all
        await layer.group_send(
            session_group(session.id), {"type": "relay.event", "event": event_message(row)}
        )
    newer = await sync_to_async(services.timeline_event_add)(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="new"
    )
    messages = await receive_all(communicator, quiet_for=0.6)
    await communicator.disconnect()

    assert len(replay) == 3
    assert [m["event_id"] for m in messages if "event_id" in m] == [str(newer.id)]
    assert [m["type"] for m in messages] == ["timeline_event.created"]


async def test_an_event_on_both_groups_is_sent_once_per_channel(token):
    session, _ = await sync_to_async(running_session)()
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": f"session:{session.id}"})
    await receive_all(communicator)

    row = await sync_to_async(services.event_publish)(
        session_id=session.id,
        type=SessionEventType.REVIEW_STATUS,
        payload={"review_status": "needs_review", "actor": "system"},
    )
    # Not subscribed to "sessions": the relay's copy for that group never reaches us,
    # but a second copy of the same event is ignored anyway.
    layer = get_channel_layer()
    await layer.group_send(
        session_group(session.id), {"type": "relay.event", "event": event_message(row)}
    )
    messages = await receive_all(communicator)
    await communicator.disconnect()
    assert [(m["type"], m.get("db_event_id")) for m in messages] == [("review.status", row.id)]
    assert messages[0]["review_status"] == "needs_review"
    assert messages[0]["actor"] == "system"
    assert "assignee" not in messages[0]


# --- truncation ---------------------------------------------------------------------------


async def test_large_live_payloads_are_truncated_but_catchup_sends_them_whole(token):
    session, lease = await sync_to_async(running_session)()
    channel = f"session:{session.id}"
    communicator = await connected_client(token)
    await communicator.send_json_to({"action": "subscribe", "channel": channel})
    # The confirmation itself, not a quiet moment: a loaded machine can be quiet first.
    confirmed = json.loads(await communicator.receive_from(timeout=30))
    assert confirmed["type"] == "subscription.confirmed"
    await receive_all(communicator)

    def big():
        item = services.timeline_event_add(
            lease=lease,
            event_type=TimelineEventType.LLM_TOOL_CALL,
            status=TimelineEventStatus.STREAMING,
        )
        services.timeline_event_chunk(lease=lease, event=item, delta="x" * 8000)
        services.timeline_event_complete(lease=lease, event=item, content="y" * 8000)
        return item

    item = await sync_to_async(big)()
    live = await receive_all(communicator)
    assert [m["type"] for m in live] == [
        "timeline_event.created",
        "stream.chunk",
        "timeline_event.completed",
    ]
    created, chunk, completed = live
    assert "truncated" not in created
    assert chunk == {
        "type": "stream.chunk",
        "event_id": str(item.id),
        "session_id": str(session.id),
        "truncated": True,
    }
    assert completed == {
        "type": "timeline_event.completed",
        "event_id": str(item.id),
        "session_id": str(session.id),
        "truncated": True,
        "db_event_id": completed["db_event_id"],
    }

    await communicator.send_json_to(
        {"action": "catchup", "channel": channel, "last_event_id": created["db_event_id"]}
    )
    replay = await receive_all(communicator)
    await communicator.disconnect()
    assert [m["db_event_id"] for m in replay] == [completed["db_event_id"]]
    assert replay[0]["content"] == "y" * 8000


def test_the_cut_is_at_7900_bytes_as_go_measures_them():
    base = {"type": "stream.chunk", "session_id": "s", "event_id": "1", "delta": ""}
    overhead = len(protocol.encode(base))
    fits = {**base, "delta": "a" * (protocol.TRUNCATE_OVER - overhead)}
    assert json.loads(protocol.live_frame(fits)) == fits
    over = {**base, "delta": "a" * (protocol.TRUNCATE_OVER - overhead + 1)}
    assert json.loads(protocol.live_frame(over))["truncated"] is True
    # Go escapes <, > and & as \u003c…: six bytes each; "é" is two bytes of UTF-8.
    escaped = {**base, "delta": "<" * ((protocol.TRUNCATE_OVER - overhead) // 6 + 1)}
    assert json.loads(protocol.live_frame(escaped))["truncated"] is True
    accented = {**base, "delta": "é" * ((protocol.TRUNCATE_OVER - overhead) // 2 + 1)}
    assert json.loads(protocol.live_frame(accented))["truncated"] is True


# --- translation details ------------------------------------------------------------------


def test_completed_content_comes_from_the_row_when_the_payload_leaves_it_out(db):
    session, lease = running_session()
    item = services.timeline_event_add(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="from the row"
    )
    row = SessionEvent.objects.filter(session=session).latest("id")
    event = event_message(row)
    event["type"] = SessionEventType.TIMELINE_COMPLETED
    del event["payload"]["content"]
    payload = protocol.tarsy_payload(event)
    assert payload["content"] == "from the row"
    assert payload["event_id"] == str(item.id)


def test_tool_calls_and_sub_agents_get_tarsys_keys(db):
    _, lease = running_session()
    stage = services.stage_start(lease=lease, name="investigation", index=1)
    parent = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="Orchestrator",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    child = services.execution_start(
        lease=lease,
        stage=stage,
        agent_name="Worker",
        agent_index=2,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
        parent_execution=parent,
    )
    item = services.timeline_event_add(
        lease=lease,
        event_type=TimelineEventType.LLM_TOOL_CALL,
        status=TimelineEventStatus.STREAMING,
        execution=child,
        metadata={
            "tool_name": "kubernetes.get_pods",
            "server_name": "kubernetes",
            "arguments": {"namespace": "payments"},
        },
    )
    chunk = services.timeline_event_chunk(lease=lease, event=item, delta="pod-1")
    created = SessionEvent.objects.get(
        timeline_event_id=item.id, type=SessionEventType.TIMELINE_CREATED
    )
    payload = protocol.tarsy_payload(event_message(created))
    assert payload["parent_execution_id"] == str(parent.id)
    assert payload["metadata"] == {
        "tool_name": "get_pods",
        "server_name": "kubernetes",
        "arguments": '{"namespace":"payments"}',
        "tool_type": "mcp",
    }
    assert protocol.tarsy_payload(event_message(chunk))["parent_execution_id"] == str(parent.id)
    stage_event = SessionEvent.objects.filter(type=SessionEventType.STAGE_STATUS).first()
    assert protocol.tarsy_payload(event_message(stage_event))["stage_index"] == 2
    services.stage_finish(lease=lease, stage=stage, status=ExecutionStatus.COMPLETED)
    finished = SessionEvent.objects.filter(type=SessionEventType.STAGE_STATUS).latest("id")
    assert protocol.tarsy_payload(event_message(finished))["status"] == "completed"


def test_a_scoring_stage_says_it_started_but_reports_no_progress(db):
    from sessions.services import scoring as score_services

    session, lease = running_session()
    services.session_end(lease=lease, status="completed", final_analysis="done")
    score = services.score_request(session_id=session.id, triggered_by="alice")
    claimed = services.score_claim(score_id=score.id, worker_id="w")
    first = SessionEvent.objects.latest("id").id
    score_services.score_stage_start(
        lease=claimed, agent_name="ScoringAgent", llm_provider="p", llm_backend="b", model_name="m"
    )
    rows = SessionEvent.objects.filter(id__gt=first)
    started = [protocol.tarsy_payload(event_message(row)) for row in rows]
    assert [(m["type"], m.get("stage_name"), m.get("status")) for m in started if m] == [
        ("stage.status", "Reflection", "started"),
        ("execution.status", None, "active"),
        ("session.score_updated", None, None),
    ]
    assert [protocol.progress_payloads(event_message(row)) for row in rows] == [[], [], []]


def test_score_statuses_map_to_tarsys(db):
    session, _ = running_session()
    for ours, theirs in [
        ("pending", "in_progress"),
        ("in_progress", "in_progress"),
        ("completed", "completed"),
        ("timed_out", "failed"),
    ]:
        row = services.event_publish(
            session_id=session.id,
            type=SessionEventType.SCORE_UPDATED,
            payload={"score_id": "1", "scoring_status": ours, "total_score": None},
        )
        payload = protocol.tarsy_payload(event_message(row))
        assert set(payload) == {"type", "session_id", "timestamp", "scoring_status"}
        assert payload["scoring_status"] == theirs


# --- who may connect -------------------------------------------------------------------


async def test_a_logged_in_browser_may_connect(user):
    cookie = await sync_to_async(login_cookie)(user)
    communicator, connected = await open_socket(cookie=cookie, origin=f"http://{SITE}")
    assert connected
    assert (await communicator.receive_json_from(timeout=WAIT))["type"] == "connection.established"
    await communicator.disconnect()


async def test_without_credentials_the_handshake_is_refused(db):
    _, connected = await open_socket()
    assert not connected


async def test_a_revoked_or_wrong_token_is_refused_even_with_a_login(user, token):
    await sync_to_async(ApiToken.objects.all().delete)()
    cookie = await sync_to_async(login_cookie)(user)
    _, connected = await open_socket(token=token, cookie=cookie)
    assert not connected
    _, connected = await open_socket(token="tarsy_made-up")
    assert not connected


async def test_a_token_revoked_while_connected_closes_the_socket(token, settings):
    settings.TARSY_WS_ACCESS_CHECK_INTERVAL = 0.05
    communicator = await connected_client(token)
    await sync_to_async(ApiToken.objects.all().delete)()
    assert await communicator.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4401,
    }
    await communicator.disconnect()


async def test_another_origin_is_refused_even_with_a_token(token):
    _, connected = await open_socket(token=token, origin="http://evil.example")
    assert not connected
    communicator, connected = await open_socket(token=token, origin=f"http://{SITE}")
    assert connected
    await communicator.disconnect()


async def test_open_sockets_are_counted(token):
    gauge = WEBSOCKET_CONNECTIONS.labels(kind="api")
    before = gauge._value.get()
    communicator = await connected_client(token)
    assert gauge._value.get() == before + 1
    await communicator.disconnect()
    assert gauge._value.get() == before


@pytest.mark.parametrize(("peer", "allowed"), [("10.0.0.5", True), ("192.0.2.9", False)])
async def test_a_trusted_proxys_user_header_authenticates(db, settings, peer, allowed):
    settings.TARSY_TRUSTED_PROXIES = ["10.0.0.0/8"]
    communicator = WebsocketCommunicator(
        application, PATH, headers=[(b"host", SITE.encode()), (b"x-forwarded-user", b"jdoe")]
    )
    communicator.scope["client"] = (peer, 40000)
    connected, _ = await communicator.connect(timeout=3)
    assert connected is allowed
    if connected:
        assert (await communicator.receive_json_from(timeout=WAIT))[
            "type"
        ] == "connection.established"
        await communicator.disconnect()


async def test_a_row_that_cannot_be_translated_is_skipped_not_fatal(token):
    session, lease = await sync_to_async(running_session)()
    broken = await sync_to_async(services.event_publish)(
        session_id=session.id, type=SessionEventType.STAGE_STATUS, payload={"stage_id": 1}
    )
    item = await sync_to_async(services.timeline_event_add)(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="still here"
    )
    communicator = await connected_client(token)
    await communicator.send_json_to(
        {"action": "catchup", "channel": f"session:{session.id}", "last_event_id": 0}
    )
    messages = await receive_all(communicator)
    await communicator.send_json_to({"action": "ping"})
    assert await communicator.receive_json_from(timeout=WAIT) == {"type": "pong"}
    await communicator.disconnect()
    assert broken.id not in [m["db_event_id"] for m in messages]
    assert [m["event_id"] for m in messages] == [str(item.id)]


def test_sub_agent_tool_calls_have_tarsys_tool_type():
    metadata = protocol.timeline_metadata(
        TimelineEventType.LLM_TOOL_CALL,
        {
            "tool_name": "orchestrator.dispatch_agent",
            "server_name": "orchestrator",
            "arguments": {"name": "LogAnalyzer", "task": "Check logs"},
        },
    )
    assert (metadata["tool_name"], metadata["tool_type"]) == ("dispatch_agent", "orchestrator")


def test_provider_fallback_items_have_tarsys_keys():
    metadata = protocol.timeline_metadata(
        TimelineEventType.PROVIDER_FALLBACK,
        {
            "from_provider": "gemini", "from_backend": "google-native", "from_model": "pro",
            "to_provider": "claude", "to_backend": "langchain", "to_model": "sonnet",
            "error_code": "rate_limit", "skipped_incompatible": ["vllm"],
        },
    )  # fmt: skip
    assert metadata == {
        "original_provider": "gemini", "original_backend": "google-native",
        "original_model": "pro", "fallback_provider": "claude",
        "fallback_backend": "langchain", "fallback_model": "sonnet",
        "error_code": "rate_limit", "skipped_incompatible": ["vllm"],
    }  # fmt: skip
