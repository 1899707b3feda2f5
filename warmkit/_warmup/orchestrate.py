"""``warmkit.warmup(config)``: compile everything registered, before serving.

Plan -> load only the backends the plan needs -> compile in a deterministic
order, in parallel where the backend allows -> report -> arm the monitor.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from .. import metrics, monitor
from .._compat import Keep, ast_parse_serialized, gc_paused, keep_nothing, kept_out_of_gc
from .._exceptions import IN_REPORT, BackendUnavailableError, WarmupError
from .._kernel import memo as _memo
from .._plugin.components import capability
from .._plugin.contract import CanonicalTargets, reported_tuning
from .._plugin.discovery import check_target
from .._registry import identity as _identity
from .._registry.recorded import resolve_recorded, start_recording
from .._registry.registry import WarmupRegistry
from .config import WarmupConfig, warn_unapplied
from .prepare import join as join_setup
from .report import (
    ReportEntry,
    ReportStatus,
    WarmupReport,
    failure_lines,
    progress_bar,
)
from .runner import ABANDONED, CANCELLED, NOT_ATTEMPTED, SPILL_SECONDS, run
from .workers import interrupted

__all__ = ["warmup"]

logger = logging.getLogger(__name__)

_NOT_ATTEMPTED = NOT_ATTEMPTED
#: Before any key of a group finished: a key running this long is taken for a cold compile, and
#: another key may start beside it. A group's first cache hit carries the backend's one-time
#: costs (TileLang's first cached key: 18-26 ms on the CPU box, where 25 ms let a second thread
#: start beside about one warmup in two); a compile takes 70 ms (Triton) to seconds.
FIRST_SPILL_SECONDS = 0.05
_NOT_REPLAYABLE = "not replayable: "


def warmup(
    config: WarmupConfig | None = None, registry: WarmupRegistry | None = None
) -> WarmupReport:
    """Compile every key the registry plans, then arm the monitor.

    Args:
        config: how to run; default ``WarmupConfig.from_env()``.
        registry: what to compile; default the active registry, else the
            process-wide default one.

    Returns:
        The ``WarmupReport``.

    Raises:
        WarmupError: a key failed (fail-fast), or, with ``on_error="collect"``,
            after everything ran, listing every failure. It carries the kernel,
            the key, the elapsed time and the report so far, with the original
            exception chained.
            A kernel's backend that is missing or unusable fails that backend's
            keys: the ``WarmupError`` then chains the ``BackendUnavailableError``,
            whose message names the kernel, the backend and the install hint.
    """
    from .._plugin.discovery import one_scan

    # one entry-point scan for all plugins; the frontends' parses safe in the compile threads
    with one_scan(), kept_out_of_gc() as keep, ast_parse_serialized():
        return _warmup(config, registry, keep)


def _warmup(config: WarmupConfig | None, registry: Any, keep: Keep) -> WarmupReport:
    from .._registry.registry import active_registry, default_registry

    # an explicit config that ignores set WARMKIT_* variables: one WARNING naming them
    config = WarmupConfig.from_env() if config is None else warn_unapplied(config)
    if not config.enabled:
        logger.info("warmkit warmup disabled")
        return WarmupReport(enabled=False)
    if registry is None:
        registry = active_registry() or default_registry()
    _check_backend_names(config.backends)
    from .._plugin.discovery import _allowed

    _allowed()  # an unknown name in WARMKIT_PLUGINS is a usage error, not a failed key

    t_start = time.perf_counter()
    # The one-time setup warmkit.prepare() started: finished before planning needs it, and
    # any wait for it counts in this warmup's seconds.
    setup_failures = join_setup(config.target)
    waited = time.perf_counter() - t_start
    if waited >= 0.01:  # the engine's startup was shorter than the setup (B1's first key)
        logger.info("warmkit warmup: waited %.3f s for the setup warmkit.prepare() started", waited)
    # Plan first: a registration that cannot be planned fails before anything is installed.
    with gc_paused():  # planning keeps every object it makes: none is garbage
        plan = registry.resolve()
        recorded = resolve_recorded(registry.recorded())
        keep(False)
    _install_bundle(config)
    n_keys = sum(len(keys) for _, keys in plan.values()) + len(recorded)
    jobs = config.jobs or os.cpu_count() or 1
    logger.info(
        "warmkit warmup: %d kernel(s), %d key(s), target %s, up to %d job(s)",
        len(plan),
        n_keys,
        config.target or "current device",
        jobs,
    )
    with gc_paused():  # nor does grouping them
        entries, groups, recorded_items = _group(config, plan, recorded)
        keep(False)

    check_target(config.target, [b for b in groups if b is not None])

    loop = _Run(config, n_keys, jobs, t_start, recorded_items)
    loop.keep = keep
    loop.setup_failures = setup_failures
    if config.on_error == "raise" and any(e.status == "failed" for e in entries):
        loop.aborted = True
    interrupted = _compile_groups(loop, registry, config, groups)
    entries.extend(loop.entries)
    if config.target is None and interrupted is None:
        _rehearse(registry, plan)
    entries.sort(key=_plan_order(plan, recorded))
    # Every key skipped by the allow-list (not just unreplayable recorded entries, which are
    # skipped whatever it says); `all` stops at the first key that was not skipped.
    filtered_out = all(e.status == "skipped" for e in entries) and any(
        not (e.error or "").startswith(_NOT_REPLAYABLE) for e in entries
    )
    failed = any(e.status == "failed" for e in entries)
    report = WarmupReport(
        enabled=True,
        entries=tuple(entries),
        seconds=time.perf_counter() - t_start,
        target=config.target,
        jobs=jobs,
        monitor="off" if failed or filtered_out or interrupted else config.monitor,
        cancelled=interrupted is not None,
        store_refused=dict(loop.fleet.refused),  # fleet_for() always made one
    )
    metrics.observe_report(report)
    return _finish(
        config, report, aborted=loop.aborted, interrupted=interrupted, filtered_out=filtered_out
    )


def _install_bundle(config: WarmupConfig) -> None:
    """``WarmupConfig.bundle``: installed before anything compiles (refused under ``read_only``)."""
    if config.bundle is None:
        return
    if config.read_only:
        raise ValueError(
            "WarmupConfig(bundle=..., read_only=True): installing a bundle writes the cache; "
            "install it when building the image, then serve with read_only"
        )
    from .._cache.bundle import install_bundle

    install_bundle(config.bundle, target=config.target)


def _compile_groups(
    loop: _Run, registry: Any, config: WarmupConfig, groups: Mapping[str | None, list[Any]]
) -> KeyboardInterrupt | None:
    """Every backend group's keys, with the manifest's pins and the fleet; a Ctrl-C is returned.

    After a Ctrl-C, each key not reached yet is still reported (cancelled), group by group.
    """
    from .._cache.fleet import fleet_for

    interrupted: KeyboardInterrupt | None = None
    try:
        with _identity.pins_scope(registry, config), fleet_for(config).active() as loop.fleet:
            try:
                for backend_name, items in groups.items():
                    loop.backend_group(backend_name, items)
            except KeyboardInterrupt as exc:
                interrupted = exc
                loop.cancelled = True
                done = {(e.kernel, e.key) for e in loop.entries}
                for backend_name, items in groups.items():  # groups never reached
                    # the group's own items: a recorded one is known by its identity
                    loop.backend_group(
                        backend_name,
                        [it for it in items if (type(it[0]).name, it[1]) not in done],
                    )
    finally:
        loop.close()
    return interrupted


def _finish(
    config: WarmupConfig,
    report: WarmupReport,
    *,
    aborted: bool,
    interrupted: KeyboardInterrupt | None,
    filtered_out: bool,
) -> WarmupReport:
    """Raise for a cancelled or failed warmup; else say so, start recording, arm the monitor."""
    entries, elapsed = report.entries, report.seconds
    failures = [e for e in entries if e.status == "failed"]
    ready = sum(report.count(s) for s in ("compiled", "cached", "waited", "fetched"))
    if interrupted is not None:
        logger.warning(
            "warmkit warmup cancelled (SIGINT) after %.2fs: %d key(s) ready, %d failed, %d not "
            "compiled; the process is NOT warm",
            elapsed,
            ready,
            report.count("failed"),
            report.count("skipped"),
        )
        interrupted.report = report  # type: ignore[attr-defined]  # for the caller (the CLI)
        raise interrupted
    if failures:
        _raise_failed(report, failures, ready=ready, aborted=aborted)
    if filtered_out:
        # Not warm: arming the monitor would tell the serving process it is.
        logger.warning(
            "warmkit warmup compiled nothing: all %d key(s) were skipped because their "
            "backends (%s) are not in the backends allow-list %s (WARMKIT_BACKENDS or "
            "--backends); the process is NOT warm and the monitor is not armed",
            len(entries),
            ", ".join(sorted({str(e.backend) for e in entries})),
            list(config.backends or ()),
        )
        return report
    if not entries:
        logger.warning(
            "warmkit warmup: nothing is registered, so nothing was compiled; register kernels "
            "under `with registry.activate():` (threads: registry.bind(fn)) or load a manifest"
        )
    logger.info(
        "warmkit warmup done in %.2fs: %d compiled, %d cached, %d waited, %d fetched, %d skipped",
        elapsed,
        report.count("compiled"),
        report.count("cached"),
        report.count("waited"),
        report.count("fetched"),
        report.count("skipped"),
    )
    if config.record is not None:
        start_recording(config.record)
    monitor.arm(config.monitor)
    return report


def _raise_failed(
    report: WarmupReport, failures: list[ReportEntry], *, ready: int, aborted: bool
) -> NoReturn:
    """The error of a warmup with failed keys: the first (fail-fast) or all of them, logged once."""
    first = failures[0]
    if aborted:
        msg = (
            f"warmup failed on kernel {first.kernel!r} key {first.key!r} after "
            f"{first.seconds:.3f}s: {first.error} ({ready} "
            f"key(s) were ready, {report.count('skipped')} not attempted; use "
            "on_error='collect' to attempt every key)"
        )
    else:
        lines = "\n".join(failure_lines(failures, "  - "))
        msg = f"warmup failed for {len(failures)} of {len(report.entries)} key(s):\n{lines}"
    logger.error("%s", msg, extra=IN_REPORT)  # the table of a CLI says it: not twice
    raise WarmupError(
        msg,
        kernel=first.kernel,
        key=first.key,
        elapsed=first.seconds,
        failures=failures,
        report=report,
    ) from first.exception


def _group(
    config: WarmupConfig, plan: Mapping[str, tuple[Any, list[Any]]], recorded: Sequence[Any]
) -> tuple[list[ReportEntry], dict[str | None, list[tuple[Any, Any]]], set[int]]:
    """The keys to compile, by backend, in plan order, then the recorded ones not planned.

    Returns the entries already decided (skipped by the backend allow-list, an
    unreplayable or unplannable recorded entry), the ``(kernel, key)`` items per
    backend, and the ``id`` of each item that came from a recorded entry (what
    a key's report entry looks up for its kind: no tuple and no hash of the
    key per key).
    """
    entries: list[ReportEntry] = []
    groups: dict[str | None, list[tuple[Any, Any]]] = {}
    for name, (kernel, keys) in plan.items():
        b = type(kernel).backend
        if config.backends is not None and b not in config.backends:
            entries.extend(
                ReportEntry(
                    name, b, k, "skipped", error=f"backend {b!r} not in the backends allow-list"
                )
                for k in keys
            )
            continue
        groups.setdefault(b, []).extend((kernel, k) for k in keys)
    # Only a recorded entry needs it (a declared key is compiled once, reported once).
    planned = {(name, k) for name, (_, keys) in plan.items() for k in keys} if recorded else set()
    recorded_keys: set[tuple[str, Any]] = set()
    recorded_items: set[int] = set()
    for item in recorded:
        entry = item.entry
        if not entry.replayable:
            entries.append(
                ReportEntry(
                    entry.name,
                    entry.backend,
                    entry.id,
                    "skipped",
                    error=f"{_NOT_REPLAYABLE}{entry.reason}",
                    kind="recorded",
                )
            )
            continue
        if item.error is not None:
            entries.append(
                ReportEntry(
                    entry.name,
                    entry.backend,
                    entry.id,
                    "failed",
                    error=f"recorded entry cannot be planned: {_describe(item.error)}",
                    exception=item.error,
                    kind="recorded",
                )
            )
            continue
        name, b = type(item.kernel).name, type(item.kernel).backend
        pair = (name, item.key)
        if planned and pair in planned:
            continue  # a declared key: compiled once, reported once
        if config.backends is not None and b not in config.backends:
            entries.append(
                ReportEntry(
                    name,
                    b,
                    item.key,
                    "skipped",
                    error=f"backend {b!r} not in the backends allow-list",
                    kind="recorded",
                )
            )
            continue
        n = len(recorded_keys)
        recorded_keys.add(pair)  # one hash of the key, not a lookup and then an add
        if len(recorded_keys) == n:
            continue  # a duplicate: compiled once, reported once
        it = (item.kernel, item.key)
        recorded_items.add(id(it))  # the item lives as long as the warmup
        groups.setdefault(b, []).append(it)
    return entries, groups, recorded_items


def _plan_order(
    plan: Mapping[str, tuple[Any, list[Any]]], recorded: Sequence[Any]
) -> Callable[[ReportEntry], int]:
    """A sort key putting report entries in plan order (the report is deterministic).

    Entries carry the plan's key objects, so their identities place them
    (hashing every key again cost ~1 us each); by identity alone, with no
    tuple per key for the collector to walk, unless one key object is
    planned for two kernels. An entry of no planned key goes first.
    """
    keys = [k for _, ks in plan.values() for k in ks]
    keys += [it.key for it in recorded if it.kernel is not None]
    by_id = {id(k): i for i, k in enumerate(keys)}
    if len(by_id) == len(keys):
        return lambda e: by_id.get(id(e.key), 0)
    names = [n for n, (_, ks) in plan.items() for _ in ks]
    names += [type(it.kernel).name for it in recorded if it.kernel is not None]
    by_pair = {(n, id(k)): i for i, (n, k) in enumerate(zip(names, keys, strict=True))}
    return lambda e: by_pair.get((e.kernel, id(e.key)), 0)


def _rehearse(registry: Any, plan: Mapping[str, tuple[Any, list[Any]]]) -> None:
    """Fill the launch memos for every single-point registration (``_memo.rehearse``)."""
    points: dict[str, list[dict[str, Any]]] = {}
    for reg in registry:
        pts = points.setdefault(reg.kernel, [])
        if len(pts) >= _memo.REHEARSE_LIMIT:
            continue  # rehearse takes no more: a recording has a registration per key
        if not reg.zip_groups and all(type(v) in _memo.PLAIN_TYPES for v in reg.space.values()):
            pts.append(dict(reg.space))
    for name, pts in points.items():
        if name in plan:
            _memo.rehearse(plan[name][0], pts)


#: Report entries between two ``keep()`` calls (``kept_out_of_gc``).
_KEEP_EVERY = 8192


class _Run:
    """One warmup's compile loop: parallel per backend, fail-fast or collect, with progress."""

    def __init__(
        self,
        config: WarmupConfig,
        total: int,
        jobs: int,
        t_start: float,
        recorded_items: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        self.config = config
        self.recorded_items = recorded_items  # id() of the items of recorded keys (_group)
        self.jobs = jobs
        self.entries: list[ReportEntry] = []
        self.aborted = False
        self.cancelled = False
        self._lock = threading.Lock()
        self._bar = progress_bar(total, config.progress)
        self._unshown = 0  # entries not yet counted on the bar
        self._procs: Any = None  # the group's ColdPool, when it may use worker processes
        self.fleet: Any = None
        self.setup_failures: dict[str, BaseException] = {}
        self.keep: Keep = keep_nothing  # see kept_out_of_gc
        self.restore_sigint: Callable[[], None] | None = None  # set by a Ctrl-C (_workers)

    def close(self) -> None:
        if self.restore_sigint is not None:
            self.restore_sigint()
        if self._bar is not None:
            self._bar.update(self._unshown)
            self._bar.close()
        if logger.isEnabledFor(logging.DEBUG):
            per_kernel: dict[str, float] = {}
            for e in self.entries:
                per_kernel[e.kernel] = per_kernel.get(e.kernel, 0.0) + e.seconds
            for name, secs in per_kernel.items():
                logger.debug("kernel %s: %.3fs", name, secs)

    def _kind(self, item: tuple[Any, Any]) -> str:
        return "recorded" if id(item) in self.recorded_items else "declared"

    def _unrun(
        self,
        item: tuple[Any, Any],
        backend: str | None,
        status: ReportStatus,
        error: str,
        exc: BaseException | None = None,
    ) -> None:
        """Report a key that was not compiled: skipped, or failed before its compile."""
        kernel, key = item
        self._append(
            ReportEntry(
                type(kernel).name, backend, key, status, 0.0, error, exc, kind=self._kind(item)
            )
        )

    def _append(self, entry: ReportEntry) -> None:
        with self._lock:
            self.entries.append(entry)
            if self._bar is not None:
                # tqdm's update() costs ~0.4 us: keys that take under 1 ms are counted 64 at
                # a time (the bar lags them by < 64 ms), a slower one at once.
                self._unshown += 1
                if self._unshown >= 64 or entry.seconds >= 0.001:
                    self._bar.update(self._unshown)
                    self._unshown = 0
            if not len(self.entries) % _KEEP_EVERY:
                # What the keys made so far is kept: without this, each full collection
                # walks all of it again, and a warmup's GC time grows as keys squared.
                self.keep()

    def _fail_all(
        self, items: Sequence[tuple[Any, Any]], backend: str | None, exc: BaseException
    ) -> None:
        for item in items:
            self._unrun(item, backend, "failed", _describe(exc), exc)

    def backend_group(self, backend_name: str | None, items: list[tuple[Any, Any]]) -> None:
        if self.aborted or self.cancelled:
            reason = CANCELLED if self.cancelled else _NOT_ATTEMPTED
            for item in items:
                self._unrun(item, backend_name, "skipped", reason)
            return
        target = self.config.target
        scope = contextlib.ExitStack()  # the backend's compile_scope, entered here (its errors)
        backend = None
        workers = self.jobs
        if backend_name is not None:
            from .._plugin.discovery import call_hook

            try:
                backend, target = _load_backend(backend_name, items, target)
                failure = self.setup_failures.pop(backend_name, None)
                if failure is not None:  # warmkit.prepare()'s setup of this backend raised
                    raise failure
            except Exception as exc:  # noqa: BLE001 -- reported as this key's failure
                self._fail_all(items, backend_name, exc)
                if self.config.on_error == "raise":
                    self.aborted = True
                return
            try:
                par = _plugin_call(backend_name, "parallelism", backend.parallelism, target)
                if isinstance(par, bool) or not isinstance(par, int) or par < 1:
                    raise TypeError(
                        f"backend plugin {backend_name!r}: parallelism({target!r}) returned "
                        f"{par!r}, not a positive int; fix the plugin"
                    )
                workers = min(self.jobs, par)
                entered = _plugin_call(
                    backend_name, "compile_scope", backend.compile_scope, target, workers
                )
                call_hook(backend_name, "compile_scope", scope.enter_context, entered)
            except Exception as exc:  # noqa: BLE001 -- reported as this backend's keys' failure
                self._fail_all(items, backend_name, exc)
                if self.config.on_error == "raise":
                    self.aborted = True
                return
        workers = min(workers, len(items))
        self._procs = None
        if backend_name is not None:  # worker processes start at the group's first cold key
            from .coldpool import ColdPool

            self._procs = ColdPool(self.fleet, backend, target, items, workers, self.config)
        try:
            # One compile_scope for the group's keys, the runner's threads included (a scope
            # per key cost ~1 us); a key's _warmkit_compile finds it set.
            with scope, monitor.compile_scope(target):
                self._compile(backend_name, backend, items, target, workers)
        finally:
            if self._procs is not None:
                self._procs.cancel_queued()

    def _compile_one(
        self, backend_name: str | None, backend: Any, target: str | None, item: tuple[Any, Any]
    ) -> ReportEntry:
        """Compile one key (through the fleet, probed in a worker first): its report entry."""
        t0 = time.perf_counter()
        kernel, key = item
        name = type(kernel).name
        try:
            probed, in_worker = (None, None) if self._procs is None else self._procs.probe(item)
            # compiled, cached, waited (another process of this host) or fetched (store)
            executor, status = self.fleet.compile(backend, kernel, key, target, probed=probed)
        except Exception as exc:  # noqa: BLE001 -- reported as this backend's keys' failure
            return ReportEntry(
                name,
                backend_name,
                key,
                "failed",
                time.perf_counter() - t0,
                _describe(exc),
                exc,
                kind=self._kind(item),
            )
        if in_worker == "compiled":  # the parent's compile was the worker's cache hit
            status = "compiled"
        elif status == "compiled" and self._procs is not None:
            self._procs.saw_compiled()  # a cold key found the hard way: the rest may be cold too
        tuning = reported_tuning(executor)
        return ReportEntry(
            name,
            backend_name,
            key,
            status,
            time.perf_counter() - t0,
            None,
            None,
            tuning,
            self._kind(item),
        )

    def _compile(
        self,
        backend_name: str | None,
        backend: Any,
        items: list[tuple[Any, Any]],
        target: str | None,
        workers: int,
    ) -> None:
        one = functools.partial(self._compile_one, backend_name, backend, target)

        def skipped(item: tuple[Any, Any], reason: str) -> None:
            self._unrun(item, backend_name, "skipped", reason)

        # Cache hits are Python-bound (a load, a launcher): on two threads they only fight over
        # the GIL (TileLang's cached key: 17.5 ms on one thread, 19.8 ms on two). So once the
        # last key to finish was a cache hit, keys run one at a time; a cold compile (ptxas,
        # nvcc: the GIL released) makes overlap start SPILL_SECONDS into a key again. Before any
        # key finished, a key that runs FIRST_SPILL_SECONDS is no cache hit: it makes room.
        last: str | None = None

        def spill() -> float | None:
            if last is None:
                return FIRST_SPILL_SECONDS
            return None if last == "cached" else SPILL_SECONDS

        def finished(_item: tuple[Any, Any], entry: ReportEntry) -> bool:
            nonlocal last
            last = entry.status
            self._append(entry)  # from one() or timed_out(): its kind is set
            if entry.status == "failed" and self.config.on_error == "raise" and not self.aborted:
                self.aborted = True  # keys already running finish; the rest are skipped
            return self.aborted

        def timed_out(item: tuple[Any, Any], seconds: float) -> None:
            kernel, key = item
            limit = self.config.compile_timeout
            fate = ABANDONED if self._procs is None else self._procs.abandon(item)
            exc = TimeoutError(
                f"compile of kernel {type(kernel).name!r} key {key!r} exceeded compile_timeout="
                f"{limit:g}s (WARMKIT_COMPILE_TIMEOUT); {fate}"
            )
            finished(
                item,
                ReportEntry(
                    type(kernel).name,
                    backend_name,
                    key,
                    "failed",
                    seconds,
                    _describe(exc),
                    exc,
                    kind=self._kind(item),
                ),
            )

        if workers <= 1 and self.config.compile_timeout is None:
            # In the calling thread: the backend's device state stays where the caller put it.
            for n, item in enumerate(items):
                if self.aborted:
                    skipped(item, _NOT_ATTEMPTED)
                    continue
                try:
                    finished(item, one(item))
                except KeyboardInterrupt:
                    self.cancelled = True
                    self.restore_sigint = interrupted(self._procs, self.restore_sigint)
                    for item in items[n:]:
                        skipped(item, CANCELLED)
                    raise
            return
        try:
            run(
                items,
                one,
                workers=workers,
                timeout=self.config.compile_timeout,
                on_done=finished,
                on_timeout=timed_out,
                on_unrun=skipped,
                spill=spill,
            )
        except KeyboardInterrupt:
            self.cancelled = True
            self.restore_sigint = interrupted(self._procs, self.restore_sigint)
            raise


def _load_backend(
    name: str, items: list[tuple[Any, Any]], target: str | None
) -> tuple[Any, str | None]:
    """Backend ``name``, loaded and available, and ``target`` in its spelling (None: this device).

    Raises:
        BackendUnavailableError: ``available()`` says no (its reason and install hint).
        PluginError: one of its hooks failed, naming it.
    """
    from .._plugin.discovery import get_backend

    kernel_name = type(items[0][0]).name
    backend = get_backend(name, kernel=kernel_name)
    status = _plugin_call(name, "available", backend.available)
    from .._plugin.contract import BackendStatus

    if not isinstance(status, BackendStatus):
        raise TypeError(
            f"backend plugin {name!r} ({type(backend).__module__}.{type(backend).__qualname__}): "
            f"available() returned {status!r}, not a warmkit.BackendStatus; fix the plugin"
        )
    if not status.ok:
        raise BackendUnavailableError(
            name, status.reason, kernel=kernel_name, install_hint=status.install_hint
        )
    if target is None:
        # A device warmup: no target to compare with the device's, so the device is not asked
        # for: Triton's answer starts the CUDA driver (cuInit: 0.1 s on an H100) on this thread,
        # which its compile_scope starts beside the imports instead (warmkit_triton._cuda). With
        # no device at all, the backend's compile() says what to do: only it knows whether it
        # needs one.
        return backend, None
    device = _plugin_call(name, "default_target", backend.default_target)
    targets = capability(backend, CanonicalTargets)
    if targets is not None:
        target = _plugin_call(
            name, "canonical_target", targets.canonical_target, target
        )  # sm_90 == cuda:90
    if target == device:
        target = None  # the local device: share the runtime's executor cache
    return backend, target


def _plugin_call(name: str | None, hook: str, method: Callable[..., Any], *args: Any) -> Any:
    """``method(*args)``, a backend's ``hook``; its own error is a ``PluginError`` naming both."""
    from .._plugin.discovery import call_hook

    return call_hook(name, hook, method, *args)


def _check_backend_names(names: tuple[str, ...] | None) -> None:
    """An allow-list naming no installed backend is a typo that would skip keys silently."""
    if not names:
        return
    from .._plugin.discovery import BACKENDS_GROUP, discover

    known = [i.name for i in discover(BACKENDS_GROUP, honour_allow_list=False)]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"WarmupConfig.backends (WARMKIT_BACKENDS or --backends) names unknown backend(s) "
            f"{', '.join(map(repr, unknown))}; installed backends: {', '.join(known) or '(none)'}"
        )


def _describe(exc: BaseException) -> str:
    """One key's error in a few lines: a compiler's log (ptxas prints thousands) is cut to its
    first and last lines; the whole exception stays on the entry, and ``-v`` prints it."""
    lines = [f"{type(exc).__name__}: {exc}", *getattr(exc, "__notes__", ())]
    text = "\n".join(lines).strip().splitlines() or [type(exc).__name__]
    if len(text) > 8:
        text = [
            *text[:3],
            f"... ({len(text) - 6} more lines; run with -v for the full log)",
            *text[-3:],
        ]
    return " | ".join(line.strip() for line in text if line.strip())
