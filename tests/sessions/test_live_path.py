"""The live path under load: streamed text written in batches, relays woken instead of
polling, each session's events in its own order, and the event log's expiry."""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connection, transaction
from django.utils import timezone

from agents.recorder import Recorder
from sessions import selectors, services, streams, wakeup
from sessions.models import (
    AlertSession,
    ChatMessageStatus,
    SessionEvent,
    SessionEventType,
    SessionStatus,
    TimelineEventStatus,
    TimelineEventType,
)
from sessions.services.events import event_publish
from tarsy_site.routing import websocket_urlpatterns
from tests.conftest import running_session

pytestmark = pytest.mark.django_db(transaction=True)
db = sync_to_async


async def a_recorder():
    session, lease = await db(running_session)()
    stage = await db(services.stage_start)(lease=lease, name="Investigation", index=1)
    execution = await db(services.execution_start)(
        lease=lease,
        stage=stage,
        agent_name="KubernetesAgent",
        agent_index=1,
        llm_backend="scripted",
        llm_provider="demo",
        model_name="demo",
    )
    return Recorder(session, execution, lease)


# --- streamed text: sent live, saved apart ---------------------------------------------


def sent(pieces) -> list[tuple[int, int, str]]:
    """What the recorder handed the relays (``live_pieces``), as (item, offset, text)."""
    return [(d.item_id, d.offset, d.text) for d in pieces]


def saved_rows(item) -> list[tuple[int, str]]:
    return [(p["offset"], p["delta"]) for p in chunk_payloads(item)]


def chunk_payloads(item) -> list[dict]:
    return list(
        SessionEvent.objects.filter(timeline_event_id=item.id, type="stream.chunk")
        .order_by("id")
        .values_list("payload", flat=True)
    )


def contiguous(pieces: list[tuple[int, str]]) -> str:
    text = ""
    for offset, piece in pieces:
        assert offset == len(text), pieces
        text += piece
    return text


async def test_a_burst_of_deltas_goes_live_in_two_pieces_and_is_saved_apart(live_pieces, settings):
    settings.TARSY_STREAM_FLUSH_INTERVAL = 0.3
    settings.TARSY_STREAM_SAVE_INTERVAL = 0.6
    recorder = await a_recorder()
    item = await recorder.start_item(TimelineEventType.LLM_RESPONSE)
    words = [f"w{n} " for n in range(40)]
    for word in words:
        await recorder.chunk(item, word)
    assert sent(live_pieces) == [(item.id, 0, "w0 ")]  # the first at once
    await asyncio.sleep(0.5)
    assert sent(live_pieces) == [
        (item.id, 0, "w0 "),
        (item.id, 3, "".join(words[1:])),
    ]  # the rest together
    # Saved beside the stream, with the same offsets: every word, in at most two rows.
    rows = await db(saved_rows)(item)
    assert contiguous(rows) == "".join(words)
    assert 1 <= len(rows) <= 2
    streamed = await db(selectors.streamed_text)([item.id], up_to_event_id=10**9)
    assert streamed[item.id] == "".join(words)


async def test_every_delta_can_go_live_alone_without_a_write_for_each(live_pieces, settings):
    settings.TARSY_STREAM_FLUSH_INTERVAL = 0
    settings.TARSY_STREAM_SAVE_INTERVAL = 0.5
    recorder = await a_recorder()
    item = await recorder.start_item(TimelineEventType.LLM_RESPONSE)
    words = [f"w{n} " for n in range(40)]
    for word in words:
        await recorder.chunk(item, word)
        await asyncio.sleep(0.005)  # a model's pace: the save runs beside the stream
    await recorder.flush()
    assert [text for _, _, text in sent(live_pieces)] == words
    assert contiguous([(offset, text) for _, offset, text in sent(live_pieces)]) == "".join(words)
    rows = await db(saved_rows)(item)
    assert contiguous(rows) == "".join(words)
    assert len(rows) <= 3  # once at the start, once per 0.5 s, once at the flush


async def test_completing_an_item_saves_no_chunk_its_completion_carries(live_pieces, settings):
    settings.TARSY_STREAM_FLUSH_INTERVAL = 0.3
    settings.TARSY_STREAM_SAVE_INTERVAL = 0.3
    recorder = await a_recorder()
    thinking = await recorder.start_item(TimelineEventType.LLM_THINKING)
    await recorder.chunk(thinking, "Check ")
    await recorder.chunk(thinking, "the pods.")
    # Another item starting first saves what the earlier one had gathered.
    answer = await recorder.start_item(TimelineEventType.LLM_RESPONSE)
    assert contiguous(await db(saved_rows)(thinking)) == "Check the pods."
    # Within the interval of that save: gathered, then not needed.
    await recorder.chunk(answer, "All ")
    await recorder.chunk(answer, "good.")
    await recorder.complete_item(answer, "All good.")
    await asyncio.sleep(0.5)
    assert await db(saved_rows)(answer) == []
    kinds = await db(
        lambda: list(
            SessionEvent.objects.filter(timeline_event_id=answer.id)
            .order_by("id")
            .values_list("type", flat=True)
        )
    )()
    assert kinds == ["timeline_event.created", "timeline_event.completed"]


