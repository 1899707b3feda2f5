"""A backend group's compile worker processes, started at the group's first key not in the cache.

``warmup`` probes each key of a group that may use worker processes in this
process first (``Fleet.entry_key``, whose probe loads an entry it finds on
disk: ``docs/performance.md``). A warm key is loaded here; the pool
(``_workers.worker_pool``) starts, and takes the group's keys not known warm,
only at the first key known cold. So a warm restart never starts, nor waits
for, a pool.

A key whose entry a backend that names entries (``FleetCapable``) cannot name
without compiling (a Triton autotuned stack: one entry per config, plus its
tuned result) is no evidence either way: it is compiled in this process, and
only if that compile turns out cold (``saw_compiled``) does the pool start,
for the keys still to come.
Starting the pool at such a key cost flash-linear-attention's warm restart
(66 keys, most autotuned) about 2.9 s on an H100: 16 processes importing
torch beside the loads.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ColdPool"]


class ColdPool:
    """The worker processes of one backend group, started lazily (see the module docstring)."""

    def __init__(
        self,
        fleet: Any,
        backend: Any,
        target: str | None,
        items: list[Any],
        jobs: int,
        config: Any = None,
    ) -> None:
        self._fleet, self._backend, self._target = fleet, backend, target
        # what names the backend's entries (its FleetCapable), asked once, not per key
        self._entries = None if backend is None else fleet.entries_of(backend)
        self._items, self._jobs, self._config = items, jobs, config
        self._procs: Any = None
        self._decided = False
        self._lock = threading.Lock()
        # id() of the items this process loads (warm) or compiles itself (entry key unknown)
        self._here: set[int] = set()

    def probe(self, item: tuple[Any, Any]) -> tuple[tuple[str | None, Any] | None, str | None]:
        """``(probed, in_worker)``: a warm key is loaded here; a cold one is compiled by a worker first.

        ``probed`` is ``Fleet.compile``'s argument (None: the fleet probes
        itself); ``in_worker`` the worker's status for the key, None if none
        compiled it.

        Raises:
            WorkerDiedError: the worker process died on this key.
        """
        kernel, key = item
        if (self._decided and self._procs is None) or kernel._warmkit_in_memory(key, self._target):
            return None, None  # no pool for this group, or nothing to load: the fleet decides
        ek = self._fleet.entry_key(self._backend, kernel, key, self._target)
        files = None if ek is None or self._entries is None else self._entries.entry_files(ek)
        if files is not None:
            with self._lock:
                self._here.add(id(item))
            return (ek, files), None
        if ek is None and self._entries is not None:
            # This backend names its entries, but not this key's (an autotuned stack): unknown,
            # not cold, so compiled here unless a pool already runs. A backend that names none
            # (no FleetCapable) tells nothing warm apart: its first key starts the pool.
            with self._lock:
                procs = self._procs
                if procs is None:
                    self._here.add(id(item))
            if procs is None or self._loaded(kernel, key):
                return (None, None), None
            return None, procs.compile(item)
        procs = self._start()
        if procs is None or self._loaded(kernel, key):
            return (ek, None), None
        return None, procs.compile(item)  # the worker writes the entry; the fleet's probe loads it

    def saw_compiled(self) -> None:
        """A key compiled in this process was cold (its entry key was unknown): start the pool."""
        self._start()

    def cancel_queued(self) -> None:
        """Cancel what the pool was given and no key took (``_workers._Workers.cancel_queued``)."""
        if self._procs is not None:
            self._procs.cancel_queued()

    def abandon(self, item: tuple[Any, Any]) -> str:
        """A key past its compile_timeout: stop its worker (``_workers._Workers.abandon``)."""
        if self._procs is None:
            from .runner import ABANDONED

            return ABANDONED
        return self._procs.abandon(item)

    def stop(self) -> None:
        """Ctrl-C: stop the workers, and never start a pool after it (``_Workers.stop``)."""
        with self._lock:
            self._decided = True
        if self._procs is not None:
            self._procs.stop()

    def _loaded(self, kernel: Any, key: Any) -> bool:
        return self._target is None and key in kernel.executors  # nothing for a worker to do

    def _start(self) -> Any:
        with self._lock:
            if not self._decided:
                from .workers import worker_pool

                self._decided = True
                self._procs = worker_pool(
                    self._backend, self._target, len(self._items), self._jobs, self._config
                )
                if self._procs is not None:
                    rest = [it for it in self._items if id(it) not in self._here]
                    self._procs.queue_all(rest, self._loaded)
            return self._procs
