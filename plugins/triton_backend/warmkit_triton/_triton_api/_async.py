"""Accessors for Triton's async compile mode: parallel compiles, and the cache-key probe that rides it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ._runtime import warmup


def async_compile_mode(executor: Any) -> Any:
    """An ``AsyncCompileMode`` on ``executor`` (errors kept for ``result()``), safe across threads.

    Triton's dedupe (``submit``) is not thread-safe; the core calls in from
    several worker threads, so ``submit`` takes a lock. Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime._async_compile import AsyncCompileMode

    class _LockedAsyncCompileMode(AsyncCompileMode):
        def __init__(self, executor: Any) -> None:
            super().__init__(executor, ignore_errors=True)
            self._lock = threading.Lock()

        def submit(self, *args: Any) -> Any:
            with self._lock:
                return super().submit(*args)

    return _LockedAsyncCompileMode(executor)


@contextlib.contextmanager
def active_async_mode(mode: Any) -> Iterator[None]:
    """Make ``mode`` the async compile mode of this context for the block. Checked: 3.6.0, 3.9.0."""
    from triton.runtime import _async_compile

    token = _async_compile.active_mode.set(mode)
    try:
        yield
    finally:
        _async_compile.active_mode.reset(token)


class _CacheKeyProbe(Exception):
    """Carries the cache key out of ``JITFunction.warmup`` before anything compiles."""

    def __init__(self, key: str) -> None:
        self.key = key


class _ProbeMode:
    """An ``AsyncCompileMode`` stand-in that refuses every submission, raising its cache key.

    ``JITFunction._do_compile`` computes ``get_cache_key(src, backend, options,
    env_vars)`` (the string ``triton.compile`` hashes) and hands it to the
    active async mode's ``submit(key, compile, finalize[, cleanup])``, before
    compiling or caching anything. With ``load_if``, a submission whose hash
    it accepts is run at once instead (``compile`` then finds the entry on
    disk) and its ``CompiledKernel`` returned, as a synchronous compile would;
    with ``stand_in`` too, what ``stand_in(hash, src)`` makes is returned
    instead of running ``compile`` (None: ``compile`` runs).
    """

    def __init__(
        self,
        load_if: Callable[[str], bool] | None = None,
        stand_in: Callable[[str, Any], Any] | None = None,
    ) -> None:
        self.load_if = load_if
        self.stand_in = stand_in
        self.digest: str | None = None

    def submit(self, key: str, *fns: Any) -> Any:
        import hashlib

        self.digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        if self.load_if is not None and len(fns) >= 2 and self.load_if(self.digest):
            compile_fn, finalize = fns[0], fns[1]
            kernel = None
            if self.stand_in is not None:
                src = _compile_source(compile_fn)
                if src is not None:
                    kernel = self.stand_in(self.digest, src)
            if kernel is None:
                kernel = compile_fn()
            finalize(kernel)
            return kernel
        raise _CacheKeyProbe(key)


def _compile_source(compile_fn: Any) -> Any:
    """The ``ASTSource`` the async compile closure of ``_do_compile`` would compile; None if not found.

    None too under ``TRITON_ALWAYS_COMPILE`` (``knobs.compilation.always_compile``),
    where Triton's ``compile`` would not take the disk hit. Checked: 3.6.0, 3.9.0.
    """
    from triton import knobs

    if knobs.compilation.always_compile:
        return None
    code = getattr(compile_fn, "__code__", None)
    cells = getattr(compile_fn, "__closure__", None)
    if code is None or not cells or "src" not in code.co_freevars:
        return None
    src = cells[code.co_freevars.index("src")].cell_contents
    return src if hasattr(src, "signature") and hasattr(src, "name") else None


def probe_cache_hash(
    fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]
) -> str | None:
    """The cache hash (hex sha256) ``warmup(fn, args, kwargs, options)`` would write, compiling nothing.

    Nothing is compiled, written or put in the in-memory cache. Returns None
    when the variant is already in ``fn``'s in-memory cache (Triton has nothing
    to compile). Checked: 3.6.0, 3.9.0.
    """
    import hashlib

    with active_async_mode(_ProbeMode()):
        try:
            warmup(fn, args, kwargs, options)
        except _CacheKeyProbe as probe:
            return hashlib.sha256(probe.key.encode("utf-8")).hexdigest()
    return None


def probe_or_load(
    fn: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
    load_if: Callable[[str], bool],
    stand_in: Callable[[str, Any], Any] | None = None,
) -> tuple[str | None, Any]:
    """``(hash, kernel)``: the cache hash :func:`warmup` would write, and the loaded kernel if ``load_if(hash)``.

    One walk of Triton's launch path: when ``load_if`` accepts the hash (its
    entry is on disk), Triton's ``compile`` runs right there (a disk hit) and
    the ``CompiledKernel`` is returned, in ``fn``'s in-memory cache as after
    :func:`warmup`; otherwise nothing is compiled, written or cached and the
    kernel is None. ``(None, None)``: the variant is already in memory.

    ``stand_in(hash, src)``, if given, is asked first for an accepted hash
    (``src``: the ``ASTSource``, with its ``name`` and ``signature``): what it
    returns takes the ``CompiledKernel``'s place, in the result and in ``fn``'s
    in-memory cache, and Triton reads nothing of the entry; when it returns
    None, or under ``TRITON_ALWAYS_COMPILE``, Triton's ``compile`` runs.
    Checked: 3.6.0, 3.9.0.
    """
    mode = _ProbeMode(load_if, stand_in)
    with active_async_mode(mode):
        try:
            kernel = warmup(fn, args, kwargs, options)
        except _CacheKeyProbe:
            return mode.digest, None
    return mode.digest, kernel if mode.digest is not None else None


def is_future(kernel: Any) -> bool:
    """Whether ``kernel`` is a ``FutureKernel`` (a compile submitted under an async mode).

    Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime._async_compile import FutureKernel

    return isinstance(kernel, FutureKernel)


def future_result(kernel: Any, lock: Any) -> Any:
    """A ``FutureKernel``'s ``CompiledKernel``: wait for it outside ``lock``, finalize under it.

    Anything else is returned unchanged; after resolution, :func:`kernel_caches`
    entries that still hold the placeholder (3.9) can be replaced by the
    result: ``kernel.__dict__["kernel"]``. Checked: 3.6.0, 3.9.0.
    """
    if not is_future(kernel):
        return kernel
    from concurrent.futures import wait

    fut = getattr(kernel, "future", None)
    if fut is not None:
        wait([fut])
    with lock:
        return kernel.result()


def resolved_future(kernel: Any) -> Any:
    """The ``CompiledKernel`` a finished ``FutureKernel`` holds, or None (not resolved, not a future).

    Checked: 3.6.0, 3.9.0.
    """
    return kernel.__dict__.get("kernel") if is_future(kernel) else None
