"""bin/run's start-up wait: exit 0 once daphne accepts connections on HOST:PORT and the
qcluster of QCLUSTER_PID has reported in (its first heartbeat, written after its workers
started); 1 as soon as either process has ended; 2 after TIMEOUT seconds.

Usage: _wait_ready.py HOST PORT DAPHNE_PID QCLUSTER_PID [TIMEOUT]
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that ended but was not reaped yet is a zombie: ended all the same.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def main(argv: list[str]) -> int:
    host, port, daphne_pid, qcluster_pid = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    timeout = float(argv[4]) if len(argv) > 4 else 300.0
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tarsy_site.settings")
    import django

    django.setup()
    from sessions.models import WorkerCluster

    me = socket.gethostname()
    deadline = time.monotonic() + timeout
    web_up = workers_up = False
    while time.monotonic() < deadline:
        for name, pid in (("daphne", daphne_pid), ("qcluster", qcluster_pid)):
            if not alive(pid):
                print(f"bin/run: {name} (pid {pid}) ended during start-up", file=sys.stderr)
                return 1
        web_up = web_up or listening(host, port)
        workers_up = workers_up or WorkerCluster.objects.filter(host=me, pid=qcluster_pid).exists()
        if web_up and workers_up:
            return 0
        time.sleep(0.25)
    waiting = [n for n, up in (("daphne", web_up), ("the workers", workers_up)) if not up]
    print(
        f"bin/run: still waiting for {' and '.join(waiting)} after {timeout:g} s", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
