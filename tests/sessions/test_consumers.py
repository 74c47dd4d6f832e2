from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from live import relay
from live.relay import event_message, session_group
from sessions import services, streams
from sessions.models import AlertSession, SessionEvent, TimelineEventStatus, TimelineEventType
from sessions.services import Lease
from tarsy_site.routing import websocket_urlpatterns
from tests.conftest import running_session

# Every consumer test needs a real transaction: the consumer reads from other threads.
pytestmark = pytest.mark.django_db(transaction=True)

CURSOR = re.compile(r'data-last-event-id="(\d+)"')


def make_session() -> AlertSession:
    return running_session()[0]


def lease(session: AlertSession) -> Lease:
    return Lease(session.id, session.lease_token)


async def connect(user, path: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def receive_until_quiet(communicator, quiet_for: float = 0.5) -> list[str]:
    # receive_from() kills the application when it times out; receive_nothing() doesn't.
    messages = []
    while not await communicator.receive_nothing(timeout=quiet_for):
        messages.append(await communicator.receive_from(timeout=10))
    return messages


async def receive_exactly(communicator, count: int, quiet_for: float = 0.3) -> list[str]:
    """``count`` messages, however long a loaded machine takes to send them, then nothing
    more. Waiting for them by count rather than for a long quiet spell saves seconds."""
    messages = [await communicator.receive_from(timeout=10) for _ in range(count)]
    assert await communicator.receive_nothing(timeout=quiet_for), "more messages than expected"
    return messages


def ids(messages: list[str]) -> list[int]:
    return [int(CURSOR.search(m).group(1)) for m in messages]


async def test_it_replays_what_happened_after_the_cursor_in_order(user):
    session = await sync_to_async(make_session)()
    thinking = await sync_to_async(services.timeline_event_add)(
        lease=lease(session),
        event_type=TimelineEventType.LLM_THINKING,
        status=TimelineEventStatus.STREAMING,
    )
    cursor = await sync_to_async(lambda: SessionEvent.objects.latest("id").id)()
    await sync_to_async(services.timeline_event_chunk)(
        lease=lease(session), event=thinking, delta="Looking "
    )
    await sync_to_async(services.timeline_event_complete)(
        lease=lease(session), event=thinking, content="Looking <at> pods"
    )
    answer = await sync_to_async(services.timeline_event_add)(
        lease=lease(session), event_type=TimelineEventType.FINAL_ANALYSIS, content="Fine"
    )
    completed, created = await sync_to_async(
        lambda: list(
            SessionEvent.objects.filter(id__gt=cursor, transient=False).values_list("id", flat=True)
        )
    )()

    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": cursor})
    messages = await receive_until_quiet(communicator)
    await communicator.disconnect()

    # The chunk of an item that has completed since is not replayed: its completion
    # carries the whole text.
    assert ids(messages) == [completed, created]
    assert f'id="item-{thinking.id}"' in messages[0]
    assert 'data-status="completed"' in messages[0]
    assert "Looking &lt;at&gt; pods" in messages[0]  # escaped
    assert f'id="item-{answer.id}"' in messages[1]


async def test_a_streaming_item_is_sent_whole_after_the_replay_then_only_what_extends_it(user):
    session = await sync_to_async(make_session)()
    thinking = await sync_to_async(services.timeline_event_add)(
        lease=lease(session),
        event_type=TimelineEventType.LLM_THINKING,
        status=TimelineEventStatus.STREAMING,
    )
    cursor = await sync_to_async(lambda: SessionEvent.objects.latest("id").id)()
    for delta in ("Looking ", "<at> "):
        await sync_to_async(services.timeline_event_chunk)(
            lease=lease(session), event=thinking, delta=delta
        )

    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": cursor})
    [whole] = await receive_exactly(communicator, 1)
    assert whole == (
        f'<span id="stream-{thinking.id}" hx-swap-oob="innerHTML">Looking &lt;at&gt; </span>'
    )

    # Live pieces straight from a worker, and saved rows: each word is sent once,
    # whichever copy comes first; a piece after a gap waits for the row that fills it.
    async def live(offset: int, text: str) -> None:
        delta = {"session_id": str(session.id), "item_id": thinking.id, "offset": offset}
        await get_channel_layer().group_send(
            session_group(session.id), {"type": "relay.delta", "delta": {**delta, "text": text}}
        )

    await live(13, "pods")
    await live(10, "t> pods")  # overlaps
    await live(22, "!")  # after a gap
    await sync_to_async(services.timeline_event_chunk)(
        lease=lease(session), event=thinking, delta="pods and nodes"
    )
    messages = await receive_until_quiet(communicator)
    await communicator.disconnect()
    appended = [re.search(r'beforeend">(.*)</span>', m).group(1) for m in messages]
    assert appended == ["pods", " and nodes"]


async def test_text_that_streamed_before_its_item_reached_the_page_follows_the_item(user):
    session = await sync_to_async(make_session)()
    first = await sync_to_async(services.timeline_event_add)(
        lease=lease(session), event_type=TimelineEventType.LLM_THINKING, content="Thought"
    )
    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    await receive_until_quiet(communicator)
    # Live text for the next item reaches this process before the item's creation does.
    early = first.id + 1
    relay._relay.take_delta(streams.Delta(str(session.id), early, 0, "Checking <pods>"))
    item = await sync_to_async(services.timeline_event_add)(
        lease=lease(session),
        event_type=TimelineEventType.LLM_RESPONSE,
        status=TimelineEventStatus.STREAMING,
    )
    assert item.id == early
    [created] = await receive_exactly(communicator, 1)
    await communicator.disconnect()
    assert created.index(f'id="item-{item.id}"') < created.index(
        f'<span id="stream-{item.id}" hx-swap-oob="beforeend">Checking &lt;pods&gt;</span>'
    )


async def test_it_sends_live_events_after_the_replay_without_duplicates(user):
    session = await sync_to_async(make_session)()
    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    replayed = await receive_until_quiet(communicator)
    assert len(replayed) == 0  # session_create's event came from services; this one has none

    item = await sync_to_async(services.timeline_event_add)(
        lease=lease(session), event_type=TimelineEventType.FINAL_ANALYSIS, content="All good"
    )
    live = await receive_exactly(communicator, 1)
    assert f'id="item-{item.id}"' in live[0]
    assert "All good" in live[0]

    # The relay (or a second daphne's) delivering an old event again changes nothing.
    old = await sync_to_async(lambda: SessionEvent.objects.latest("id"))()
    await get_channel_layer().group_send(
        session_group(session.id), {"type": "relay.event", "event": event_message(old)}
    )
    assert await receive_until_quiet(communicator) == []
    await communicator.disconnect()


async def test_events_of_other_sessions_do_not_leak(user):
    mine, other = await sync_to_async(make_session)(), await sync_to_async(make_session)()
    communicator = await connect(user, f"/ws/sessions/{mine.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    await sync_to_async(services.timeline_event_add)(
        lease=lease(other), event_type=TimelineEventType.FINAL_ANALYSIS, content="not yours"
    )
    assert await receive_until_quiet(communicator, quiet_for=0.6) == []
    await communicator.disconnect()


async def test_a_long_absence_asks_the_page_to_reload(user, settings):
    settings.TARSY_CATCHUP_LIMIT = 2
    session = await sync_to_async(make_session)()
    for n in range(3):
        await sync_to_async(services.timeline_event_add)(
            lease=lease(session), event_type=TimelineEventType.LLM_RESPONSE, content=str(n)
        )
    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    message = await communicator.receive_from(timeout=1)
    assert 'id="live-reload"' in message
    closed = await communicator.receive_output(timeout=1)
    assert closed["type"] == "websocket.close"


async def test_the_session_list_follows_status_changes(user):
    communicator = await connect(user, "/ws/sessions/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    assert await receive_until_quiet(communicator) == []
    session = await sync_to_async(services.session_create)(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation", author="alice"
    )
    messages = await receive_exactly(communicator, 1)
    assert f'id="queued-{session.id}"' in messages[0]  # waiting: in the Queued panel
    assert "session-row-" not in messages[0]

    claim = await sync_to_async(services.session_claim)(session_id=session.id, worker_id="w")
    (message,) = await receive_exactly(communicator, 1)
    assert f'id="active-{session.id}"' in message
    assert f'id="queued-{session.id}"' not in message

    await sync_to_async(services.session_end)(lease=claim.lease, status="completed")
    (message,) = await receive_exactly(communicator, 1)
    assert f'id="active-{session.id}"' not in message
    # Ended: the history section again, its row at the top and its count up.
    assert '<section id="history" aria-labelledby="history-title" hx-swap-oob="true">' in message
    assert f'id="session-row-{session.id}"' in message
    assert re.search(r'id="history-count">\s*1 session<', message)
    assert 'data-status="completed"' in message
    await communicator.disconnect()


async def test_a_filtered_session_list_gets_only_the_rows_it_shows(user):
    failed_only = await connect(user, "/ws/sessions/?status=failed")
    by_alice_page_2 = await connect(user, "/ws/sessions/?author=alice&page=2")
    for communicator in (failed_only, by_alice_page_2):
        await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    session = await sync_to_async(services.session_create)(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation", author="alice"
    )
    claim = await sync_to_async(services.session_claim)(session_id=session.id, worker_id="w")
    await sync_to_async(services.session_end)(lease=claim.lease, status="completed")

    messages = await receive_exactly(failed_only, 3)  # queued, running, ended: the panels
    assert not any("session-row-" in m for m in messages)  # but it did not fail
    *_, ended = await receive_exactly(by_alice_page_2, 3)
    # It matches, but page 2 has no place for it: only a row already shown is updated.
    assert f'id="session-row-{session.id}"' in ended
    assert "data-upsert-into" not in ended
    for communicator in (failed_only, by_alice_page_2):
        await communicator.disconnect()


@pytest.mark.parametrize(
    "junk",
    ["[" * 1_000_000, '{"action": "subscribe", "last_event_id": 1e999}', "x" * 10_000],
)
async def test_a_frame_that_is_not_a_small_json_message_gets_an_error(user, junk):
    communicator = await connect(user, f"/ws/sessions/{(await sync_to_async(make_session)()).id}/")
    await communicator.send_to(text_data=junk)
    assert await communicator.receive_json_from(timeout=10) == {
        "error": "expected JSON with 'action'"
    }
    await communicator.disconnect()


async def test_anonymous_users_are_refused():
    session = await sync_to_async(make_session)()
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/sessions/{session.id}/"
    )
    communicator.scope["user"] = AnonymousUser()
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4401


async def test_an_unknown_session_is_refused(user):
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), "/ws/sessions/00000000-0000-0000-0000-000000000000/"
    )
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4404


