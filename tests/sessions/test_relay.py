from __future__ import annotations

from sessions.models import SessionEvent
from sessions.relay import EventRelay


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def events(*ids: int) -> list[SessionEvent]:
    return [SessionEvent(id=event_id, type="x") for event_id in ids]


def relay_at(cursor: int, clock: Clock) -> EventRelay:
    """A relay that has been running: it has delivered up to ``cursor``."""
    relay = EventRelay(0.02, gap_grace=2.0, clock=clock)
    relay.cursor = cursor - 1
    relay.deliverable(events(cursor))
    relay.cursor = cursor
    return relay


def ids(delivered: list[SessionEvent]) -> list[int]:
    return [event.id for event in delivered]


def test_consecutive_events_go_out_at_once():
    assert ids(relay_at(10, Clock()).deliverable(events(11, 12, 13))) == [11, 12, 13]


def test_it_holds_events_behind_a_hole_until_it_fills():
    clock = Clock()
    relay = relay_at(10, clock)
    # 12 committed while 11 (another session's) is still in flight.
    assert ids(relay.deliverable(events(12))) == []
    clock.now += 0.5
    assert ids(relay.deliverable(events(11, 12))) == [11, 12]


def test_it_delivers_up_to_a_hole_in_the_middle():
    clock = Clock()
    assert ids(relay_at(10, clock).deliverable(events(11, 13))) == [11]


def test_a_hole_that_never_fills_is_skipped_after_the_grace():
    clock = Clock()
    relay = relay_at(10, clock)
    assert ids(relay.deliverable(events(12, 13))) == []
    clock.now += 2.5  # the transaction behind 11 rolled back
    assert ids(relay.deliverable(events(12, 13))) == [12, 13]


def test_a_hole_before_the_first_event_is_old_history():
    # Rows deleted before the relay started (purged stream chunks) leave a hole that no
    # transaction will fill.
    relay = EventRelay(0.02, gap_grace=2.0, clock=Clock())
    relay.cursor = 10
    assert ids(relay.deliverable(events(57, 58))) == [57, 58]


def test_without_grace_holes_are_ignored():
    relay = relay_at(10, Clock())
    relay.gap_grace = 0.0
    assert ids(relay.deliverable(events(12))) == [12]
