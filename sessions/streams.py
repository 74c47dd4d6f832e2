"""Streamed text on its way to the pages, past the database.

A model's words reach the relays (live/relay.py) straight from the worker, not through a
write transaction: under SQLite (one host) as a datagram to each relay's wake-up port
(sessions/wakeup.py), signed with the site's secret so that no other local process can
put words on a page; on PostgreSQL as a ``NOTIFY`` on ``tarsy_stream`` (delivered to
every relay on every host, and only to what holds the database's credentials).

Each piece says where it starts in its item's text (``offset``, in characters). The
database still keeps the whole text, saved every ``TARSY_STREAM_SAVE_INTERVAL`` as stream
chunk rows carrying their offsets too (agents/recorder.py): whatever a relay missed (a
lost datagram, a relay started mid-stream) the next saved row fills, and a page that
loads or reconnects is caught up from the rows and the relay's copy of what followed
them (docs/architecture.md#the-live-path). Offsets let every reader drop what it has
already shown, whichever way it came first.
"""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.utils.crypto import salted_hmac

from masking.bounded import load_json
from sessions import wakeup

logger = logging.getLogger(__name__)

CHANNEL = "tarsy_stream"
DATAGRAM = b"S"  # first byte of a datagram carrying a delta (a bare wake-up is b"!")
_MAC_SIZE = 32
# Characters per piece. A datagram to 127.0.0.1 carries up to 65,507 bytes, a NOTIFY
# payload under 8,000: the worst character takes 6 bytes in JSON ("\u001f").
DATAGRAM_CHARS = 8_000
NOTIFY_CHARS = 1_000
_MAX_BODY = 65_507


@dataclass(frozen=True)
class Delta:
    """``text`` streamed into timeline item ``item_id`` of ``session_id``, starting at
    character ``offset`` of the item's text."""

    session_id: str
    item_id: int
    offset: int
    text: str

    @property
    def end(self) -> int:
        return self.offset + len(self.text)

    def as_message(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "item_id": self.item_id,
            "offset": self.offset,
            "text": self.text,
        }


def pieces(delta: Delta, size: int) -> list[Delta]:
    """``delta`` cut into pieces of at most ``size`` characters."""
    if len(delta.text) <= size:
        return [delta]
    return [
        Delta(
            delta.session_id, delta.item_id, delta.offset + start, delta.text[start : start + size]
        )
        for start in range(0, len(delta.text), size)
    ]


def needs_database() -> bool:
    """Whether ``send`` uses the database connection (call it in the database thread)."""
    return connection.vendor == "postgresql"


def send(deltas: list[Delta]) -> None:
    """Hand ``deltas`` to every relay now. Best effort: what is lost, the next saved row
    brings. Under PostgreSQL this uses the calling thread's database connection (outside
    a transaction it is sent at once; inside one, at its commit)."""
    if connection.vendor == "postgresql":
        payloads = [_body(p).decode() for d in deltas for p in pieces(d, NOTIFY_CHARS)]
        if payloads:
            with connection.cursor() as cursor:
                cursor.executemany("SELECT pg_notify(%s, %s)", [(CHANNEL, p) for p in payloads])
        return
    for delta in deltas:
        for piece in pieces(delta, DATAGRAM_CHARS):
            body = _body(piece)
            wakeup.send(DATAGRAM + _mac(body) + body)


def send_on_own_connection(deltas: list[Delta]) -> None:
    """``send`` from a thread kept for it (agents/recorder.py): its connection is closed
    after an error, so that the next call opens a fresh one (a restarted server)."""
    try:
        send(deltas)
    except Exception:
        connection.close()
        raise


def decode_datagram(data: bytes) -> Delta | None:
    """The delta a datagram carries, or None for one not signed with this site's secret
    or not well formed."""
    if not data.startswith(DATAGRAM) or len(data) > 1 + _MAC_SIZE + _MAX_BODY:
        return None
    mac, body = data[1 : 1 + _MAC_SIZE], data[1 + _MAC_SIZE :]
    if not hmac.compare_digest(mac, _mac(body)):
        return None
    return decode(body)


def decode(body: str | bytes) -> Delta | None:
    """The delta of a ``NOTIFY`` payload (or a verified datagram's body); None for
    anything else."""
    try:
        value = load_json(body, what="a stream delta", max_depth=2, max_chars=_MAX_BODY)
    except (ValueError, TypeError):
        return None
    if not (isinstance(value, list) and len(value) == 4):
        return None
    session_id, item_id, offset, text = value
    if not (
        isinstance(session_id, str)
        and _is_uuid(session_id)
        and type(item_id) is int
        and type(offset) is int
        and item_id > 0
        and offset >= 0
        and isinstance(text, str)
    ):
        return None
    return Delta(session_id, item_id, offset, text)


def _is_uuid(text: str) -> bool:
    if len(text) > 64:
        return False
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _body(delta: Delta) -> bytes:
    return json.dumps(
        [delta.session_id, delta.item_id, delta.offset, delta.text],
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def _mac(body: bytes) -> bytes:
    return salted_hmac("tarsy.streams", body, algorithm="sha256").digest()
