"""CuTe DSL's runtime compiles, chained, feeding ``warmkit.monitor``.

Two methods are wrapped, for every ``@cute.jit`` function in the process:

* ``CompileCallable.__call__`` (``cute.compile(fn, ...)``): ``on_miss`` runs
  first, so in ``"error"`` mode nothing is traced or compiled;
* ``CompilerBackend.compile`` (every real compile, also the implicit one of a
  raw ``@cute.jit`` function called with tensors): ``on_miss`` runs before
  the MLIR module is lowered to a cubin (after the Python was traced, which
  is how CuTe finds out that it has to compile).

A compile reported by the first is not reported again by the second. Each
wrapper calls whatever was installed before; uninstalling restores exactly
that, or leaves ours as a pass-through inside a chain someone built on top.
warmkit's own compiles (``warmkit.monitor.in_managed_compile()``) are not reported.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from warmkit import MethodHooks

from . import _cute_api as api

__all__ = ["install", "installed", "uninstall"]

logger = logging.getLogger(__name__)

BACKEND = "cutedsl"

_lock = threading.RLock()
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("warmkit_cute_inside", default=False)


def _monitor() -> Any:
    from warmkit import monitor

    return monitor


# warmkit's own compiles pass straight through (warmkit.MethodHooks: chained, restorable)
_hooks = MethodHooks("CuTe DSL runtime hooks", passthrough=lambda: _monitor().in_managed_compile())


def _name(fn: Any) -> str:
    inner = getattr(fn, "__wrapped__", fn)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"


def _report(name: str, key: str, run: Callable[[], Any]) -> Any:
    _monitor().on_miss(kernel=name, key=key, backend=BACKEND, context=None)  # raises in error mode
    token = _inside.set(True)
    t0 = time.perf_counter()
    try:
        result = run()
    finally:
        _inside.reset(token)
    _monitor().record(
        kernel=name,
        key=key,
        backend=BACKEND,
        context=None,
        seconds=time.perf_counter() - t0,
        kind="compile",
    )
    return result


def _compile_call(previous: Callable[..., Any], callable_: Any, *args: Any, **kwargs: Any) -> Any:
    if _inside.get() or not args:
        return previous(callable_, *args, **kwargs)
    fn, rest = args[0], args[1:]
    key = f"cute.compile({', '.join(type(a).__name__ for a in rest)}) options={kwargs.get('options')!r}"
    return _report(_name(fn), key, lambda: previous(callable_, *args, **kwargs))


def _backend_compile(
    previous: Callable[..., Any], backend: Any, ctx: Any, *a: Any, **k: Any
) -> Any:
    if _inside.get():
        return previous(backend, ctx, *a, **k)
    name = _name(ctx.funcBody) if getattr(ctx, "funcBody", None) else str(ctx.function_name)
    key = f"jit {ctx.function_name} module {str(ctx.module_hash)[:16]}"
    return _report(name, key, lambda: previous(backend, ctx, *a, **k))


def install() -> None:
    """Start reporting runtime CuTe compiles to ``warmkit.monitor`` (idempotent)."""
    with _lock:
        _hooks.install(
            (
                (api.compile_hook_point(), _compile_call),
                (api.backend_compile_hook_point(), _backend_compile),
            )
        )


def install_when_imported() -> None:
    """:func:`install` now if ``cutlass.cute`` is imported, else right after its import (cancelled by :func:`uninstall`)."""
    with _lock:
        _hooks.install_when_imported("cutlass.cute", install)


def uninstall() -> None:
    """Stop reporting; restore exactly the methods that were there before (idempotent)."""
    with _lock:
        _hooks.uninstall()


def installed() -> bool:
    """Whether warmkit's wrappers are the methods installed right now."""
    with _lock:
        return _hooks.installed()
