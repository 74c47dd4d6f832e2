"""A TARSy WebSocket client follows a real investigation over ``/api/v1/ws``.

Real daphne and qcluster, the scripted provider, a real WebSocket client speaking
TARSy's protocol with a bearer token. One socket stays connected throughout; another
drops mid-run and catches up with ``last_event_id``. Both must end up with exactly the
persistent events the event log holds: nothing missing, nothing twice.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
import websockets

from tests.e2e.harness import deployment

pytestmark = pytest.mark.e2e

WORDS = [f"w{n:03d}" for n in range(1, 121)]
TOOL_CALLS = 110  # a created and a completed event each: well over the catch-up cap of 200
PERSISTENT = (
    "timeline_event.created",
    "timeline_event.completed",
    "session.status",
    "stage.status",
    "review.status",
    "chat.created",
    "interaction.created",
)
CAP = 200


def stored_events(tarsy, session_id: str) -> list[tuple[int, str]]:
    """The session's events TARSy would have stored, from the database itself."""
    rows = tarsy.query(
        "SELECT id, type, payload FROM alert_sessions_sessionevent "
        "WHERE session_id = %s ORDER BY id",
        (uuid.UUID(session_id).hex,),
    )
    events = []
    for event_id, kind, payload in rows:
        payload = json.loads(payload) if isinstance(payload, str) else payload
        if kind not in PERSISTENT:
            continue
        if kind == "session.status" and payload["status"] in ("pending", "cancelling"):
            continue
        events.append((event_id, kind))
    return events


async def connect(url: str, token: str):
    socket = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"})
    hello = json.loads(await socket.recv())
    assert hello["type"] == "connection.established"
    return socket


async def receive_until(socket, done, seconds: float = 120) -> list[dict]:
    messages = []
    async with asyncio.timeout(seconds):
        while True:
            message = json.loads(await socket.recv())
            messages.append(message)
            if done(message, messages):
                return messages


async def receive_until_quiet(socket, quiet_for: float = 1.0) -> list[dict]:
    messages = []
    while True:
        try:
            async with asyncio.timeout(quiet_for):
                messages.append(json.loads(await socket.recv()))
        except TimeoutError:
            return messages


