"""Triton's runtime hooks, chained, feeding ``warmkit.monitor``.

Three Triton hooks are used, for every ``@triton.jit`` function in the process
(wrapped by warmkit or not):

* ``knobs.runtime.jit_cache_hook``: an in-memory miss, *before* compiling.
  The monitor's ``on_miss`` runs here, so in ``"error"`` mode the launch is
  refused before any compile work.
* ``knobs.compilation.listener``: inside ``triton.compile``, after it; it says
  whether the entry came from the disk cache (``cache_hit``) or was compiled.
  It is paired with the cache hook's miss to time the whole event.
* ``Autotuner.run``, wrapped at class level (:func:`install_raw_monitor`):
  a runtime autotune benchmark of any ``@triton.autotune`` kernel, kind
  ``"autotune"``, refused before benchmarking in ``"error"`` mode.
* ``knobs.runtime.kernel_load_start_hook``/``kernel_load_end_hook`` (Triton's
  ``HookChain``\\ s): a module load with no compile before it, which is what a
  compile-only warmup leaves to the first launch; reported as kind ``"load"``.

``jit_cache_hook`` and ``listener`` are single slots, so ours **wrap** whatever
was installed before and call it; uninstalling puts the previous one back. If
someone installed a hook on top of ours meanwhile, ours stays in their chain
but becomes a pass-through, so their chain is never broken.

Compiles that warmkit itself performs (``warmkit.monitor.in_managed_compile()``,
or this backend's own compile threads) are never reported, so one event is
never counted twice; their outcome (disk hit or compile) is kept for the
warmup report instead.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from . import _triton_api as api

__all__ = [
    "describe_specialization",
    "install",
    "install_raw_monitor",
    "managed",
    "pop_outcome",
    "probe",
    "uninstall",
    "uninstall_raw_monitor",
]

logger = logging.getLogger(__name__)

BACKEND = "triton"

_managed: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "warmkit_triton_managed", default=False
)

_lock = threading.RLock()
_reporting = False  # install_monitor() called: report events to warmkit.monitor
_probes = 0  # compiles in progress that want outcomes
_cache_hook: _ChainedCacheHook | None = None
_listener: _ChainedListener | None = None
_load_hooks_added = False

# In-memory misses waiting for their compile listener call: id(JITFunction) -> [(t0, spec)].
_pending: dict[int, collections.deque[tuple[float, str]]] = {}
# Outcomes of managed compiles: cache hash -> cache_hit.
_outcomes: collections.OrderedDict[str, bool] = collections.OrderedDict()
_MAX_OUTCOMES = 8192
# Hashes whose compile/disk hit was just reported: their module load is part of that event.
_reported_hashes: collections.OrderedDict[str, None] = collections.OrderedDict()
_load_t0 = threading.local()


def _monitor() -> Any:
    from warmkit import monitor

    return monitor


def _recorder() -> Any:
    try:
        from warmkit import active_recorder
    except ImportError:  # a core without recording
        return None
    return active_recorder()


def _is_managed() -> bool:
    if _managed.get():
        return True
    try:
        return bool(_monitor().in_managed_compile())
    except Exception:  # noqa: BLE001 - a core without the monitor: nothing is managed
        return False


@contextlib.contextmanager
def managed() -> Iterator[None]:
    """Mark compiles in this block (and in threads started with a copy of this context) as warmkit's."""
    token = _managed.set(True)
    try:
        yield
    finally:
        _managed.reset(token)


# -- describing a specialization ------------------------------------------------------------


def _attr_text(attr: Any) -> str:
    if not attr:
        return ""
    parts = []
    for item in attr:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            name, value = item
            parts.append(
                "div16" if name == "tt.divisibility" and value == 16 else f"{name}={value}"
            )
        else:
            parts.append(str(item))
    return "[" + ",".join(parts) + "]"


def describe_specialization(
    signature: Mapping[str, Any],
    constants: Mapping[Any, Any],
    attrs: Mapping[Any, Any],
    options: Mapping[str, Any],
) -> str:
    """A readable, stable string for one compiled variant.

    Example: ``"x:*fp32[div16], n:i32, BLOCK=1024 | num_warps=4, num_stages=3"``.
    """
    items = []
    for i, (name, ty) in enumerate(signature.items()):
        if ty == "constexpr":
            value = constants.get((i,), constants.get(name, "?"))
            value = getattr(value, "value", value)
            items.append(f"{name}={value!r}")
        else:
            items.append(f"{name}:{ty}{_attr_text(attrs.get((i,)))}")
    opts = [
        f"{k}={options[k]}"
        for k in ("num_warps", "num_stages", "num_ctas")
        if options.get(k) is not None
    ]
    if options.get("num_ctas") == 1:
        opts = opts[:-1]
    return ", ".join(items) + (" | " + ", ".join(opts) if opts else "")


