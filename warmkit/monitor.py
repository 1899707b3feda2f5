"""The runtime-compile monitor.

After ``warmkit.warmup`` succeeds it arms this monitor. From then on every JIT
compile is either a warning (``"warn"``: one per kernel and key, then it
compiles) or an error (``"error"``: ``RuntimeCompileError`` raised *before*
compiling), except inside ``allow(reason)``. ``"off"`` disarms it.

Two sources feed it:

* ``JitKernel.get_or_compile`` on a cache miss;
* backends' own runtime hooks (Triton's cache hook and compile listener), which
  also see kernels that warmkit never wrapped.

Example::

    warmkit.monitor.arm("error")
    with warmkit.monitor.allow("LoRA adapter loaded at runtime"):
        kernel(...)  # may compile; recorded with the reason, not raised
    assert not [e for e in warmkit.monitor.events() if e.allowed is None]
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import attrs

from . import metrics
from ._envs import MONITOR_MODES
from ._exceptions import RuntimeCompileError
from ._plugin import discovery as _plugins
from ._plugin.components import capability
from ._plugin.contract import MonitorHooks, VarScope
from ._plugin.contract import _target as _target_var

__all__ = [
    "MODES",
    "MonitorEvent",
    "allow",
    "arm",
    "clear",
    "compile_scope",
    "disarm",
    "events",
    "in_managed_compile",
    "managed_compile",
    "mode",
    "on_miss",
    "record",
]

logger = logging.getLogger(__name__)

MODES = MONITOR_MODES

_lock = threading.Lock()
_mode = "off"
_recording_only = False  # armed by `warmkit record` alone: misses are what it records (INFO)
_events: list[MonitorEvent] = []
_warned: set[tuple[str, Any]] = set()
_allow: ContextVar[str | None] = ContextVar("warmkit_monitor_allow", default=None)
_managed: ContextVar[bool] = ContextVar("warmkit_managed_compile", default=False)


@attrs.frozen
class MonitorEvent:
    """One JIT event after warmup.

    Attributes:
        kernel: the kernel's name (a ``JitKernel.name`` or a raw Triton function's name).
        key: the compile key, or the backend's specialization.
        backend: the backend's name.
        context: the caller's runtime context, if given.
        seconds: how long the compile (or load) took; 0.0 for a refused one.
        kind: ``"compile"`` (a real compile), ``"disk_hit"`` (loaded from the
            backend's persistent cache), ``"load"``, ``"autotune"`` (a runtime
            autotune benchmark; ``key`` is the autotune key), or ``"refused"``
            (error mode; the refused kind is the ``RuntimeCompileError``'s ``kind``).
        mode: the monitor's mode when it happened.
        allowed: the ``allow(reason)`` reason in force, if any.
        timestamp: ``time.time()`` when recorded.
    """

    kernel: str
    key: Any
    backend: str | None
    context: Any
    seconds: float
    kind: str
    mode: str
    allowed: str | None = None
    timestamp: float = attrs.field(factory=time.time)


def _hooked_backends() -> list[MonitorHooks]:
    """The monitor hooks of every loaded backend that has them (``capability``)."""
    hooks = (capability(b, MonitorHooks) for b in _plugins.loaded_backends())
    return [h for h in hooks if h is not None]


def _hook_up(backend: Any) -> None:
    """A backend loaded while the monitor is armed gets its hooks installed at once."""
    hooks = capability(backend, MonitorHooks) if _mode != "off" else None
    if hooks is not None:
        hooks.install_monitor()


def arm(mode: str = "warn") -> None:
    """Set the monitor's mode; takes effect at once, also when it changes later.

    ``"off"`` is the same as ``disarm()``. Arming installs the runtime hooks of
    every backend loaded in this process.

    Raises:
        ValueError: an unknown mode.
    """
    global _mode, _recording_only
    if mode not in MODES:
        raise ValueError(f"monitor mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off":
        disarm()
        return
    with _lock:
        _mode = mode
        _recording_only = False
        _warned.clear()
    _plugins.load_backends_of_imported_dsls()
    for hooks in _hooked_backends():
        hooks.install_monitor()
    logger.debug("monitor armed: %s", mode)


def _arm_for_recording() -> None:
    """Armed (``"warn"``) so that a recording sees compiles, which it records: not news.

    ``warmkit record`` of a command that warms nothing up: each compile is what
    is being recorded, not a stall after a warmup, so it is logged at INFO. A
    warmup in the process (``arm`` again) makes later misses warnings again.
    """
    global _recording_only
    arm("warn")
    with _lock:
        _recording_only = True


def disarm() -> None:
    """Turn the monitor off and uninstall the backends' hooks. Events are kept."""
    global _mode
    with _lock:
        _mode = "off"
    for hooks in _hooked_backends():
        hooks.uninstall_monitor()
    logger.debug("monitor disarmed")


def mode() -> str:
    """The current mode: ``"off"``, ``"warn"`` or ``"error"``."""
    return _mode


@contextlib.contextmanager
def allow(reason: str) -> Iterator[None]:
    """Permit runtime compiles inside this block (this thread or task); they are recorded with ``reason``.

    Raises:
        ValueError: an empty reason.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(
            "monitor.allow() needs a non-empty reason, so the event log explains itself"
        )
    token = _allow.set(reason)
    try:
        yield
    finally:
        _allow.reset(token)


def events() -> tuple[MonitorEvent, ...]:
    """Every event recorded since the process started (or the last ``clear()``)."""
    with _lock:
        return tuple(_events)


def clear() -> None:
    """Forget recorded events and per-key warnings."""
    with _lock:
        _events.clear()
        _warned.clear()


def managed_compile() -> contextlib.AbstractContextManager[None]:
    """Mark compiles in this block as warmkit's own, so backend hooks do not report them twice."""
    return VarScope(_managed, True)


class _CompileScope:
    """``managed_compile()`` and ``target_scope(target)`` in one: warmup enters one per key."""

    __slots__ = ("_target", "_tokens")

    def __init__(self, target: str | None) -> None:
        self._target = target

    def __enter__(self) -> None:
        self._tokens = (_managed.set(True), _target_var.set(self._target))

    def __exit__(self, *exc: object) -> None:
        managed, target = self._tokens
        _target_var.reset(target)
        _managed.reset(managed)


def compile_scope(target: str | None) -> contextlib.AbstractContextManager[None]:
    """A compile of warmkit's own (``managed_compile``) for ``target`` (``target_scope``)."""
    return _CompileScope(target)


def _in_scope(target: str | None, fn: Callable[[Any], Any], arg: Any) -> Any:
    """``fn(arg)`` in ``compile_scope(target)``; run it in a context copy, which undoes the sets.

    What warmup runs once per key: a context copy costs ~0.1 us, a scope's
    sets and resets ~1 us.
    """
    _managed.set(True)
    _target_var.set(target)
    return fn(arg)


def in_managed_compile() -> bool:
    """True while warmkit itself compiles in this thread (warmup or ``get_or_compile``)."""
    return _managed.get()


def on_miss(
    *,
    kernel: str,
    key: Any,
    backend: str | None,
    context: Any = None,
    kind: str = "compile",
    why: Callable[[], str | None] | None = None,
) -> None:
    """Report a compile (or autotune benchmark) about to happen at runtime; call it *before* the work.

    Disarmed: nothing. ``"warn"``: one warning per (kernel, key). ``"error"``:
    records a ``"refused"`` event and raises, unless inside ``allow()``.

    Args:
        kernel: the kernel's name.
        key: the compile key, the backend's specialization, or the autotune key.
        backend: the backend's name.
        context: the caller's runtime context, if any.
        kind: ``"compile"``, or ``"autotune"`` for a runtime autotune benchmark.
        why: called once, for the warning only: why the key's entry is missing, in one line.

    Raises:
        RuntimeCompileError: in ``"error"`` mode outside ``allow()``.
    """
    current = _mode
    if current == "off":
        return
    reason = _allow.get()
    if reason is not None:
        return
    if current == "error":
        with _lock:
            _events.append(MonitorEvent(kernel, key, backend, context, 0.0, "refused", current))
        metrics.observe_event(kernel, backend, "refused")
        raise RuntimeCompileError(kernel, key, backend, context, kind=kind)
    try:
        ident: tuple[str, Any] = (kernel, key)
        hash(ident)
    except TypeError:  # a backend's raw specialization may be a list or a dict
        ident = (kernel, ("repr", repr(key)))
    if kind != "compile":
        ident = (*ident, kind)  # type: ignore[assignment]
    with _lock:
        first = ident not in _warned
        _warned.add(ident)
    if first:
        ctx = f" (context: {context})" if context is not None else ""
        if _recording_only:
            logger.info(
                "recorded a runtime %s: kernel %s key %r on backend %s%s",
                "autotune benchmark" if kind == "autotune" else "compile",
                kernel,
                key,
                backend,
                ctx,
            )
            return
        reason = why() if why is not None else None
        logger.warning(
            "runtime %s after warmup: kernel %s key %r on backend %s%s; add it to the "
            "warmup registrations to avoid this stall%s",
            "autotune benchmark" if kind == "autotune" else "compile",
            kernel,
            key,
            backend,
            ctx,
            f" (why: {reason})" if reason else "",
        )


def record(
    *,
    kernel: str,
    key: Any,
    backend: str | None,
    context: Any = None,
    seconds: float,
    kind: str,
) -> MonitorEvent | None:
    """Record a runtime compile (or load) that happened; returns the event, or None when disarmed."""
    current = _mode
    if current == "off":
        return None
    event = MonitorEvent(kernel, key, backend, context, seconds, kind, current, _allow.get())
    with _lock:
        _events.append(event)
    metrics.observe_event(kernel, backend, kind)
    return event


_plugins.on_backend_loaded(_hook_up)