async def follow(tarsy, token: str) -> None:
    url = tarsy.base_url.replace("http://", "ws://") + "/api/v1/ws"
    watcher = await connect(url, token)
    await watcher.send(json.dumps({"action": "subscribe", "channel": "sessions"}))
    assert json.loads(await watcher.recv()) == {
        "type": "subscription.confirmed",
        "channel": "sessions",
    }
    status, body = tarsy.api(
        "POST", "/api/v1/alerts", token, {"data": "namespace: payments", "alert_type": "kubernetes"}
    )
    assert status == 202, body
    session_id = body["session_id"]
    channel = f"session:{session_id}"

    # The watcher stays to the end; the dropper leaves mid-stream and comes back.
    dropper = await connect(url, token)
    for socket in (watcher, dropper):
        await socket.send(json.dumps({"action": "subscribe", "channel": channel}))

    def session_done(_, messages):
        # The stored status on the session's channel, and the copy on "sessions".
        ends = [m for m in messages if m["type"] == "session.status" and m["status"] == "completed"]
        return len(ends) == 2

    watching = asyncio.create_task(receive_until(watcher, session_done))

    def streaming_for_a_while(_, messages):
        thinking = [
            m
            for m in messages
            if m["type"] == "timeline_event.created" and m.get("event_type") == "llm_thinking"
        ]
        if not thinking:
            return False
        chunks = [
            m
            for m in messages
            if m["type"] == "stream.chunk" and m["event_id"] == thinking[0]["event_id"]
        ]
        return len(chunks) >= 10

    before_drop = await receive_until(dropper, streaming_for_a_while, seconds=60)
    await dropper.close()
    assert before_drop[0] == {"type": "subscription.confirmed", "channel": channel}
    seen = [m for m in before_drop if "db_event_id" in m]
    last_seen = seen[-1]["db_event_id"]
    thinking = next(m for m in before_drop if m.get("event_type") == "llm_thinking")
    assert thinking["status"] == "streaming"
    assert thinking["content"] == ""
    chunks = [m for m in before_drop if m["type"] == "stream.chunk"]
    assert all("db_event_id" not in c for c in chunks)
    streamed = "".join(c["delta"] for c in chunks).split()  # a chunk may hold several
    assert streamed == WORDS[: len(streamed)]

    watched = await watching
    everything = stored_events(tarsy, session_id)
    all_ids = [event_id for event_id, _ in everything]

    # The watcher saw every persistent event exactly once, in order (replay, then live).
    on_session = [m for m in watched if m.get("session_id") == session_id and "db_event_id" in m]
    assert on_session[-1]["type"] == "session.status"
    assert [m["db_event_id"] for m in on_session] == [
        i for i in all_ids if i <= on_session[-1]["db_event_id"]
    ]
    kinds = [m["type"] for m in watched if m.get("session_id") == session_id]
    assert "stream.chunk" in kinds
    completed_thinking = next(
        m
        for m in on_session
        if m["type"] == "timeline_event.completed" and m["event_id"] == thinking["event_id"]
    )
    assert completed_thinking["content"].split() == WORDS
    # The session list's copies of the status carry no db_event_id.
    copies = [
        m["status"] for m in watched if m["type"] == "session.status" and "db_event_id" not in m
    ]
    assert copies == ["in_progress", "completed"]

    # The dropper comes back and asks for what it missed.
    missed = [event_id for event_id in all_ids if event_id > last_seen]
    assert len(missed) > CAP
    back = await connect(url, token)
    await back.send(
        json.dumps({"action": "catchup", "channel": channel, "last_event_id": last_seen})
    )
    first = await receive_until(back, lambda m, _: m["type"] == "catchup.overflow", seconds=30)
    assert first[-1] == {"type": "catchup.overflow", "channel": channel, "has_more": True}
    assert [m["db_event_id"] for m in first[:-1]] == missed[:CAP]
    await back.send(
        json.dumps({"action": "catchup", "channel": channel, "last_event_id": missed[CAP - 1]})
    )
    rest = await receive_until_quiet(back)
    assert [m["db_event_id"] for m in rest] == missed[CAP:]  # and no overflow this time
    caught_up = first[:-1] + rest
    assert not any(m.get("truncated") for m in caught_up)
    assert any(m["type"] == "session.status" and m["status"] == "completed" for m in caught_up)
    assert any(m["type"] == "timeline_event.completed" for m in caught_up)
    # Nothing the dropper had already seen, nothing twice: with what it saw, the whole log.
    assert sorted({m["db_event_id"] for m in seen + caught_up}) == all_ids
    assert len(seen) + len(caught_up) == len(all_ids)

    # A fresh subscription replays from the start, capped the same way.
    await back.send(json.dumps({"action": "subscribe", "channel": channel}))
    fresh = await receive_until(back, lambda m, _: m["type"] == "catchup.overflow", seconds=30)
    assert fresh[0] == {"type": "subscription.confirmed", "channel": channel}
    assert [m["db_event_id"] for m in fresh[1:-1]] == all_ids[:CAP]
    await back.close()
    await watcher.close()


def test_a_tarsy_client_follows_drops_and_catches_up(tmp_path):
    script = tmp_path / "long-script.json"
    script.write_text(
        json.dumps(
            {
                "chunk_delay": 0.03,
                "turns": [
                    {
                        "thinking": " ".join(WORDS),
                        "tool_calls": [
                            {"name": "kubernetes.get_pods", "arguments": {"namespace": "payments"}}
                        ]
                        * TOOL_CALLS,
                    },
                    {"text": "Done: payments-api crashes on a bad config."},
                ],
            }
        )
    )
    provider = {
        "name": "long",
        "type": "scripted",
        "model": "long",
        "options": {"script": str(script)},
        "is_default": True,
    }
    with deployment(tmp_path, provider=provider) as tarsy:
        token = tarsy.api_token()
        started = time.monotonic()
        try:
            asyncio.run(follow(tarsy, token))
        except BaseException:
            print(f"after {time.monotonic() - started:.1f} s")
            print(tarsy.log_tail())
            raise