def _kernel_name(jit_fn: Any) -> str:
    fn = getattr(jit_fn, "fn", None)
    module = getattr(fn, "__module__", None) or getattr(jit_fn, "module", "?")
    qualname = getattr(fn, "__qualname__", None) or getattr(jit_fn, "__name__", "?")
    return f"{module}.{qualname}"


# -- the hooks -----------------------------------------------------------------------------


class _ChainedCacheHook:
    """Our ``jit_cache_hook``: calls the previous hook, then reports the miss."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.active = True

    def __call__(self, **kwargs: Any) -> Any:
        result = self.previous(**kwargs) if self.previous is not None else None
        if self.active and not result:
            _on_cache_miss(kwargs)
        return result


class _ChainedListener:
    """Our ``compilation.listener``: records the outcome, then calls the previous listener."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.active = True

    def __call__(self, **kwargs: Any) -> None:
        if self.active:
            try:
                _on_compiled(kwargs)
            except Exception:  # a monitor bug must never break a compile
                logger.exception("warmkit-triton: compile listener failed")
        if self.previous is not None:
            self.previous(**kwargs)


def _on_cache_miss(kw: dict[str, Any]) -> None:
    if _is_managed() or not _reporting:
        return
    event = api.miss_event(kw)
    jit_fn = event.jit_fn
    spec = describe_specialization(event.signature, event.constants, event.attrs, event.options)
    kernel = _kernel_name(jit_fn) if jit_fn is not None else event.name
    recorder = _recorder()
    if recorder is not None:
        # Before on_miss: in "error" mode the event is recorded, then raised.
        from ._record import entry_from_event

        recorder.add_safely(lambda: entry_from_event(event))
    # In "error" mode this raises RuntimeCompileError, before Triton compiles anything.
    _monitor().on_miss(kernel=kernel, key=spec, backend=BACKEND, context=None)
    with _lock:
        # Bounded: a compile that raised never reaches the listener, and its entry must not
        # pile up (the oldest goes first).
        _pending.setdefault(id(jit_fn), collections.deque(maxlen=8)).append(
            (time.perf_counter(), spec)
        )


def _on_compiled(kw: dict[str, Any]) -> None:
    event = api.compile_event(kw)
    cache_hit, digest = event.cache_hit, event.hash
    if _is_managed():
        if digest is not None:
            with _lock:
                _outcomes[digest] = cache_hit
                while len(_outcomes) > _MAX_OUTCOMES:
                    _outcomes.popitem(last=False)
        return
    if not _reporting:
        return
    jit_fn = event.jit_fn
    with _lock:
        queue = _pending.get(id(jit_fn))
        entry = queue.popleft() if queue else None
        if queue is not None and not queue:
            _pending.pop(id(jit_fn), None)
        if digest is not None:
            _reported_hashes[digest] = None
            while len(_reported_hashes) > _MAX_OUTCOMES:
                _reported_hashes.popitem(last=False)
    if entry is not None:
        t0, spec = entry
        seconds = time.perf_counter() - t0
    else:
        seconds = event.seconds
        spec = describe_specialization(
            event.signature, event.constants, event.attrs, event.metadata
        )
    kernel = _kernel_name(jit_fn) if jit_fn is not None else event.name
    _monitor().record(
        kernel=kernel,
        key=spec,
        backend=BACKEND,
        context=None,
        seconds=seconds,
        kind="disk_hit" if cache_hit else "compile",
    )


def _on_load_start(module: Any, function: Any, name: str, metadata_group: Any, hash: str) -> None:
    if _reporting and not _is_managed():
        _load_t0.value = (hash, time.perf_counter())


def _on_load_end(module: Any, function: Any, name: str, metadata_group: Any, hash: str) -> None:
    if not _reporting or _is_managed():
        return
    started = getattr(_load_t0, "value", None)
    _load_t0.value = None
    with _lock:
        if hash in _reported_hashes:
            # the load that follows a reported runtime compile is part of that event
            del _reported_hashes[hash]
            return
    seconds = time.perf_counter() - started[1] if started and started[0] == hash else 0.0
    _monitor().record(
        kernel=str(name), key=f"module {hash[:16]}", backend=BACKEND, seconds=seconds, kind="load"
    )


# -- install / uninstall ----------------------------------------------------------------------


def _chain(ours: Any, cls: type, get: Any, put: Any) -> Any:
    """Put ``cls(previous)`` in a hook slot unless ours is already there; return the one in place."""
    current = get()
    if ours is None or current is not ours:
        if ours is not None:
            ours.active = False  # left inside someone else's chain: pass-through
        ours = cls(current)
        put(ours)
    return ours


def _unchain(ours: Any, get: Any, put: Any, slot: str) -> None:
    """Put back what ours wrapped, or make ours a pass-through when someone chained on top of it."""
    if get() is ours:
        put(ours.previous)
    else:
        ours.active = False
        logger.debug("%s was replaced on top of warmkit's; leaving ours as a pass-through", slot)