async def test_a_lost_lease_found_by_a_save_stops_the_stream(live_pieces, settings):
    settings.TARSY_STREAM_FLUSH_INTERVAL = 0
    settings.TARSY_STREAM_SAVE_INTERVAL = 0.2
    recorder = await a_recorder()
    item = await recorder.start_item(TimelineEventType.LLM_RESPONSE)
    await recorder.chunk(item, "a")
    await asyncio.sleep(0.1)  # saved at once: the first after a quiet spell
    await recorder.chunk(item, "b")  # saved when the interval ends
    await db(AlertSession.objects.filter(id=recorder.session.id).update)(lease_token=None)
    await asyncio.sleep(0.4)  # the save finds the session gone
    with pytest.raises(services.LeaseLost):
        await recorder.chunk(item, "c")
    assert await db(saved_rows)(item) == [(0, "a")]
    assert [text for _, _, text in sent(live_pieces)] == [
        "a",
        "b",
    ]  # nothing after the lease was lost


# --- relays wake up ----------------------------------------------------------------------


async def connect(user, session_id) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/sessions/{session_id}/"
    )
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"action": "subscribe", "last_event_id": 0})
    return communicator


async def test_a_write_wakes_the_relay_long_before_its_safety_poll(user, settings):
    # SQLite: a datagram from the writer; PostgreSQL: NOTIFY. Either way, not the poll.
    settings.TARSY_RELAY_POLL_INTERVAL = 30
    session, lease = await db(running_session)()
    communicator = await connect(user, session.id)
    await asyncio.sleep(0.5)  # the relay has started and is waiting
    delays = []
    for n in range(5):
        started = time.monotonic()
        await db(services.timeline_event_add)(
            lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content=f"word{n}"
        )
        message = await communicator.receive_from(timeout=5)
        delays.append(time.monotonic() - started)
        assert f"word{n}" in message
    assert max(delays) < 2, delays
    await communicator.disconnect()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="datagram wake-ups are SQLite's")
async def test_a_relay_started_in_a_writing_process_is_woken_at_once(user, settings):
    # A writer remembers the relays' ports for a second. When a relay starts in the
    # writer's own process (a test's event loop, a restarted relay), the writer must not
    # keep nudging the old port: that cost a whole poll interval in CI.
    settings.TARSY_RELAY_POLL_INTERVAL = 30
    gone = wakeup.announce(9)  # an old relay of this process: port 9 (discard)
    assert gone is not None
    try:
        wakeup.nudge()  # a write just now: the writer remembers port 9 only
        session, lease = await db(running_session)()
        communicator = await connect(user, session.id)
        await asyncio.sleep(0.2)  # the relay has started and announced itself
        started = time.monotonic()
        await db(services.timeline_event_add)(
            lease=lease, event_type=TimelineEventType.LLM_RESPONSE, content="first"
        )
        message = await communicator.receive_from(timeout=5)
        assert "first" in message
        assert time.monotonic() - started < 2
        await communicator.disconnect()
    finally:
        wakeup.withdraw(gone)


# --- streamed text past the database ---------------------------------------------------


async def drain(communicator) -> str:
    messages = []
    while not await communicator.receive_nothing(timeout=0.3):
        messages.append(await communicator.receive_from(timeout=10))
    return "".join(messages)


async def test_streamed_text_reaches_pages_between_saves_and_a_reload_shows_it(user, settings):
    settings.TARSY_RELAY_POLL_INTERVAL = 30
    settings.TARSY_STREAM_FLUSH_INTERVAL = 0
    settings.TARSY_STREAM_SAVE_INTERVAL = 60
    recorder = await a_recorder()
    item = await recorder.start_item(TimelineEventType.LLM_RESPONSE)
    page = await connect(user, recorder.session.id)
    await drain(page)
    await recorder.chunk(item, "Pods <crash>")  # saved at once: the first after a pause
    assert "Pods &lt;crash&gt;" in await drain(page)
    await asyncio.sleep(0.3)
    await recorder.chunk(item, " looping")  # not saved for a minute
    started = time.monotonic()
    message = await page.receive_from(timeout=5)
    assert time.monotonic() - started < 2  # live, not the relay's 30 s poll
    assert message == f'<span id="stream-{item.id}" hx-swap-oob="beforeend"> looping</span>'
    assert await db(lambda: [p["delta"] for p in chunk_payloads(item)])() == ["Pods <crash>"]

    # A page loading now shows what the first one shows: the saved row and, from this
    # process's relay, what streamed since.
    reloaded = await connect(user, recorder.session.id)
    assert (
        f'<span id="stream-{item.id}" hx-swap-oob="innerHTML">Pods &lt;crash&gt; looping</span>'
        in await drain(reloaded)
    )
    await recorder.chunk(item, "!")
    for communicator in (page, reloaded):
        assert await drain(communicator) == (
            f'<span id="stream-{item.id}" hx-swap-oob="beforeend">!</span>'
        )
        await communicator.disconnect()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="datagrams are SQLite's transport")
