"""Compile worker processes: cold compiles that scale with cores past the GIL.

Threads stop scaling at about 3x: a compiler's frontend and the Python glue
around its passes hold the GIL. A backend that can compile ahead of time into
a cache shared by processes (``ProcessCompiles``) lets warmup hand each key to
a worker process first: the worker compiles it for the backend's
``worker_target`` into the shared cache, then the parent's own compile of the
key is a cache hit (it loads the result, builds what the device needs, and
reports the key).

* Workers are spawned (never forked: the parent may hold a CUDA context and
  threads) and reused: ``warmkit.prepare()`` (``_prepare``) starts them early,
  so their imports (the DSL, the kernels' modules) overlap with the engine's
  startup instead of the warmup.
* A worker that dies (a crash in a compiler, an OOM kill) fails that key only,
  with the exit code in its error; the pool replaces the worker (``pebble``).
  A worker that raises is no failure by itself: the parent compiles the key
  in-process and reports what that does.
* A key past ``compile_timeout`` has its future cancelled: pebble stops that
  worker (SIGTERM, then SIGKILL after its 3 s grace) and replaces it; the key
  fails. On Ctrl-C the warmup calls :func:`stop_now`: no queued key starts,
  every worker gets SIGTERM and, ``TERM_GRACE`` seconds later, SIGKILL, and
  the threads waiting on them return at once. No worker outlives the process:
  :func:`shutdown` (at exit) stops them the same way, never waiting for a
  compile that may never end.
* Processes are used when they pay: ``jobs >= 4`` and at least two keys per
  job. Two keys on two cores stay on threads, and so do a few keys behind a
  started pool: its workers may still be importing torch (the demo's 4 keys
  waited 4 s for 16 of them on the H200 host).
  ``WARMKIT_COMPILE_PROCESSES`` = ``auto`` (default), ``on`` or ``off``.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import importlib.util
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .. import _envs
from .._exceptions import WorkerDiedError
from .._plugin.components import capability, component
from .._plugin.contract import Prepares, _Capability, reports_cache_hit, target_scope

__all__ = [
    "PrimesWorkers",
    "ProcessCompiles",
    "interrupted",
    "kill_now",
    "prepare_workers",
    "shutdown",
    "start_workers",
    "stop_now",
    "terminate",
    "worker_pool",
]

logger = logging.getLogger(__name__)

#: Auto mode uses processes from this many parallel jobs on.
MIN_JOBS = 4
#: ... and when there are at least this many keys per job.
MIN_KEYS_PER_JOB = 2

#: Seconds a worker asked to stop (SIGTERM) has before it is killed (SIGKILL).
TERM_GRACE = 0.5

#: pebble's name for its worker processes (pebble.pool.process.WORKERS_NAME)
_WORKER_NAME = "pebble_pool_worker"

_lock = threading.Lock()
_pool: Any = None
#: Pools a larger one replaced (start_workers): closed, stopped by shutdown() if still running.
_retired: list[Any] = []
_pool_size = 0
_atexit_registered = False


@component("runtime")
@runtime_checkable
class ProcessCompiles(_Capability, Protocol):
    """A backend whose ahead-of-time compiles in another process are hits for its own compile."""

    def worker_target(self, target: str | None) -> str | None:
        """The target a worker compiles for so that this process's compile for ``target`` hits.

        None when that is not possible now (no shared cache, a redirected cache).
        """
        ...


#: In a worker: wall-clock times of its start (the initializer's imports), for the parent's log.
_started: tuple[float, float] = (0.0, 0.0)


def _initializer(modules: list[str]) -> None:
    global _started
    start = time.time()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 -- the compile names what is missing
            logger.debug("compile worker: import %s failed: %s", name, exc)
    _started = (start, time.time())


_classes: dict[str, type] = {}


@component("runtime")
@runtime_checkable
class PrimesWorkers(_Capability, Protocol):
    """Optional, with ``ProcessCompiles``: pay in a fresh worker what its first compile would pay."""

    def prime_worker(self, target: str) -> None:
        """In a worker process, before any key: e.g. one throwaway compile for ``target``.

        It must write nothing a warmup reads (no entry in the shared cache).
        """
        ...


def _adopt(env: dict[str, str]) -> None:
    """Take the parent's environment now: a worker started earlier must use the cache
    directory (``TRITON_CACHE_DIR`` ...) and settings the parent uses today."""
    if env != os.environ:
        for name in set(os.environ) - set(env):
            del os.environ[name]
        os.environ.update(env)


def _prepare_in_worker(
    backend_name: str, target: str, env: dict[str, str]
) -> tuple[int, bool, tuple[float, float, float, float]]:
    """In the worker: the backend's one-time setup (``Prepares``, ``PrimesWorkers``) for its target.

    Returns:
        ``(pid, whether the backend had a setup to run, times)``: the
        wall-clock start and end of the worker's imports, then of this setup.
    """
    from .._plugin.discovery import get_backend

    start = time.time()
    _adopt(env)
    backend = get_backend(backend_name)
    ran = False
    setup = capability(backend, Prepares)
    if setup is not None:
        setup.prepare(target)
        ran = True
    primer = capability(backend, PrimesWorkers)
    if primer is not None:
        primer.prime_worker(target)
        ran = True
    return os.getpid(), ran, (*_started, start, time.time())


def _compile_in_worker(
    ref: str, key_blob: bytes, target: str, env: dict[str, str]
) -> tuple[str, int, float, float]:
    """In the worker: compile one key for ``target``.

    ``env`` is the parent's environment now (``_adopt``).

    Returns:
        ``(compiled or cached, the worker's pid, start, end)``: wall-clock
        times, for the parent's debug log (which worker ran what, when).
    """
    from .._plugin.discovery import load_kernel

    start = time.time()
    _adopt(env)

    cls = _classes.get(ref)
    if cls is None:
        cls = _classes[ref] = load_kernel(ref)
    key = pickle.loads(key_blob)  # our own parent's key
    # Never from this process's memory: the point is the entry in the shared cache,
    # whose directory may have changed since this worker compiled the key last.
    with target_scope(target):
        executor = cls().compile(key)
    hit = reports_cache_hit(executor)
    return "cached" if hit else "compiled", os.getpid(), start, time.time()


def _ping() -> int:
    return os.getpid()


def _default_modules() -> list[str]:
    return [m for m in ("torch", "triton") if importlib.util.find_spec(m) is not None]


class _WorkerProcess(multiprocessing.context.SpawnProcess):
    """A compile worker: ``warmkit run``/``record``'s startup hook skips it.

    A spawned worker inherits the hook's ``PYTHONPATH`` and ``WARMKIT_MANIFEST``;
    without this mark each worker warmed the whole manifest up again, with
    worker processes of its own (a 66-key replay on the GPU host never ended).
    The hook tells it from the user's own spawned processes (which it does warm
    up) by this attribute, once the child has unpickled it (``_startup``).
    """

    warmkit_compile_worker = True


class _WorkerContext(multiprocessing.context.SpawnContext):
    Process = _WorkerProcess


_CONTEXT = _WorkerContext()


def start_workers(jobs: int | None = None, modules: list[str] | None = None) -> int:
    """Start the compile worker processes now, in the background; returns how many.

    ``warmkit.prepare()`` calls it early (before the engine is built): the
    workers import the DSL meanwhile, so a later ``warmkit.warmup`` finds them
    ready. Idempotent.

    Args:
        jobs: how many workers; default ``WARMKIT_JOBS``, else the number of CPUs.
        modules: what each worker imports at start; default torch and Triton if installed.
    """
    global _pool, _pool_size, _atexit_registered
    size = jobs or _envs.get("WARMKIT_JOBS") or os.cpu_count() or 1
    from pebble import ProcessPool

    with _lock:
        if _pool is not None and _pool_size >= size:
            return _pool_size
        if _pool is not None:
            _pool.close()  # it ends once its running tasks end ...
            _retired.append(_pool)  # ... or at shutdown(), whatever they do
        _pool = ProcessPool(
            max_workers=size,
            initializer=_initializer,
            initargs=(modules if modules is not None else _default_modules(),),
            context=_CONTEXT,
        )
        _pool_size = size
        if not _atexit_registered:
            atexit.register(shutdown)  # workers end with the process, never outlive it
            _atexit_registered = True
        for _ in range(size):
            _pool.schedule(_ping)  # start every worker now, not at the first key
    logger.info("warmkit: %d compile worker process(es) starting", size)
    return size


def prepare_workers(backend_name: str, backend: Any, target: str | None) -> list[Any]:
    """Run the backend's one-time setup in the started workers, in the background; the tasks' futures.

    ``warmkit.prepare()``'s setup thread calls it as soon as the backend is
    loaded, before the backend's own setup here: each worker then loads the
    plugin and primes what its first compile
    would pay for (Triton: ``triton_key()``, the specializer's imports, the
    ptxas probes of ``worker_target``), while the engine is still being built,
    not inside the warmup. One task per worker, best effort (a worker that
    takes two leaves another to pay at its first key); failures are the first
    compile's to report.
    """
    with _lock:
        pool, size = _pool, _pool_size
    compiles = capability(backend, ProcessCompiles)
    if pool is None or compiles is None:
        return []
    wtarget = compiles.worker_target(target)
    if wtarget is None:
        return []
    env = dict(os.environ)
    futures = [
        pool.schedule(_prepare_in_worker, args=(backend_name, wtarget, env)) for _ in range(size)
    ]
    for future in futures:
        future.add_done_callback(_log_ready)
    return futures


def _log_ready(future: Any) -> None:
    try:
        pid, _ran, (imports, imported, setup, ready) = future.result()
    except Exception as exc:  # noqa: BLE001 -- the first compile reports a broken worker
        logger.debug("compile worker setup failed: %s", exc)
        return
    logger.debug(
        "compile worker %d ready: imports %.3f s, backend setup %.3f s",
        pid,
        imported - imports,
        ready - setup,
        extra={"warmkit_worker_ready": (pid, imports, imported, setup, ready)},
    )


def shutdown() -> None:
    """Stop the compile workers now (idempotent).

    Never waits for a running compile (one may never end): each worker gets
    SIGTERM, then SIGKILL after ``TERM_GRACE`` seconds.
    """
    global _pool, _pool_size
    with _lock:
        pools = [p for p in (*_retired, _pool) if p is not None]
        _pool, _pool_size = None, 0
        _retired.clear()
    for pool in pools:
        _stop_pool(pool)


def stop_now() -> None:
    """Ctrl-C: stop every worker at once; a compile they run is abandoned (its key is cancelled)."""
    shutdown()


def interrupted(workers: _Workers | None, restore: Callable[[], None] | None) -> Callable[[], None]:
    """A warmup's Ctrl-C: stop ``workers`` now, and make a second Ctrl-C exit at once.

    Args:
        workers: the group's worker processes, if it uses them.
        restore: what an earlier call returned (the handler is set once).

    Returns:
        What puts the previous SIGINT handler back (the warmup's end calls it).
    """
    from .runner import exit_on_second_sigint

    if restore is None:
        restore = exit_on_second_sigint(kill_now)
    if workers is not None:
        workers.stop()
    return restore


def kill_now() -> None:
    """A second Ctrl-C, just before ``os._exit``: SIGKILL every worker process there is.

    It takes no lock (the first Ctrl-C's stop may hold one, in the same
    thread) and finds the workers among this process's children, so that
    one spawned by a pool being stopped is killed too.
    """
    for proc in multiprocessing.active_children():
        if proc.name == _WORKER_NAME and proc.pid is not None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:  # exited meanwhile
                continue


def _stop_pool(pool: Any) -> None:
    pool.stop()  # first: the pool starts no queued task and replaces no worker from here on
    terminate(_processes(pool), TERM_GRACE)
    pool.join()  # pebble's own stop of each worker: all of them have exited by now


def _processes(pool: Any) -> list[Any]:
    """The pool's live worker processes.

    pebble keeps them in its worker manager (not public API); if a later
    pebble moves them, multiprocessing's children of pebble's worker name.
    """
    try:
        return list(pool._pool_manager.worker_manager.workers.values())
    except AttributeError:
        return [p for p in multiprocessing.active_children() if p.name == _WORKER_NAME]


def terminate(processes: list[Any], grace: float) -> None:
    """SIGTERM every process, then SIGKILL each still alive ``grace`` seconds later; reap them.

    One grace for all of them, not one each: eight workers that ignore SIGTERM
    cost ``grace``, not eight times it.
    """
    for proc in processes:
        try:
            proc.terminate()
        except (OSError, ValueError):  # already reaped, or closed
            continue
    deadline = time.monotonic() + grace
    for proc in processes:
        try:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()  # ignores or outlasts SIGTERM: a compile stuck in C code
                proc.join(1.0)  # SIGKILL cannot be caught: reaped at once
        except (OSError, ValueError):
            continue


def worker_pool(
    backend: Any, target: str | None, keys: int, jobs: int, config: Any = None
) -> _Workers | None:
    """The worker processes for one backend group, or None to compile on threads.

    ``config`` (the warmup's ``WarmupConfig``): its ``compile_timeout`` bounds each key.
    """
    mode = _envs.get("WARMKIT_COMPILE_PROCESSES")
    compiles = capability(backend, ProcessCompiles)
    if mode == "off" or jobs < 2 or compiles is None:
        return None
    worker_target = compiles.worker_target(target)
    if worker_target is None:
        return None
    if mode == "auto" and (jobs < MIN_JOBS or keys < MIN_KEYS_PER_JOB * jobs):
        return None
    if importlib.util.find_spec("pebble") is None:
        logger.warning("compile worker processes need pebble (pip install pebble); using threads")
        return None
    start_workers(jobs)
    return _Workers(_pool, worker_target, getattr(config, "compile_timeout", None))


class _Workers:
    """Submits keys to the pool and turns a worker's death into that key's error."""

    def __init__(self, pool: Any, target: str, timeout: float | None = None) -> None:
        self._pool = pool
        self.target = target
        #: compile_timeout: pebble stops a worker whose task runs longer (a backstop to abandon())
        self.timeout = timeout
        self._refs: dict[type, str] = {}
        self._queued: dict[int, Any] = {}  # id of a group's item -> its future (queue_all)
        self._taken: dict[int, Any] = {}  # id of an item a warmup thread waits on -> its future

    def submit(self, kernel: Any, key: Any) -> Any:
        from .._plugin.discovery import kernel_ref

        cls = type(kernel)
        ref = self._refs.get(cls)
        if ref is None:  # an entry-point scan: once per kernel class
            ref = self._refs[cls] = kernel_ref(cls)
        args = (ref, pickle.dumps(key), self.target, dict(os.environ))
        return self._pool.schedule(_compile_in_worker, args=args, timeout=self.timeout)

    def queue_all(self, items: list[tuple[Any, Any]], skip: Any) -> None:
        """Hand every ``(kernel, key)`` of a group to the pool now, in order, but those ``skip`` names.

        A worker that finishes a key then takes the next one at once, instead of
        waiting while this process loads the result and asks for another. What
        a warmup does not take (it stopped early) is cancelled by
        :meth:`cancel_queued`.
        """
        for item in items:
            if skip(*item):
                continue
            try:
                self._queued[id(item)] = self.submit(*item)
            except Exception as exc:  # noqa: BLE001 -- the rest are asked for one by one
                logger.warning(
                    "compile workers did not take kernel %s key %r (%s); this group's keys from "
                    "it on are handed to them one at a time",
                    type(item[0]).name,
                    item[1],
                    exc,
                )
                return

    def cancel_queued(self) -> None:
        """Cancel what :meth:`queue_all` queued and no warmup took.

        A compile already running is left to finish. One that a worker takes in
        the instant between the check and the cancel is stopped with its worker
        (pebble's cancel), which the pool replaces: a half-written cache entry
        is never used (Triton writes an entry's index file last, by rename).
        """
        queued, self._queued = self._queued, {}
        for future in queued.values():
            if not future.running():
                future.cancel()

    def compile(self, item: tuple[Any, Any]) -> str | None:
        """``compiled``/``cached`` when a worker compiled the key; None if the parent must compile it.

        Args:
            item: a group's ``(kernel, key)``: what :meth:`queue_all` queued
                for it, else submitted now.

        Raises:
            WorkerDiedError: the worker process died on this key.
        """
        kernel, key = item
        future = self._queued.pop(id(item), None)
        if future is None:
            try:
                future = self.submit(kernel, key)
            except Exception as exc:  # noqa: BLE001 -- a pool that cannot take work: compile here
                logger.warning("compile workers unavailable (%s); compiling in-process", exc)
                return None
        self._taken[id(item)] = future
        try:
            return self.outcome(future, kernel, key)
        finally:
            self._taken.pop(id(item), None)

    def abandon(self, item: tuple[Any, Any]) -> str:
        """The warmup gave up on ``item`` (its compile_timeout): stop the worker compiling it.

        pebble's cancel of a running task stops its worker (SIGTERM, SIGKILL
        after its grace) and starts a fresh one; the thread waiting on the
        future returns.
        """
        future = self._taken.pop(id(item), None) or self._queued.pop(id(item), None)
        if future is not None:
            future.cancel()
        return "its worker process was killed and replaced"

    def stop(self) -> None:
        """Ctrl-C: stop every worker (:func:`stop_now`) and release every thread waiting on one."""
        stop_now()
        futures = [*self._queued.values(), *self._taken.values()]
        self._queued, self._taken = {}, {}
        for future in futures:
            future.cancel()  # a waiting thread sees CancelledError: it compiles nothing itself

    def outcome(self, future: Any, kernel: Any, key: Any) -> str | None:
        """``compiled``/``cached`` from the worker; None if the parent must compile it itself.

        Raises:
            WorkerDiedError: the worker process died on this key.
            TimeoutError: the key ran past ``compile_timeout`` and its worker was killed.
            concurrent.futures.CancelledError: the warmup gave up on the key
                (timeout or Ctrl-C); the parent must not compile it either.
        """
        from pebble import ProcessExpired

        try:
            status, pid, start, end = future.result()
        except ProcessExpired as exc:
            raise WorkerDiedError(type(kernel).name, key, exc.exitcode, str(exc)) from exc
        except concurrent.futures.CancelledError:
            raise
        except TimeoutError as exc:  # pebble's: the task outlived self.timeout
            raise TimeoutError(  # the words of the warmup's own timeout: either may be first
                f"compile of kernel {type(kernel).name!r} key {key!r} exceeded compile_timeout="
                f"{self.timeout:g}s (WARMKIT_COMPILE_TIMEOUT); its worker process was killed and "
                "replaced"
            ) from exc
        except Exception as exc:  # noqa: BLE001 -- the parent's compile reports it
            logger.debug("compile worker: %s %r: %s; compiling in-process", kernel, key, exc)
            return None
        logger.debug(
            "compile worker %d: kernel %s key %r %s in %.3f s",
            pid,
            type(kernel).name,
            key,
            status,
            end - start,
            extra={"warmkit_worker": (pid, start, end)},
        )
        return status
