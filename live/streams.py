"""Streamed text in a web process: the relay's copy of what each item has streamed lately
(``Tails``), and what each socket has shown of it (``Shown``).

A stream's words arrive twice: live, straight from the worker (sessions/streams.py), and
a moment later saved, as stream chunk rows of the event log. Both carry the character
each piece starts at, so a socket sends only what extends what its page shows, whichever
copy comes first, and a piece that would leave a gap (its start not yet shown) waits for
the saved row that fills it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# What a relay keeps of one item's stream (characters), and how long it keeps an item
# that streams nothing more without completing (a worker that died mid-stream).
TAIL_LIMIT = 1_000_000
TAIL_IDLE = 600.0


@dataclass
class Tail:
    """The text an item streamed from character ``start`` on, without a gap."""

    session_id: str
    start: int
    parts: list[str] = field(default_factory=list)
    length: int = 0
    touched: float = 0.0

    @property
    def end(self) -> int:
        return self.start + self.length

    def text_from(self, offset: int) -> str | None:
        """The text from character ``offset`` on, or None when this tail starts later."""
        if not self.start <= offset <= self.end:
            return None
        text = "".join(self.parts)
        self.parts = [text]
        return text[offset - self.start :]


class Tails:
    """What each streaming item has streamed, as this relay saw it (live or saved)."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.items: dict[int, Tail] = {}

    def add(self, session_id: str, item_id: int, offset: int, text: str) -> None:
        tail = self.items.get(item_id)
        if tail is None or offset > tail.end:
            # New, or after a gap (a lost datagram, this relay started mid-stream): what
            # follows the gap is what a page may need next.
            tail = self.items[item_id] = Tail(session_id, offset)
        new = text[tail.end - offset :]
        if new:
            tail.parts.append(new)
            tail.length += len(new)
            if tail.length > TAIL_LIMIT:
                kept = "".join(tail.parts)[-TAIL_LIMIT // 2 :]
                tail.start = tail.end - len(kept)
                tail.parts, tail.length = [kept], len(kept)
        tail.touched = self.clock()

    def text_from(self, item_id: int, offset: int) -> str | None:
        tail = self.items.get(item_id)
        return None if tail is None else tail.text_from(offset)

    def complete(self, item_id: int) -> None:
        self.items.pop(item_id, None)

    def expire(self) -> None:
        cutoff = self.clock() - TAIL_IDLE
        for item_id in [i for i, t in self.items.items() if t.touched < cutoff]:
            del self.items[item_id]

    def after(self, item_id: int, saved: str) -> str:
        """An item's whole text so far: ``saved`` (its saved rows), and what this relay
        has seen stream after them."""
        more = self.text_from(item_id, len(saved))
        return saved + more if more else saved


class Shown:
    """What one socket has sent of each streaming item: the end offset of its text."""

    def __init__(self) -> None:
        self.ends: dict[int, int] = {}

    def start(self, item_id: int, length: int) -> None:
        """The page shows ``length`` characters of the item now (rendered, or replaced)."""
        self.ends[item_id] = length

    def knows(self, item_id: int) -> bool:
        return item_id in self.ends

    def forget(self, item_id: int) -> None:
        self.ends.pop(item_id, None)

    def extend(self, item_id: int, offset: int | None, text: str) -> str:
        """What of ``text`` (starting at ``offset``) the page does not show yet: "" for
        an item this socket does not follow, a repeat, or a piece after a gap."""
        end = self.ends.get(item_id)
        if end is None:
            return ""
        if offset is None:  # a row saved before pieces carried offsets
            offset = end
        if offset > end:
            return ""
        new = text[end - offset :]
        self.ends[item_id] = end + len(new)
        return new