def _attach_load_hooks(attach: bool) -> bool:
    """Add (or remove) ours to Triton's module-load ``HookChain``\\ s; False when Triton has none."""
    chains = api.load_hooks()
    if chains is None:
        return False
    for chain, hook in zip(chains, (_on_load_start, _on_load_end)):
        (chain.add if attach else chain.remove)(hook)
    return True


def _install_locked() -> None:
    global _cache_hook, _listener, _load_hooks_added
    _cache_hook = _chain(
        _cache_hook, _ChainedCacheHook, api.get_jit_cache_hook, api.set_jit_cache_hook
    )
    _listener = _chain(
        _listener, _ChainedListener, api.get_compilation_listener, api.set_compilation_listener
    )
    if not _load_hooks_added:
        _load_hooks_added = _attach_load_hooks(True)


def _uninstall_locked() -> None:
    global _cache_hook, _listener, _load_hooks_added
    if _cache_hook is not None:
        _unchain(_cache_hook, api.get_jit_cache_hook, api.set_jit_cache_hook, "the JIT cache hook")
        _cache_hook = None
    if _listener is not None:
        _unchain(
            _listener,
            api.get_compilation_listener,
            api.set_compilation_listener,
            "compilation.listener",
        )
        _listener = None
    if _load_hooks_added:
        _attach_load_hooks(False)
        _load_hooks_added = False


def install() -> None:
    """Start reporting runtime Triton events to ``warmkit.monitor`` (idempotent)."""
    global _reporting
    with _lock:
        _reporting = True
        _install_locked()
    install_raw_monitor()  # runtime autotune benchmarks, kind "autotune"
    logger.debug("Triton runtime hooks installed")


def uninstall() -> None:
    """Stop reporting; restore the hooks that were installed before (idempotent)."""
    global _reporting
    with _lock:
        _reporting = False
        _pending.clear()
        if _probes == 0:
            _uninstall_locked()
    uninstall_raw_monitor()
    logger.debug("Triton runtime hooks uninstalled")


@contextlib.contextmanager
def probe() -> Iterator[None]:
    """Keep the hooks installed for a block so managed compiles record their outcome."""
    global _probes
    with _lock:
        _probes += 1
        _install_locked()
    try:
        yield
    finally:
        with _lock:
            _probes -= 1
            if _probes == 0 and not _reporting:
                _uninstall_locked()


def pop_outcome(digest: str) -> bool | None:
    """The recorded outcome of a managed compile: True = disk hit, False = compiled, None = not seen."""
    with _lock:
        return _outcomes.pop(digest, None)


# -- raw autotuned kernels: runtime autotune benchmarks -------------------------------------------------------------

_raw_lock = threading.Lock()
_original_run: Any = None


def _monitored_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    original = _original_run
    parts = api.autotuner_parts(self)
    if original is None or len(parts.configs) <= 1 or not _reporting or _is_managed():
        return (original or _passthrough)(self, *args, **kwargs)
    from ._stack import tuning_key

    key = tuning_key(parts, args, kwargs)
    if key in parts.cache:
        return original(self, *args, **kwargs)
    found = api.stack_layers(self)
    name = _kernel_name(found[1]) if found is not None else repr(self)
    monitor = _monitor()
    # Before any benchmark or config compile: in "error" mode this raises RuntimeCompileError.
    monitor.on_miss(kernel=name, key=key, backend="triton", kind="autotune")
    before = api.bench_time(self)
    t0 = time.perf_counter()
    result = original(self, *args, **kwargs)
    bench = api.bench_time(self)
    seconds = bench if bench is not None and bench != before else time.perf_counter() - t0
    monitor.record(kernel=name, key=key, backend="triton", seconds=seconds, kind="autotune")
    recorder = _recorder()
    if recorder is not None:
        from ._record import tuned_entry

        winner = parts.cache.get(key)
        recorder.add_safely(lambda: tuned_entry(self, key, winner))
    return result


_passthrough: Any = None


def install_raw_monitor() -> None:
    """Report every runtime autotune of any ``Autotuner`` (wrapped by warmkit or not) to the monitor.

    ``Autotuner.run`` is wrapped at class level, in Triton 3.6 and 3.9 alike:
    3.9's ``knobs.autotuning.listener`` fires only *after* benchmarking, so it
    could not refuse a benchmark in ``"error"`` mode, and 3.6 has no listener.
    A subclass that overrides ``run`` is not seen.
    """
    global _original_run, _passthrough
    with _raw_lock:
        if _original_run is not None:
            return
        _original_run = api.wrap_autotuner_run(_monitored_run)
        _passthrough = _original_run


def uninstall_raw_monitor() -> None:
    """Put ``Autotuner.run`` back (left wrapped, as a pass-through, if someone wrapped it on top)."""
    global _original_run
    with _raw_lock:
        if _original_run is None:
            return
        api.restore_autotuner_run(_monitored_run, _original_run)
        _original_run = None
