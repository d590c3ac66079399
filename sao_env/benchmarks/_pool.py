"""Run HTTP jobs on daemon threads and hand their results to the caller as each finishes.

``concurrent.futures`` joins its worker threads at exit and in ``shutdown``: a request blocked on
a hung server then holds a stopped command in a futex wait until SIGKILL. Here the caller's thread
only ever waits on a queue with a short timeout, so SIGINT/SIGTERM reach it at once; when the caller
stops (a signal, an error, or it stops iterating) every request in flight is ended (``_http.stop_all``)
and the threads, being daemons, never hold the process.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

from sao_env.benchmarks import _http

T = TypeVar("T")
R = TypeVar("R")

POLL_S = 0.2
"""How often the waiting thread wakes (signals are handled between waits)."""


def each_done(items: Sequence[T], work: Callable[[T], R], workers: int) -> Iterator[tuple[int, R]]:
    """``(index, work(items[index]))`` in the order the jobs finish, ``workers`` at a time.

    An exception raised by ``work`` is raised here (the other jobs are then stopped)."""
    _http.reset_stop()
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for index in range(len(items)):
        todo.put(index)
    done: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(max(1, min(workers, len(items)))):
        threading.Thread(target=_worker, args=(items, work, todo, done), daemon=True).start()
    finished = False
    try:
        for _ in range(len(items)):
            index, result, error = _next(done)
            if error is not None:
                raise error
            yield index, result
        finished = True
    finally:
        if not finished:
            _http.stop_all()


def _next(done: queue.SimpleQueue):
    while True:
        try:
            return done.get(timeout=POLL_S)
        except queue.Empty:
            continue


def _worker(items, work, todo: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
    while not _http.STOP.is_set():
        try:
            index = todo.get_nowait()
        except queue.Empty:
            return
        try:
            done.put((index, work(items[index]), None))
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            done.put((index, None, err))