async def test_stages_and_agents_arrive_as_sections_cards_and_header_updates(user):
    session = await sync_to_async(make_session)()
    lease = Lease(session.id, session.lease_token)
    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    assert await receive_until_quiet(communicator) == []

    stage = await sync_to_async(services.stage_start)(
        lease=lease,
        name="investigation",
        index=0,
        parallel_type="multi_agent",
        expected_agent_count=2,
    )
    execution = await sync_to_async(services.execution_start)(
        lease=lease,
        stage=stage,
        agent_name="LogAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="p",
        model_name="m",
    )
    item = await sync_to_async(services.timeline_event_add)(
        lease=lease, execution=execution, event_type=TimelineEventType.LLM_RESPONSE, content="hi"
    )
    await sync_to_async(services.execution_finish)(
        lease=lease, execution=execution, status="completed", final_analysis="done"
    )
    new_stage, new_card, new_item, card_header = await receive_exactly(communicator, 4)
    await communicator.disconnect()

    assert f'id="stage-{stage.id}"' in new_stage
    assert 'data-upsert-into="#stages"' in new_stage
    assert "2 agents in parallel" in new_stage
    assert f'id="execution-{execution.id}"' in new_card
    assert f'data-upsert-into="#stage-{stage.id}-executions"' in new_card
    assert f'data-upsert-into="#execution-{execution.id}-items"' in new_item
    assert f'id="item-{item.id}"' in new_item
    # A finished agent updates its header only: its items stay where they are.
    assert f'id="execution-{execution.id}-header"' in card_header
    assert f'id="execution-{execution.id}-items"' not in card_header
    assert 'data-status="completed"' in card_header


