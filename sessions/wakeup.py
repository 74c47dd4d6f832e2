"""Waking the event relays when the event log grows, instead of having them poll it.

On PostgreSQL the writer's transaction sends ``NOTIFY tarsy_events`` (delivered at
commit, to every web process on every host). SQLite has no such thing, and SQLite means
one host: each relay listens on a UDP port of 127.0.0.1 and announces it as a file under
``<TARSY_DATA_DIR>/relays/``; a writer sends one datagram to each after its commit. A
lost datagram costs latency only: the relays still poll the log slowly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

CHANNEL = "tarsy_events"
_REFRESH = 1.0  # seconds between re-reads of the relays directory

_sender: socket.socket | None = None
_targets: list[int] = []
_read_at = float("-inf")


def relays_dir() -> Path:
    return Path(settings.DATA_DIR) / "relays"


def announce(port: int) -> Path | None:
    """Publish this process's relay port; returns the file to pass to ``withdraw``."""
    path = relays_dir() / f"{os.getpid()}-{port}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    except OSError as exc:
        logger.warning("event relay: cannot announce its wake-up port (%s); it polls", exc)
        return None
    _forget_targets()
    return path


def withdraw(path: Path) -> None:
    """Remove a relay's announcement when it stops."""
    path.unlink(missing_ok=True)
    _forget_targets()


def _forget_targets() -> None:
    # Writers in this process look again at once: a relay that replaced another here
    # would otherwise miss the nudges of up to _REFRESH seconds, sent to the old port.
    # (Other processes' writers see the change within _REFRESH.)
    global _read_at
    _read_at = float("-inf")


def nudge() -> None:
    """After a commit that wrote events: wake the relays of this host."""
    send(b"!")


def send(data: bytes) -> None:
    """One datagram to each relay of this host: a wake-up, or streamed text
    (sessions/streams.py). Never blocks; a datagram that does not fit is dropped."""
    global _sender
    targets = _relays()
    if not targets:
        return
    if _sender is None:
        _sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _sender.setblocking(False)
    for port in targets:
        # A full buffer means that relay has reading to do anyway (and what streamed
        # text it misses, the next saved row brings).
        with contextlib.suppress(OSError):
            _sender.sendto(data, ("127.0.0.1", port))


def _relays() -> list[int]:
    global _targets, _read_at
    now = time.monotonic()
    if now - _read_at < _REFRESH:
        return _targets
    _read_at = now
    found = []
    try:
        entries = list(relays_dir().iterdir())
    except OSError:
        entries = []
    for path in entries:
        pid, _, port = path.name.partition("-")
        if not (pid.isdigit() and port.isdigit()):
            continue
        if not _alive(int(pid)):
            path.unlink(missing_ok=True)  # a relay killed before it could clean up
            continue
        found.append(int(port))
    _targets = found
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
