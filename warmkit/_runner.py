"""The compile runner: parallel, cancellable on SIGINT, each compile bounded by a timeout.

``run(items, fn, ...)`` calls ``fn(item)`` for every item on ``workers`` daemon
threads and reports each outcome to callbacks, in completion order.

Why not ``concurrent.futures.ThreadPoolExecutor``: its worker threads are
joined when the interpreter exits, so one compile that never returns would
keep the process from exiting, and on Ctrl-C its ``with`` block goes on
starting every queued compile before it lets go. Here:

* **Ctrl-C** (``KeyboardInterrupt`` in the calling thread): no queued item
  starts any more; every item not finished is reported ``on_unrun(item,
  CANCELLED)`` at once, and the ``KeyboardInterrupt`` propagates. Compiles
  already running are abandoned: they run on in their threads until they
  return (a thread cannot be killed), their results are dropped, and, the
  threads being daemons, they never delay the process's exit. (A backend's
  own compile pool may still wait for them when its scope closes: the Triton
  backend's does, so a warmup exits when the running compiles end.)
* **Timeout**: an item running longer than ``timeout`` seconds is reported
  ``on_timeout(item, seconds)`` and abandoned the same way; a fresh worker
  replaces its thread, so the other items keep their parallelism. With worker
  *processes* (not threads) an abandoned compile could be killed instead.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["CANCELLED", "NOT_ATTEMPTED", "run"]

T = TypeVar("T")

#: Why an item did not run: the warmup was interrupted (SIGINT / Ctrl-C).
CANCELLED = "cancelled: the warmup was interrupted (SIGINT) before this key finished"
#: Why an item did not run: ``on_done`` asked to stop (fail-fast).
NOT_ATTEMPTED = "not attempted: an earlier key failed"

_POLL = 0.05  # seconds between timeout checks; also bounds how late a timeout is seen


def run(
    items: Sequence[T],
    fn: Callable[[T], Any],
    *,
    workers: int,
    timeout: float | None,
    on_done: Callable[[T, Any], bool],
    on_timeout: Callable[[T, float], None],
    on_unrun: Callable[[T, str], None],
) -> None:
    """Run ``fn`` over ``items``; every item ends in exactly one callback.

    Args:
        items: what to run.
        fn: called once per item in a worker thread, in a copy of the caller's
            context; it should not raise (an exception is re-raised here).
        workers: threads running at once.
        timeout: seconds one item may run; None = unbounded.
        on_done: its result; return True to stop starting further items (each
            is then reported ``on_unrun(item, NOT_ATTEMPTED)``).
        on_timeout: the item ran longer than ``timeout``; it was abandoned.
        on_unrun: the item will not run (``CANCELLED`` or ``NOT_ATTEMPTED``).

    Raises:
        KeyboardInterrupt: after every unfinished item was reported cancelled.
    """
    jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[int, bool, Any]] = queue.SimpleQueue()
    running: dict[int, float] = {}
    lock = threading.Lock()
    ctx = contextvars.copy_context()
    for i in range(len(items)):
        jobs.put(i)

    def worker() -> None:
        while True:
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                return
            with lock:
                running[i] = time.monotonic()
            try:
                result, ok = ctx.copy().run(fn, items[i]), True
            except BaseException as exc:  # noqa: BLE001 -- handed to the calling thread
                result, ok = exc, False
            with lock:
                running.pop(i, None)
            done.put((i, ok, result))

    def start() -> None:
        threading.Thread(target=worker, name="warmkit-compile", daemon=True).start()

    def drain(reason: str) -> None:
        while True:
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                return
            outstanding.discard(i)
            on_unrun(items[i], reason)

    outstanding = set(range(len(items)))
    abandoned: set[int] = set()
    for _ in range(min(workers, len(items))):
        start()
    try:
        while outstanding:
            try:
                i, ok, result = done.get(timeout=_POLL)
            except queue.Empty:
                if timeout is not None:
                    now = time.monotonic()
                    with lock:
                        late = [(j, now - t0) for j, t0 in running.items() if now - t0 > timeout]
                    for j, secs in late:
                        if j in abandoned:
                            continue
                        abandoned.add(j)
                        outstanding.discard(j)
                        on_timeout(items[j], secs)
                        start()  # the abandoned thread's replacement
                continue
            if i in abandoned:
                continue  # a late result of a compile that timed out: dropped
            outstanding.discard(i)
            if not ok:
                raise result
            if on_done(items[i], result):
                drain(NOT_ATTEMPTED)
    except KeyboardInterrupt:
        drain(CANCELLED)
        for i in sorted(outstanding):
            on_unrun(items[i], CANCELLED)  # running now: abandoned
        raise
