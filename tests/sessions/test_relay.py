from __future__ import annotations

from live.relay import HOLE_GRACE, MAX_HOLES, EventRelay
from sessions.models import SessionEvent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def events(*ids: int) -> list[SessionEvent]:
    return [SessionEvent(id=event_id, type="x") for event_id in ids]


def relay_at(head: int, clock: Clock, *, hole_grace: float = HOLE_GRACE) -> EventRelay:
    """A relay that has been running: it has delivered everything up to ``head``."""
    relay = EventRelay(1.0, hole_grace=hole_grace, clock=clock)
    relay.head = head
    return relay


def ids(delivered: list[SessionEvent]) -> list[int]:
    return [event.id for event in delivered]


def test_consecutive_events_go_out_at_once():
    relay = relay_at(10, Clock())
    assert ids(relay.accept(events(11, 12, 13))) == [11, 12, 13]
    assert relay.holes == {}


def test_an_event_behind_a_hole_goes_out_at_once_and_the_hole_is_watched():
    # 12 (one session's) committed while 11 (another session's) is still in flight: 12
    # does not wait, and 11 goes out when it commits.
    clock = Clock()
    relay = relay_at(10, clock)
    assert ids(relay.accept(events(12))) == [12]
    assert list(relay.holes) == [11]
    clock.now += 5
    assert ids(relay.accept(events(11, 13))) == [11, 13]
    assert relay.holes == {}


def test_nothing_goes_out_twice():
    relay = relay_at(10, Clock())
    assert ids(relay.accept(events(11, 13))) == [11, 13]
    # The next read asks for the hole again and gets what is after the head.
    assert ids(relay.accept(events(13, 14))) == [14]
    assert ids(relay.accept(events(12))) == [12]
    assert ids(relay.accept(events(11, 12, 13, 14))) == []


def test_a_hole_that_never_fills_is_forgotten_after_the_grace():
    clock = Clock()
    relay = relay_at(10, clock)
    relay.accept(events(12))
    clock.now += HOLE_GRACE + 1  # the transaction behind 11 rolled back
    relay.accept(events(13))
    assert relay.holes == {}


def test_a_huge_jump_watches_a_bounded_number_of_holes():
    relay = relay_at(10, Clock())
    assert ids(relay.accept(events(10 + 50 * MAX_HOLES))) == [10 + 50 * MAX_HOLES]
    assert len(relay.holes) == MAX_HOLES


def test_without_grace_holes_are_not_watched():
    # SQLite: one writer at a time, so a hole is history (deleted rows), never in flight.
    relay = relay_at(10, Clock(), hole_grace=0)
    assert ids(relay.accept(events(12))) == [12]
    assert relay.holes == {}
    assert ids(relay.accept(events(11))) == []
