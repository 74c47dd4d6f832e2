"""How a worker reads the cluster's task queue (worker/supervision.py, ``TaskQueue``): a
worker killed while it waits for a task must not take the queue with it. The rest of
supervision is tested in tests/sessions/test_shutdown.py and test_leases.py."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time

from worker.supervision import TaskQueue

FORK = multiprocessing.get_context("fork")


def test_a_worker_killed_while_waiting_for_a_task_leaves_the_queue_to_the_others():
    tasks = FORK.Queue()
    waiting = FORK.Process(target=lambda: TaskQueue(tasks).get(), daemon=True)
    waiting.start()
    time.sleep(0.5)  # waiting for a task, as an idle worker does nearly all the time
    os.kill(waiting.pid, signal.SIGKILL)
    waiting.join(timeout=5)

    tasks.put("the next task")
    got = FORK.Queue()
    reader = FORK.Process(target=lambda: got.put(TaskQueue(tasks).get()), daemon=True)
    reader.start()
    try:
        # multiprocessing's own blocking get() holds the queue's lock while it waits: the
        # killed worker would have taken it along, and this would never come.
        assert got.get(timeout=5) == "the next task"
    finally:
        reader.kill()
        reader.join(timeout=5)


def test_each_task_is_read_by_one_worker():
    tasks = FORK.Queue()
    got = FORK.Queue()

    def read() -> None:
        reader = TaskQueue(tasks)
        while (task := reader.get()) != "STOP":
            got.put(task)

    workers = [FORK.Process(target=read, daemon=True) for _ in range(3)]
    for worker in workers:
        worker.start()
    for n in range(60):
        tasks.put(n)
    for _ in workers:
        tasks.put("STOP")
    for worker in workers:
        worker.join(timeout=10)
    read_once = []
    while True:
        try:
            read_once.append(got.get(timeout=0.5))
        except queue.Empty:
            break
    assert sorted(read_once) == list(range(60))