async def test_a_datagram_not_signed_with_the_site_secret_puts_nothing_on_a_page(user, settings):
    settings.TARSY_RELAY_POLL_INTERVAL = 30
    recorder = await a_recorder()
    item = await recorder.start_item(TimelineEventType.LLM_RESPONSE)
    page = await connect(user, recorder.session.id)
    await drain(page)
    body = json.dumps([str(recorder.session.id), item.id, 0, "rm -rf / is the fix"]).encode()
    forged = [
        streams.DATAGRAM + bytes(32) + body,  # a wrong signature
        streams.DATAGRAM + body,  # none
        streams.DATAGRAM + hmac.new(b"guess", body, "sha256").digest() + body,
    ]
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for path in wakeup.relays_dir().iterdir():
        for datagram in forged:
            sender.sendto(datagram, ("127.0.0.1", int(path.name.partition("-")[2])))
    sender.close()
    assert await drain(page) == ""
    # A signed one is shown: the forged ones were refused for their signature.
    await db(streams.send)([streams.Delta(str(recorder.session.id), item.id, 0, "real")])
    assert "real" in await drain(page)
    await page.disconnect()


# --- each session's events in its own order (PostgreSQL) --------------------------------

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="ids commit out of order only on PostgreSQL"
)


def hold_open_transaction(session_id, started: threading.Event, release: threading.Event):
    """Writes an event of ``session_id`` and keeps its transaction open until released."""
    try:
        with transaction.atomic():
            # One the session page renders whatever it says (its Slack line).
            event_publish(session_id=session_id, type=SessionEventType.SLACK_STATUS, payload={})
            started.set()
            release.wait(10)
    finally:
        connection.close()


@postgres_only
async def test_an_open_transaction_of_one_session_does_not_hold_another_sessions_events(user):
    slow, _ = await db(running_session)(slack_message_fingerprint="payments")
    fast, fast_lease = await db(running_session)()
    slow_page = await connect(user, slow.id)
    fast_page = await connect(user, fast.id)
    started, release = threading.Event(), threading.Event()
    writer = threading.Thread(target=hold_open_transaction, args=(slow.id, started, release))
    writer.start()
    try:
        assert await asyncio.to_thread(started.wait, 5)
        began = time.monotonic()
        await db(services.timeline_event_add)(
            lease=fast_lease, event_type=TimelineEventType.LLM_RESPONSE, content="not held"
        )
        message = await fast_page.receive_from(timeout=5)
        assert "not held" in message
        assert time.monotonic() - began < 1.0  # no waiting for the other session's id
        assert await slow_page.receive_nothing(timeout=0.3)
    finally:
        release.set()
        await asyncio.to_thread(writer.join)
    # The slow one's event, with the smaller id, arrives once it commits.
    slow_ids = await db(
        lambda: list(SessionEvent.objects.filter(session=slow).values_list("id", flat=True))
    )()
    fast_ids = await db(
        lambda: list(SessionEvent.objects.filter(session=fast).values_list("id", flat=True))
    )()
    assert max(slow_ids) < max(fast_ids)
    assert 'id="slack-status"' in await slow_page.receive_from(timeout=5)
    for page in (slow_page, fast_page):
        await page.disconnect()


@postgres_only
def test_a_sessions_second_transaction_waits_for_its_first_so_ids_follow_commits():
    session, _ = running_session()
    started, release = threading.Event(), threading.Event()
    writer = threading.Thread(target=hold_open_transaction, args=(session.id, started, release))
    writer.start()
    assert started.wait(5)
    done = threading.Event()

    def second() -> None:
        try:
            event_publish(session_id=session.id, type=SessionEventType.STAGE_STATUS, payload={})
            done.set()
        finally:
            connection.close()

    other = threading.Thread(target=second)
    other.start()
    assert not done.wait(0.5)  # blocked by the first transaction's lock on the session
    release.set()
    writer.join()
    other.join(5)
    assert done.is_set()
    order = list(
        SessionEvent.objects.filter(session=session).order_by("id").values_list("type", flat=True)
    )
    assert order[-2:] == [SessionEventType.SLACK_STATUS, SessionEventType.STAGE_STATUS]


