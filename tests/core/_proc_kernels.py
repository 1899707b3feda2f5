"""A backend whose keys compile in worker processes first, and a kernel whose compile misbehaves there.

``ProcKernel``'s key names what its compile does in a worker process: ``ok``,
``hang`` (never returns), ``sleep`` (returns after ``ProcKernel.SLEEP``
seconds), ``segv`` (the process crashes) or ``ignore_term`` (ignores SIGTERM,
then hangs). In the parent it always compiles at once: the point is the worker.
Each worker compile appends ``<pid> <mode> <monotonic time>`` to the file in
``$WARMKIT_TEST_PROC_LOG`` when it starts, so a test sees which processes ran
and when.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import time
from typing import Any

import attrs

import warmkit

from ._kernels import Executor, FakeBackend

LOG_ENV = "WARMKIT_TEST_PROC_LOG"


class ProcBackend(FakeBackend):
    """Backend ``fakeproc``: a ``FakeBackend`` that hands keys to worker processes first."""

    name = "fakeproc"
    par = 8

    def worker_target(self, target: str | None) -> str | None:
        return target or "cpu"

    def compile(self, kernel: Any, key: Any, target: str | None) -> Executor:
        return Executor(kernel.name, key, target)


class ProcKernel(warmkit.JitKernel["ProcKernel.CompileKey"]):
    name = "tests.ProcKernel"
    backend = "fakeproc"
    SLEEP = 3.0

    @attrs.frozen
    class CompileKey:
        mode: str
        n: int

    def dispatch(self, *, mode: str, n: int):
        return self.CompileKey(mode, n)

    def compile(self, key):  # in a worker process: _workers._compile_in_worker
        if multiprocessing.parent_process() is None:
            return Executor(self.name, key, None)
        path = os.environ.get(LOG_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{os.getpid()} {key.mode} {time.monotonic()}\n")
        if key.mode == "hang":
            while True:
                time.sleep(60)
        if key.mode == "sleep":
            time.sleep(self.SLEEP)
        if key.mode == "segv":
            ctypes.string_at(0)  # a compiler's crash: SIGSEGV
        if key.mode == "ignore_term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(60)
        return Executor(self.name, key, None)


def read_log(path: Any) -> list[tuple[int, str, float]]:
    """``(pid, mode, start)`` per worker compile that began."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return [(int(p), m, float(t)) for p, m, t in (line.split() for line in text.splitlines())]
