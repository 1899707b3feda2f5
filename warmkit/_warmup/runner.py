"""The compile runner: parallel, cancellable on SIGINT, each compile bounded by a timeout.

``run(items, fn, ...)`` calls ``fn(item)`` for every item on up to ``workers``
threads and reports each outcome to callbacks, in completion order. Without a
timeout the calling thread runs items itself and more daemon threads join only
for slow items; with one, every item runs on a daemon thread that can be
abandoned.

Why not ``concurrent.futures.ThreadPoolExecutor``: its worker threads are
joined when the interpreter exits, so one compile that never returns would
keep the process from exiting, and on Ctrl-C its ``with`` block goes on
starting every queued compile before it lets go. Here:

* **Ctrl-C** (``KeyboardInterrupt`` in the calling thread): no queued item
  starts any more; every item not finished is reported ``on_unrun(item,
  CANCELLED)`` at once, and the ``KeyboardInterrupt`` propagates. The item the
  calling thread was running is stopped by the exception; compiles running on
  other threads are abandoned: they run on in their threads until they
  return (a thread cannot be killed), their results are dropped, and, the
  threads being daemons, they never delay the process's exit. The threads
  block SIGINT, so a compiler process they started is not killed by the
  Ctrl-C and fails nothing loudly (``shield_children_from_sigint``). (A backend's
  own compile pool may still wait for them when its scope closes: the Triton
  backend's does, so a warmup exits when the running compiles end.)
* **Timeout**: an item running longer than ``timeout`` seconds is reported
  ``on_timeout(item, seconds)`` and abandoned the same way; a fresh worker
  replaces its thread, so the other items keep their parallelism. A compile
  that runs in a worker *process* (``_workers``) is killed with it.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .._compat import settle_sysconfig

__all__ = ["ABANDONED", "CANCELLED", "NOT_ATTEMPTED", "exit_on_second_sigint", "run"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: The exit status of a process ended by a second Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130

#: Why an item did not run: the warmup was interrupted (SIGINT / Ctrl-C).
CANCELLED = "cancelled: the warmup was interrupted (SIGINT) before this key finished"
#: What became of a compile past its timeout on a thread (a thread cannot be killed).
ABANDONED = (
    "its thread was abandoned: the compile runs on until it returns and its result is discarded"
)
#: Why an item did not run: ``on_done`` asked to stop (fail-fast).
NOT_ATTEMPTED = "not attempted: an earlier key failed"

_POLL = 0.05  # seconds between timeout checks; also bounds how late a timeout is seen
#: How often the thread that starts workers asks again while items run one at a time (cache
#: hits): a cold key after them gets a thread beside it at most this late.
_IDLE_POLL = 0.01
#: A thread starts another item only when every running item has run this long.
SPILL_SECONDS = 0.002


def shield_children_from_sigint() -> None:
    """Block SIGINT in this (compile) thread; the main thread still gets Ctrl-C.

    A blocked signal mask is inherited by the threads this one starts and by
    the processes it spawns: a compiler child (Triton's ``ptxas``) is then not
    killed by the terminal's Ctrl-C, which goes to the whole process group.
    Killed, it would fail its compile, and Triton prints the whole PTX with
    "please share the reproducer" before warmkit's CANCELLED report, for a
    compile that was only abandoned. (SIGINT is handled in the main thread
    only, so blocking it here loses nothing.)
    """
    if hasattr(signal, "pthread_sigmask"):  # not on Windows
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def run(
    items: Sequence[T],
    fn: Callable[[T], Any],
    *,
    workers: int,
    timeout: float | None,
    on_done: Callable[[T, Any], bool],
    on_timeout: Callable[[T, float], None],
    on_unrun: Callable[[T, str], None],
    spill: Callable[[], float | None] | None = None,
) -> None:
    """Run ``fn`` over ``items``; every item ends in exactly one callback.

    Up to ``workers`` items run at once, but a thread starts another item only
    while every item running has run ``SPILL_SECONDS`` or more: slow work
    overlaps (a second compile starts ~2 ms after the first), cheap work
    (cache hits) runs one item at a time, without the threads fighting over
    the GIL. Threads are started the same way: one at first, another each
    time the running items have all run ``SPILL_SECONDS``.

    Without a ``timeout``, the first of them is the calling thread: cheap
    items never leave it. Handing them to a fresh thread cost more than the
    hand-off: on the 2-core box a thread newly on the other core ran TileLang's
    elaboration 1.6x slower for its first ~50 ms (the effect is gone with the
    process pinned to either core), so a warmup of cache hits paid that on every
    start. With a ``timeout`` every item runs on a daemon thread, so that one
    past it can be abandoned.

    The callbacks run one at a time (under one lock), in the thread that
    finished the item, or in the calling thread for timeouts and Ctrl-C.

    Args:
        items: what to run.
        fn: called once per item in a copy of the caller's context, in the
            calling thread or another one; it should not raise (an exception
            is re-raised here, and no further item starts).
        workers: at most this many items run at once.
        timeout: seconds one item may run; None = unbounded.
        on_done: its result; return True to stop starting further items (each
            is then reported ``on_unrun(item, NOT_ATTEMPTED)``).
        on_timeout: the item ran longer than ``timeout``; it was abandoned.
        on_unrun: the item will not run (``CANCELLED`` or ``NOT_ATTEMPTED``).
        spill: asked before an item makes room for another: how long the
            running items must have run first (None, the default: always
            ``SPILL_SECONDS``). It may answer None: one item at a time, the
            caller's word that the items are Python-bound (cache hits of a few
            ms, where a second thread only fights over the GIL).

    Raises:
        KeyboardInterrupt: after every unfinished item was reported cancelled.
    """
    if not items:
        return
    settle_sysconfig()  # the items' threads may read it first, at once (_compat's docstring)
    state = _Run(items, fn, on_done, on_timeout, on_unrun, spill or _spill_seconds)
    # One thread to start with; each other starts only once the running items are slow
    # (all have run SPILL_SECONDS): cheap items never pay for a second thread's wake-ups.
    idle = min(workers, len(items)) - 1
    try:
        if timeout is None:
            state.run_here(idle)
        else:
            state.start()
            state.supervise(idle, timeout)
    except KeyboardInterrupt:
        state.cancel()
        raise
    # `finished` is set by the last report(), before that item's callback has run (under
    # the lock): take the lock, so every callback has run and its error is seen here.
    with state.lock:
        error = state.error
    if error is not None:
        raise error


def _spill_seconds() -> float:
    return SPILL_SECONDS


class _Run(Generic[T]):
    """One ``run``: its queue, what runs since when, and which items were reported.

    Every method that says "holding the lock" is called with ``lock`` held; the
    callbacks run only there, so they run one at a time.
    """

    def __init__(
        self,
        items: Sequence[T],
        fn: Callable[[T], Any],
        on_done: Callable[[T, Any], bool],
        on_timeout: Callable[[T, float], None],
        on_unrun: Callable[[T, str], None],
        spill: Callable[[], float | None],
    ) -> None:
        self.items, self.fn, self.spill = items, fn, spill
        self.on_done, self.on_timeout, self.on_unrun = on_done, on_timeout, on_unrun
        self.jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(items)):
            self.jobs.put(i)
        self.lock = threading.Lock()  # serialises the callbacks; guards the state below
        self.cond = threading.Condition(self.lock)  # an item finished, or the run closed
        self.finished = threading.Event()
        self.reported = bytearray(len(items))  # 1 once the item's callback ran
        self.left = len(items)
        self.running: dict[int, float] = {}  # item -> when it started
        self.abandoned: set[int] = set()
        self.closed = False
        self.error: BaseException | None = None
        self.ctx = contextvars.copy_context()

    def report(self, i: int) -> None:  # holding the lock
        self.reported[i] = 1
        self.left -= 1
        if not self.left:
            self.finished.set()

    def close(self) -> None:  # holding the lock: nothing more is reported, no item starts
        self.closed = True
        self.finished.set()
        self.cond.notify_all()

    def drain(self, reason: str) -> None:  # holding the lock
        while True:
            try:
                i = self.jobs.get_nowait()
            except queue.Empty:
                return
            self.on_unrun(self.items[i], reason)  # then reported: a Ctrl-C between never loses it
            self.report(i)

    def take(self) -> int | None:  # holding the lock: the next item, or None to exit
        running = self.running
        while not self.closed:
            now = time.monotonic()
            after = None if not running else self.spill()
            if not running or (after is not None and now - max(running.values()) >= after):
                try:
                    i = self.jobs.get_nowait()
                except queue.Empty:
                    return None
                running[i] = now
                return i
            self.cond.wait(SPILL_SECONDS)
        return None

    def worker(self, here: bool = False) -> None:
        """Take items and run them until none is left (``here``: in the calling thread)."""
        if not here:
            shield_children_from_sigint()
        lock, items, fn, ctx = self.lock, self.items, self.fn, self.ctx
        with lock:
            i = self.take()
        while i is not None:
            try:
                result, ok = ctx.copy().run(fn, items[i]), True
            except BaseException as exc:  # handed to the calling thread
                if here and isinstance(exc, KeyboardInterrupt):
                    raise  # Ctrl-C: run() cancels; this item, still running, is reported with them
                result, ok = exc, False
            with lock:  # one hold: this item's callback, then the next item
                self.running.pop(i, None)
                if i in self.abandoned or self.closed:
                    return  # timed out (a replacement runs) or cancelled: dropped
                self.report(i)
                if not ok:
                    self.error = result
                    self.close()
                    return
                try:
                    if self.on_done(items[i], result):
                        self.drain(NOT_ATTEMPTED)
                except BaseException as exc:  # noqa: BLE001 -- handed to the calling thread
                    self.error = exc
                    self.close()
                    return
                i = self.take()

    def start(self) -> None:
        threading.Thread(target=self.worker, name="warmkit-compile", daemon=True).start()

    def run_here(self, idle: int) -> None:
        """Run items in the calling thread; a helper starts the ``idle`` others when items are slow."""
        if idle:
            threading.Thread(
                target=self.spiller, args=(idle,), name="warmkit-spill", daemon=True
            ).start()
        self.worker(here=True)
        while not self.finished.wait(_POLL):  # the other threads' last items
            pass

    def spiller(self, idle: int) -> None:
        """Start up to ``idle`` more worker threads, each once the running items are slow."""
        # Ctrl-C then goes to the calling thread, whose item it stops; the threads this one
        # starts inherit the mask (and block SIGINT themselves).
        shield_children_from_sigint()
        wait = SPILL_SECONDS
        while idle and not self.finished.wait(wait):
            idle, wait = self.spill_check(idle)

    def supervise(self, idle: int, timeout: float) -> None:
        """In the calling thread until every item is reported: start threads, time items out.

        ``idle``: threads not started yet. (Without a timeout, ``run_here`` runs instead.)
        """
        wait = SPILL_SECONDS if idle else _POLL
        while not self.finished.wait(wait):
            idle, wait = self.spill_check(idle) if idle else (0, _POLL)
            with self.lock:
                self.time_out(time.monotonic(), timeout)

    def spill_check(self, idle: int) -> tuple[int, float]:
        """Start a thread if every running item has run long enough: ``(idle, seconds to wait)``.

        Woken only when a thread may be due, not every SPILL_SECONDS: each wake-up
        takes the GIL from the item running. ``running`` is read without the lock, so
        cheap items never wait for this thread; the lock only to start a thread (a
        concurrent change of ``running``, possible without a GIL, only postpones the check).
        """
        after = self.spill()
        if after is None:
            return idle, _IDLE_POLL  # one item at a time for now; the answer may change
        now = time.monotonic()
        try:  # when the newest running item started
            newest = max(self.running.values(), default=None)
        except RuntimeError:  # dictionary changed size during iteration
            newest = None
        if newest is None:  # between items, or none taken yet
            return idle, SPILL_SECONDS
        if now - newest < after:
            return idle, min(newest + after - now, _POLL)
        with self.lock:
            if not self.closed and not self.jobs.empty():
                idle -= 1
                self.start()
        return idle, min(max(after, SPILL_SECONDS), _POLL)  # the new thread's item runs first

    def time_out(self, now: float, timeout: float) -> None:  # holding the lock
        late = [(j, now - t0) for j, t0 in self.running.items() if now - t0 > timeout]
        for j, secs in late:
            if self.closed:
                break
            self.abandoned.add(j)
            del self.running[j]
            self.on_timeout(self.items[j], secs)
            self.report(j)
            self.start()  # the abandoned thread's replacement

    def cancel(self) -> None:
        """Ctrl-C: no item starts any more, and every item not reported yet is ``CANCELLED``."""
        with self.lock:
            self.close()
            self.drain(CANCELLED)
            for i in range(len(self.items)):
                if not self.reported[i]:
                    self.on_unrun(self.items[i], CANCELLED)  # running now: abandoned
                    self.report(i)


def exit_on_second_sigint(before_exit: Callable[[], None]) -> Callable[[], None]:
    """After a first Ctrl-C: make a second one end the process at once; returns the undo.

    The first Ctrl-C cancels the warmup, which then stops its workers and
    writes its report. An operator who presses Ctrl-C again wants out now:
    the handler calls ``before_exit`` (kill the worker processes, so none is
    left behind) and ``os._exit`` (no atexit, no joins of threads that may
    never end). Only the main thread can set a handler; elsewhere this does
    nothing.

    Args:
        before_exit: run by the handler before the exit; its errors are ignored.

    Returns:
        A function that puts the previous handler back (the warmup's end).
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        try:
            logger.warning("warmkit: second Ctrl-C: exiting now")
            before_exit()
        finally:
            os._exit(EXIT_INTERRUPTED)

    previous = signal.signal(signal.SIGINT, handler)

    def restore() -> None:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)

    return restore
