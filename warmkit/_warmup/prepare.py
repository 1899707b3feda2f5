"""``warmkit.prepare()``: warmup's one-time setup, started while the engine is still being built.

A serving engine builds its objects (loads weights, creates its CUDA context,
allocates its caches) long before it warms up. What every warmup pays once per
process before its first key, and that does not depend on the kernels, can run
meanwhile, in one background thread:

* discovering and loading the backend plugins (an entry-point scan);
* each backend's own one-time setup (the optional ``Prepares`` capability):
  for Triton its import, its fingerprint ``triton_key()``, the specializer's
  lazy imports and the ptxas probes for the target (``docs/performance.md``);

and, for a warmup that compiles in worker processes (``jobs >= 4``, or with
``WARMKIT_COMPILE_PROCESSES=on``), starting those processes (``_workers``).

``warmup`` joins the thread before it plans, so warming up before the setup
finished is safe: it waits for the backend being set up, and that wait counts
in its seconds. The backends go in the order of need: those whose DSL the
process has imported first (``triton``), then the others. Once a warmup
joins, one that was only discovered (not named in ``WarmupConfig.backends``),
whose DSL is not imported and whose setup has not started is left alone:
setting it up would hold the GIL while the warmup waits, for nothing when the
warmup has no key of it, and a warmup that has loads it itself, as without
``prepare()``. A named backend is the engine's word that it has keys: the
warmup waits for its setup.
A backend whose setup raised fails its keys in that warmup's report, with the
error and a note naming the plugin; other backends are not affected, and a
later warmup runs the setup again as part of its own work.

The setup reads the environment when it runs: call ``prepare()`` after setting
``TRITON_*`` and ``WARMKIT_*`` variables. A backend must leave nothing stale
that a later change of them affects (Triton's setup re-checks the ptxas whose
version it asked before the warmup's first key, ``warmkit_triton._setup``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from .. import _envs
from .._compat import ast_parse_serialized, settle_sysconfig
from .._plugin.components import capability
from .._plugin.contract import Prepares
from .config import WarmupConfig

__all__ = ["join", "prepare"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
#: The setups running or finished but not yet joined by a warmup, by (target, backends),
#: each with the event a joining warmup sets to have it stop before its next backend.
_threads: dict[
    tuple[str | None, tuple[str, ...] | None], tuple[threading.Thread, threading.Event]
] = {}
_failures: dict[tuple[str | None, str], BaseException] = {}  # (target, backend) -> error


def prepare(
    config: WarmupConfig | int | None = None,
    modules: list[str] | None = None,
    *,
    jobs: int | None = None,
) -> int:
    """Start warmup's one-time setup now, in the background; returns how many worker processes start.

    Call it early, before building the engine (it returns at once). Idempotent.

    Args:
        config: the ``WarmupConfig`` the engine will warm up with (its target,
            backends, jobs), or just the number of jobs; default the
            environment (``WarmupConfig.from_env()``'s ``WARMKIT_TARGET``,
            ``WARMKIT_BACKENDS``, ``WARMKIT_JOBS``).
        modules: what each worker process imports at start; default torch and
            Triton if installed.
        jobs: the number of jobs, overriding ``config``'s (``prepare(jobs=8)``,
            as before ``config`` existed).

    Worker processes start when they would pay (``jobs``: default
    ``WARMKIT_JOBS``, else the number of CPUs): ``jobs >= 4`` with
    ``WARMKIT_COMPILE_PROCESSES=auto``, ``jobs >= 2`` with ``on``, never with
    ``off``; a later warmup uses them for a backend group of at least 2 keys
    per job (``auto``; always with ``on``), and compiles a few keys on
    threads (``docs/performance.md``). Otherwise only the setup runs: an
    engine that knows it has few keys passes ``jobs=1``.
    """
    if config is None or isinstance(config, int):
        enabled = _envs.get("WARMKIT_ENABLED")
        given, target, backends = config, _envs.get("WARMKIT_TARGET"), _envs.get("WARMKIT_BACKENDS")
    else:
        enabled, given = config.enabled, config.jobs
        target, backends = config.target, config.backends
    jobs = jobs if jobs is not None else given
    if not enabled:
        return 0
    jobs = jobs or _envs.get("WARMKIT_JOBS") or os.cpu_count() or 1
    from .workers import MIN_JOBS, start_workers

    mode = _envs.get("WARMKIT_COMPILE_PROCESSES")
    started = 0
    if mode != "off" and jobs >= (MIN_JOBS if mode == "auto" else 2):
        # before the setup thread, which then sets the workers up as well (prepare_workers)
        started = start_workers(jobs, modules)
    # else threads: a pool would make an auto warmup use processes where they cost more
    _start_setup(target, tuple(backends) if backends is not None else None)
    return started


def _start_setup(target: str | None, backends: tuple[str, ...] | None) -> None:
    with _lock:
        if (target, backends) in _threads:
            return  # already under way: prepare() is idempotent until a warmup joins it
        stop = threading.Event()
        thread = threading.Thread(
            target=_setup, args=(target, backends, stop), name="warmkit-prepare", daemon=True
        )
        _threads[target, backends] = (thread, stop)
    settle_sysconfig()  # the engine's thread reads it meanwhile (importing, say)
    thread.start()


def _setup(target: str | None, backends: tuple[str, ...] | None, stop: threading.Event) -> None:
    with ast_parse_serialized():  # a backend's setup may parse kernels while the engine does too
        _set_up_backends(target, backends, stop)


def _set_up_backends(
    target: str | None, backends: tuple[str, ...] | None, stop: threading.Event
) -> None:
    from .._plugin.discovery import BACKENDS_GROUP, call_hook, discover, get_backend

    try:
        names = backends if backends is not None else [i.name for i in discover(BACKENDS_GROUP)]
    except Exception as exc:  # noqa: BLE001 -- warmup reports a bad allow-list itself
        logger.debug("warmkit.prepare: plugin discovery failed: %s", exc)
        return
    left = list(names)
    while left:
        # Chosen now, not at the start: the engine imports its DSLs meanwhile.
        imported = [n for n in left if n in sys.modules]
        if stop.is_set() and not imported and backends is None:
            logger.debug("warmkit.prepare: left to the warmup: backend(s) %s", ", ".join(left))
            return
        name = (imported or left)[0]
        left.remove(name)
        try:
            backend = get_backend(name)
        except Exception as exc:  # noqa: BLE001 -- warmup reports it per key, with its hint
            logger.debug("warmkit.prepare: backend %s not loaded: %s", name, exc)
            continue
        # The workers' setup first: it runs in their processes while this one's runs here
        # (waiting for this one would leave them idle for most of the engine's startup).
        # Setting them up is an optimisation: a failure there is the workers' first
        # compile's to report (or the thread fallback's), never this backend's keys.
        from .workers import prepare_workers

        try:
            prepare_workers(name, backend, target)
        except Exception as exc:  # noqa: BLE001 -- named, never a failed key
            logger.warning(
                "warmkit.prepare: setting up the compile workers for backend %r failed: %s",
                name,
                exc,
            )
        setup = capability(backend, Prepares)
        if setup is None:
            continue
        try:
            call_hook(name, "prepare", setup.prepare, target)
        except Exception as exc:  # noqa: BLE001 -- fails this backend's keys in the next warmup
            exc.add_note("warmkit: in the background setup that warmkit.prepare() started")
            logger.debug("warmkit.prepare: backend %s setup failed: %s", name, exc)
            with _lock:
                _failures[target, name] = exc


def join(target: str | None = None) -> dict[str, BaseException]:
    """Wait for the setup ``prepare()`` started; return, and forget, its failures by backend name.

    Only the failures of the setup for ``target`` (the warmup's) are returned: a
    setup another target's ``prepare()`` ran is that target's business (logged).

    ``warmup`` calls it first. Safe when ``prepare()`` was never called (returns
    at once) and from the setup thread itself (which it does not wait for). A
    ``prepare()`` after it runs the setup again (cheap: what it did is done).
    """
    with _lock:
        threads = {k: t for k, (t, _) in _threads.items() if t is not threading.current_thread()}
        for k in threads:
            _threads[k][1].set()  # a backend not yet started is the warmup's own (module doc)
    for thread in threads.values():
        thread.join()
    with _lock:
        for k in threads:
            _threads.pop(k, None)
        failures = {name: exc for (t, name), exc in _failures.items() if t == target}
        others = {k: exc for k, exc in _failures.items() if k[0] != target}
        _failures.clear()
    for (t, name), exc in others.items():
        logger.warning("warmkit.prepare() for target %s: backend %r setup failed: %s", t, name, exc)
    return failures
