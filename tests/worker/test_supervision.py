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


def test_a_busy_worker_lets_an_idle_one_take_the_task():
    tasks = FORK.Queue()
    got = FORK.Queue()

    def read(name: str, pause: float) -> None:
        reader = TaskQueue(tasks, defer=lambda: pause)
        while reader.get() != "STOP":
            got.put(name)

    workers = [
        FORK.Process(target=read, args=("busy", 0.05), daemon=True),
        FORK.Process(target=read, args=("idle", 0.0), daemon=True),
    ]
    for worker in workers:
        worker.start()
    time.sleep(0.3)
    for n in range(10):
        tasks.put(n)
        time.sleep(0.1)  # both wait for the next one
    for _ in workers:
        tasks.put("STOP")
    for worker in workers:
        worker.join(timeout=10)
    readers = [got.get(timeout=1) for _ in range(10)]
    assert readers.count("idle") >= 9, readers