async def test_the_header_follows_stage_progress_and_the_token_meter(user):
    session, session_lease = await sync_to_async(running_session)(
        chain_id="kubernetes-investigation"
    )
    communicator = await connect(user, f"/ws/sessions/{session.id}/")
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    await receive_until_quiet(communicator)

    stage = await sync_to_async(services.stage_start)(
        lease=session_lease, name="Investigation", index=0
    )
    messages = await receive_until_quiet(communicator)
    progress = [m for m in messages if 'id="stage-progress"' in m]
    assert len(progress) == 1
    assert "stage 1 of" in progress[0]

    execution = await sync_to_async(services.execution_start)(
        lease=session_lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    item = await sync_to_async(services.timeline_event_add)(
        lease=session_lease,
        event_type=TimelineEventType.LLM_RESPONSE,
        status=TimelineEventStatus.STREAMING,
    )
    await sync_to_async(services.llm_interaction_create)(
        lease=session_lease,
        execution=execution,
        provider="demo",
        backend="scripted",
        input_tokens=120,
        output_tokens=30,
        total_tokens=150,
    )
    await receive_until_quiet(communicator)
    await sync_to_async(services.timeline_event_complete)(
        lease=session_lease, event=item, content="done"
    )
    messages = await receive_until_quiet(communicator)
    meter = [m for m in messages if 'id="session-usage"' in m]
    assert len(meter) == 1
    assert "1 LLM call, 120 in / 30 out tokens" in meter[0]
    await communicator.disconnect()


async def test_the_panels_are_rendered_once_per_event_for_every_list_socket(user, monkeypatch):
    from sessions import selectors

    calls = []
    real = selectors.session_panels
    monkeypatch.setattr(selectors, "session_panels", lambda: calls.append(1) or real())
    sockets = [await connect(user, "/ws/sessions/") for _ in range(3)]
    for communicator in sockets:
        await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    session = await sync_to_async(services.session_create)(
        alert_type="kubernetes", alert_data="d", chain_id="kubernetes-investigation", author="a"
    )
    for communicator in sockets:
        (message,) = await receive_exactly(communicator, 1)
        assert f'id="queued-{session.id}"' in message
        await communicator.disconnect()
    assert len(calls) == 1


async def test_the_session_list_rows_follow_reviews_and_scores(user):
    session, claim = await sync_to_async(running_session)()
    await sync_to_async(services.session_end)(lease=claim, status="completed")
    communicator = await connect(user, "/ws/sessions/")
    cursor = await sync_to_async(lambda: SessionEvent.objects.latest("id").id)()
    await communicator.send_json_to({"action": "subscribe", "last_event_id": cursor})

    await sync_to_async(services.review_apply)(
        session_id=session.id, actor="bob", change=services.ReviewChange("claim")
    )
    (message,) = await receive_exactly(communicator, 1)
    assert f'id="session-row-{session.id}"' in message
    assert "data-upsert-into" not in message  # only a row the page shows
    assert "bob" in message

    await sync_to_async(services.score_request)(session_id=session.id, triggered_by="bob")
    (message,) = await receive_exactly(communicator, 1)
    assert f'id="session-row-{session.id}"' in message
    assert "scoring" in message
    await communicator.disconnect()
