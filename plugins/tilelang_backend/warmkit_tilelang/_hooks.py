"""TileLang's runtime compiles, chained, feeding ``warmkit.monitor``.

TileLang has no hook API, so three methods are wrapped, for every kernel in
the process (warmkit's or a raw ``@tilelang.jit`` function or a direct
``tilelang.compile`` call):

* ``JITImpl.compile`` (what a ``@tilelang.jit`` function calls on an
  in-process miss): only names the event, ``module.function(args)``;
* ``KernelCache.cached`` (every compile path goes through it): with the cache
  disabled, the monitor's ``on_miss`` runs here, before compiling;
* ``KernelCache._load_kernel_from_disk`` (after an in-memory miss, before any
  compile): ``on_miss`` runs here, so in ``"error"`` mode the call is refused
  before TileLang loads or compiles anything; its result says whether the
  event was a disk hit (``"disk_hit"``) or a compile (``"compile"``).

Each wrapper calls whatever was installed before it (another tool's wrapper
too); uninstalling puts that back exactly. If someone wrapped on top of ours
meanwhile, ours stays in their chain as a pass-through, so their chain is never
broken. Compiles warmkit performs itself (``warmkit.monitor.in_managed_compile()``)
are not reported; their outcome (disk hit or compile) goes to :func:`outcome`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from warmkit import MethodHooks

from . import _tilelang_api as api

__all__ = ["install", "install_when_imported", "installed", "outcome", "uninstall"]

logger = logging.getLogger(__name__)

BACKEND = "tilelang"

_lock = threading.RLock()
_reporting = False
_probes = 0
_hooks = MethodHooks("TileLang runtime hooks")  # warmkit.MethodHooks: chained, restorable


@attrs.define
class _Call:
    """One call into ``KernelCache.cached`` being watched."""

    name: str
    spec: str | None = None
    announced: bool = False
    disk_hit: bool | None = None
    cache_key: str | None = None


@attrs.define
class Outcome:
    """What a managed compile found: ``disk_hit`` True (loaded from disk), False (compiled), None (cache off)."""

    disk_hit: bool | None = None
    cache_key: str | None = None


_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "warmkit_tl_call", default=None
)
_jit_spec: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "warmkit_tl_jit", default=None
)
_outcome: contextvars.ContextVar[Outcome | None] = contextvars.ContextVar(
    "warmkit_tl_outcome", default=None
)


def _monitor() -> Any:
    from warmkit import monitor

    return monitor


def _watching() -> bool:
    return _reporting and not _monitor().in_managed_compile()


# -- the wrapped methods ----------------------------------------------------------------------


def _jit_compile(previous: Callable[..., Any], fn: Any, *args: Any, **kwargs: Any) -> Any:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    token = _jit_spec.set((api.jit_function_name(fn), f"({', '.join(parts)})"))
    try:
        return previous(fn, *args, **kwargs)
    finally:
        _jit_spec.reset(token)


def _cached(
    previous: Callable[..., Any], cache: Any, func: Any = None, *args: Any, **kwargs: Any
) -> Any:
    if not _watching():
        return previous(cache, func, *args, **kwargs)
    jit = _jit_spec.get()
    call = _Call(name=jit[0] if jit else api.prim_func_name(func), spec=jit[1] if jit else None)
    if not api.cache_enabled():
        _announce(call, None)  # no disk lookup will follow: this is the last point before compiling
    token = _call.set(call)
    t0 = time.perf_counter()
    try:
        result = previous(cache, func, *args, **kwargs)
    finally:
        _call.reset(token)
    if call.announced:
        _monitor().record(
            kernel=call.name,
            key=_describe(call),
            backend=BACKEND,
            context=None,
            seconds=time.perf_counter() - t0,
            kind="disk_hit" if call.disk_hit else "compile",
        )
    return result


def _load_from_disk(
    previous: Callable[..., Any], cache: Any, key: str, *args: Any, **kwargs: Any
) -> Any:
    call = _call.get()
    if call is not None and not call.announced:
        call.cache_key = key
        _announce(
            call, key
        )  # raises RuntimeCompileError in "error" mode: nothing loaded or compiled
    result = previous(cache, key, *args, **kwargs)
    hit = result is not None
    if call is not None:
        call.disk_hit = hit
    out = _outcome.get()
    if out is not None:
        out.disk_hit, out.cache_key = hit, key
    return result


def _describe(call: _Call) -> str:
    key = f"cache key {call.cache_key[:16]}" if call.cache_key else "cache disabled"
    return f"{call.spec} {key}" if call.spec else key


def _announce(call: _Call, key: str | None) -> None:
    call.announced = True
    _monitor().on_miss(kernel=call.name, key=_describe(call), backend=BACKEND, context=None)


# -- install / uninstall ---------------------------------------------------------------------------


def _install_locked() -> None:
    _hooks.install(
        (
            (api.jit_compile_hook_point(), _jit_compile),
            (api.kernel_cache_hook_point(), _cached),
            (api.disk_load_hook_point(), _load_from_disk),
        )
    )


def _uninstall_locked() -> None:
    _hooks.uninstall()


def install() -> None:
    """Start reporting runtime TileLang compiles and disk loads to ``warmkit.monitor`` (idempotent)."""
    global _reporting
    with _lock:
        _reporting = True
        _install_locked()
    logger.debug("TileLang runtime hooks installed")


def install_when_imported() -> None:
    """:func:`install` now if TileLang is imported, else right after its import (cancelled by :func:`uninstall`)."""
    with _lock:
        _hooks.install_when_imported("tilelang", install)


def uninstall() -> None:
    """Stop reporting; restore exactly the methods that were there before (idempotent)."""
    global _reporting
    with _lock:
        _reporting = False
        if _probes == 0:
            _uninstall_locked()
    logger.debug("TileLang runtime hooks uninstalled")


def installed() -> bool:
    """Whether warmkit's wrappers are the methods installed right now."""
    with _lock:
        return _hooks.installed()


@contextlib.contextmanager
def outcome() -> Iterator[Outcome]:
    """Keep the hooks installed for a managed compile and capture whether it was a disk hit."""
    global _probes
    with _lock:
        _probes += 1
        _install_locked()
    out = Outcome()
    token = _outcome.set(out)
    try:
        yield out
    finally:
        _outcome.reset(token)
        with _lock:
            _probes -= 1
            if _probes == 0 and not _reporting:
                _uninstall_locked()