# --- the event log expires -------------------------------------------------------------


def age(queryset, seconds: float) -> None:
    queryset.update(created_at=timezone.now() - timedelta(seconds=seconds))


def ended_session_with_events() -> AlertSession:
    session, lease = running_session()
    item = services.timeline_event_add(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, status=TimelineEventStatus.STREAMING
    )
    services.timeline_event_chunk(lease=lease, event=item, delta="All ")
    services.timeline_event_complete(lease=lease, event=item, content="All good.")
    services.session_end(lease=lease, status=SessionStatus.COMPLETED)
    return session


def test_an_ended_sessions_events_expire_after_the_retention():
    session = ended_session_with_events()
    newest = SessionEvent.objects.filter(session=session).latest("id").id
    assert services.event_log_prune(retention_seconds=60) == 0  # too recent
    age(SessionEvent.objects.filter(session=session), 61)
    assert services.event_log_prune(retention_seconds=60) > 3
    assert not SessionEvent.objects.filter(session=session).exists()
    session.refresh_from_db()
    assert session.events_pruned_through == newest
    # The log's cursor does not go back, and a page of it resumes past what expired.
    assert selectors.latest_event_id() >= newest
    assert selectors.session_event_cursor(session.id) == newest
    assert selectors.events_pruned_after(newest - 1, session_id=session.id)
    assert not selectors.events_pruned_after(newest, session_id=session.id)


def test_a_running_session_loses_only_the_chunks_of_completed_items():
    session, lease = running_session()
    done = services.timeline_event_add(
        lease=lease, event_type=TimelineEventType.LLM_THINKING, status=TimelineEventStatus.STREAMING
    )
    services.timeline_event_chunk(lease=lease, event=done, delta="Thinking")
    services.timeline_event_complete(lease=lease, event=done, content="Thinking")
    open_item = services.timeline_event_add(
        lease=lease, event_type=TimelineEventType.LLM_RESPONSE, status=TimelineEventStatus.STREAMING
    )
    services.timeline_event_chunk(lease=lease, event=open_item, delta="Half an ans")
    age(SessionEvent.objects.filter(session=session), 120)
    assert services.event_log_prune(retention_seconds=60) == 1
    left = SessionEvent.objects.filter(session=session)
    assert not left.filter(timeline_event_id=done.id, type="stream.chunk").exists()
    assert left.filter(timeline_event_id=open_item.id, type="stream.chunk").exists()
    assert left.filter(type="timeline_event.completed").exists()  # it is still running
    session.refresh_from_db()
    assert session.events_pruned_through == 0


def test_an_ended_session_with_a_chat_answer_running_keeps_its_events():
    session = ended_session_with_events()
    chat = session.__class__.chat.related.related_model.objects.create(session=session)
    chat.messages.create(session=session, content="why?", status=ChatMessageStatus.RUNNING)
    age(SessionEvent.objects.filter(session=session), 120)
    services.event_log_prune(retention_seconds=60)
    # The completed item's chunk went; the rest stays while the answer runs.
    assert SessionEvent.objects.filter(session=session, transient=False).count() > 3
    session.refresh_from_db()
    assert session.events_pruned_through == 0


async def test_a_page_resuming_from_before_what_expired_reloads(user):
    session = await db(ended_session_with_events)()
    old_cursor = await db(selectors.session_event_cursor)(session.id)
    await db(age)(SessionEvent.objects.filter(session=session), 120)
    await db(services.event_log_prune)(retention_seconds=60)

    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/sessions/{session.id}/"
    )
    communicator.scope["user"] = user
    await communicator.connect()
    await communicator.send_json_to({"action": "subscribe", "last_event_id": old_cursor - 1})
    assert 'id="live-reload"' in await communicator.receive_from(timeout=2)
    await communicator.disconnect()

    # A fresh render's cursor is past it: no reload loop.
    fresh = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/sessions/{session.id}/")
    fresh.scope["user"] = user
    await fresh.connect()
    cursor = await db(selectors.session_event_cursor)(session.id)
    assert cursor == old_cursor
    await fresh.send_json_to({"action": "subscribe", "last_event_id": cursor})
    assert await fresh.receive_nothing(timeout=0.5)
    await fresh.disconnect()


async def test_the_list_resuming_from_before_what_expired_reloads(user):
    session = await db(ended_session_with_events)()
    cursor = await db(selectors.session_event_cursor)(session.id)
    await db(age)(SessionEvent.objects.filter(session=session), 120)
    await db(services.event_log_prune)(retention_seconds=60)
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/sessions/")
    communicator.scope["user"] = user
    await communicator.connect()
    await communicator.send_json_to({"action": "subscribe", "last_event_id": cursor - 1})
    assert 'id="live-reload"' in await communicator.receive_from(timeout=2)
    await communicator.disconnect()
