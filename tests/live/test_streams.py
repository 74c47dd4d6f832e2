"""Streamed text in a web process (live/streams.py): what a relay keeps of each stream,
and what a socket has shown of it, whichever copy (live or saved) comes first."""

from __future__ import annotations

from live.streams import TAIL_IDLE, TAIL_LIMIT, Shown, Tails
from sessions import streams


def test_a_socket_sends_each_character_once_and_nothing_after_a_gap():
    shown = Shown()
    assert shown.extend(7, 0, "not followed") == ""
    shown.start(7, 5)  # the page shows "Hello"
    assert shown.extend(7, 5, ", wor") == ", wor"
    assert shown.extend(7, 0, "Hello, world") == "ld"  # the saved row: only what is new
    assert shown.extend(7, 7, "world") == ""  # a repeat
    assert shown.extend(7, 20, "!") == ""  # after a gap: the row that fills it will come
    assert shown.extend(7, 12, "!!") == "!!"
    assert shown.extend(7, None, "?") == "?"  # a row saved before offsets: appended
    shown.forget(7)
    assert shown.extend(7, 15, "late") == ""


def test_a_tail_keeps_the_text_without_a_gap_and_starts_again_after_one():
    tails = Tails()
    tails.add("s", 1, 0, "The pods ")
    tails.add("s", 1, 4, "pods are ")  # overlaps
    assert tails.text_from(1, 0) == "The pods are "
    assert tails.text_from(1, 9) == "are "
    assert tails.after(1, "The ") == "The pods are "
    assert tails.after(1, "The pods are crash") == "The pods are crash"  # saved is ahead
    tails.add("s", 1, 20, "looping")  # a gap: what follows it is what a page needs next
    assert tails.text_from(1, 0) is None
    assert tails.text_from(1, 20) == "looping"
    assert tails.after(1, "x" * 20) == "x" * 20 + "looping"
    tails.complete(1)
    assert tails.text_from(1, 20) is None


def test_tails_are_bounded_and_expire():
    now = [0.0]
    tails = Tails(clock=lambda: now[0])
    tails.add("s", 1, 0, "a" * (TAIL_LIMIT + 10))
    tail = tails.items[1]
    assert tail.end == TAIL_LIMIT + 10
    assert tail.length <= TAIL_LIMIT
    assert tails.text_from(1, 0) is None  # the start was let go
    assert tails.text_from(1, tail.end - 3) == "aaa"
    tails.add("s", 2, 0, "b")
    now[0] = TAIL_IDLE + 1
    tails.add("s", 2, 1, "c")
    tails.expire()
    assert set(tails.items) == {2}


def test_a_delta_survives_its_encodings_and_anything_else_is_refused():
    delta = streams.Delta(
        "9b2f0c1e-0000-4000-8000-000000000001", 12, 40, 'quotes " and \\ and ünïcode ✓ 🚀\n\x1f'
    )
    [piece] = streams.pieces(delta, streams.DATAGRAM_CHARS)
    body = streams._body(piece)
    assert streams.decode(body) == delta
    assert streams.decode(body.decode()) == delta  # a NOTIFY payload is text
    datagram = streams.DATAGRAM + streams._mac(body) + body
    assert streams.decode_datagram(datagram) == delta
    assert streams.decode_datagram(datagram.replace(b",12,", b",13,")) is None  # altered
    for bad in (
        b"",
        b"[",
        b"[[[[[[[[[[]]]]]]]]]]",
        b'["9b2f0c1e-0000-4000-8000-000000000001", 1, 0]',
        b'["9b2f0c1e-0000-4000-8000-000000000001", 0, 0, "x"]',
        b'["9b2f0c1e-0000-4000-8000-000000000001", 1, -1, "x"]',
        b'["9b2f0c1e-0000-4000-8000-000000000001", true, 0, "x"]',
        b'["9b2f0c1e-0000-4000-8000-000000000001", 1, 0.5, "x"]',
        b'[1, 1, 0, "x"]',
        b'["9b2f0c1e-0000-4000-8000-000000000001", 1, 0, ["x"]]',
        b'{"a": 1}',
        b"\xff\xfe",
        b'["' + b"s" * 100 + b'", 1, 0, "x"]',
        b'["not-a-session", 1, 0, "x"]',  # would end the /api/v1/ws socket it reached
    ):
        assert streams.decode(bad) is None, bad


def test_long_text_is_cut_into_pieces_that_fit_their_transport():
    delta = streams.Delta("s", 1, 7, "\x1f" * 2500)  # 6 bytes each in JSON
    pieces = streams.pieces(delta, streams.NOTIFY_CHARS)
    assert [p.offset for p in pieces] == [7, 1007, 2007]
    assert "".join(p.text for p in pieces) == delta.text
    assert all(len(streams._body(p)) < 8000 for p in pieces)  # PostgreSQL's NOTIFY limit
    big = streams.Delta("s", 1, 0, "\x1f" * 20_000)
    assert all(
        len(streams._body(p)) + 33 <= 65_507 for p in streams.pieces(big, streams.DATAGRAM_CHARS)
    )
