"""Compiling one key of a ``TritonKernel``: the compiler part of ``TritonBackend``.

Two ways to compile a key, both through the kernel's own ``JITFunction.warmup``
with the kernel's ``warmup_args(key)`` and ``launch_options(key)``:

* **device** (``target=None``): on the live GPU. After Triton's compile-only
  warmup, the module is loaded and the launcher built
  (``CompiledKernel._init_handles``), so the first real launch compiles, loads
  and builds nothing. Returns a :class:`TritonExecutor`.
* **ahead of time** (``target="cuda:90"`` ...): on any host, GPU or not, with a
  driver that reports the declared target (see ``_aot``). Fills the Triton
  cache; returns an :class:`AotArtifact` and writes a validity record into each
  entry (``warmkit-aot.json``).

Inside ``compile_scope(target, jobs)`` with ``jobs > 1``, compiles run under
Triton's ``AsyncCompileMode`` on a pool of ``jobs`` threads (Triton releases
the GIL while compiling). The core calls ``compile()`` from its own worker
threads; each call submits its compile and waits for it, so up to ``jobs``
compiles run at once, and keys that map to one Triton cache entry share one
compile (``AsyncCompileMode`` dedupes by Triton's cache key).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from warmkit import current_fleet, pinning
from warmkit._plugin.contract import early_context

from . import _autotune, _cuda, _envs, _hooks, _pins, _setup, _stack, _torch_start, _tuned
from . import _triton_api as api
from ._aot import (
    AotArtifact,
    AotDriver,
    Target,
    aot_driver,
    cache_dir,
    parse_target,
    real_driver,
    require_device,
    routing,
    validate_target,
)
from ._entry import entry_dir, record_entry, verifying, write_entry_record
from ._kernel import InterpretedExecutor, TritonExecutor, check_warmup_args
from ._probe import AotHit, Loaded, Probed, aot_hit, entry_on_disk, probing
from ._triton_api import require_triton

__all__ = ["INTERPRETER", "TritonCompiler", "device_target"]

logger = logging.getLogger(__name__)

#: ``default_target()`` under ``TRITON_INTERPRET=1``.
INTERPRETER = "interpreter"

_prep_lock = threading.RLock()


class _ContextThreadPool(ThreadPoolExecutor):
    """A thread pool whose tasks run in a copy of the submitting thread's context.

    Triton's compile runs in these threads; the copied context carries
    warmkit's "managed compile" marks, so our hooks do not report warmup
    compiles as runtime events.
    """

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        ctx = contextvars.copy_context()
        return super().submit(ctx.run, fn, *args, **kwargs)


@attrs.define
class _Scope:
    target: Target | None
    jobs: int
    driver: AotDriver | None = None
    device: Any = None
    pool: ThreadPoolExecutor | None = None
    mode: Any = None
    fns: weakref.WeakSet[Any] = attrs.Factory(weakref.WeakSet)
    lock: threading.Lock = attrs.Factory(threading.Lock)


def _resolve(kernel: Any) -> Any:
    """A ``FutureKernel`` -> its ``CompiledKernel`` (thread-safe); anything else unchanged."""
    return api.future_result(kernel, _prep_lock)


@contextlib.contextmanager
def _device_guard(device: Any) -> Iterator[Any]:
    """Make ``device`` current in this thread (the core's worker threads start on device 0)."""
    active = api.active_driver()
    current = active.get_current_device()
    if device is None or device == current:
        yield current
        return
    active.set_current_device(device)
    try:
        yield device
    finally:
        active.set_current_device(current)


def device_target() -> str | None:
    """The local GPU's target (``"cuda:90"`` on an H100/H200), or None without a GPU.

    Under ``TRITON_INTERPRET=1`` it is ``"interpreter"``: kernels run on CPU
    tensors and a device warmup only prepares interpreter executors.
    """
    try:
        if api.interpreting():
            return INTERPRETER
        if "torch" not in sys.modules and api.installed_driver() is None:
            cc = _cuda.capability()  # without importing torch: ~1.8 s on an H100
            if cc is not None:
                return f"cuda:{cc}"
        target = real_driver().get_current_target()
    except Exception as exc:  # noqa: BLE001 - no GPU, no driver: no default target
        logger.debug("no Triton device target: %s", exc)
        return None
    if target.backend == "cuda":
        return f"cuda:{target.arch}"
    return f"{target.backend}:{target.arch}"


class TritonCompiler:
    """Compile scopes, device and ahead-of-time compiles, and the cache redirect of one backend.

    It is the ``StackCompiler`` that ``_autotune.compile_stack`` compiles each
    variant of an autotuned or heuristic key with.
    """

    def __init__(self) -> None:
        self._scopes: dict[str | None, list[_Scope]] = {}
        self._scopes_lock = threading.Lock()
        self._redirects = 0
        self._forgotten: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def redirected(self) -> bool:
        """Whether Triton's cache is redirected (``redirect``) right now."""
        return self._redirects > 0

    def device_target(self) -> str | None:
        """This host's device target (``device_target()``)."""
        return device_target()

    def compile_key(self, kernel: Any, key: Any, target: str | None) -> Any:
        """``TritonBackend.compile``: :meth:`compile`, ahead of time with the key's pinned identity.

        A key with pinned identity (``_pins``) compiles with the pinned globals,
        or is refused naming what differs (``PinMismatchError``).
        """
        aot = target not in (None, INTERPRETER)
        return _pins.compile_pinned(self.compile, kernel, key, target, aot)

    def worker_target(self, target: str | None) -> str | None:
        """What a compile worker process compiles for, so that this process's compile hits its entry.

        Ahead of time for the device's own target (the hash of an AOT compile equals
        a device compile's, ``docs/triton.md``) or for ``target``, into the shared
        Triton cache. None inside ``cache_scope`` (a worker would not see the
        redirect) and under the interpreter.
        """
        if self.redirected:
            return None
        if target is not None and pinning():
            return None  # a worker would compile with this host's globals, not the pinned ones
        if target is None:
            target = device_target()
        if target is None or target == INTERPRETER:
            return None
        return str(validate_target(target))

    @contextlib.contextmanager
    def compile_scope(self, target: str | None, jobs: int) -> Iterator[Any]:
        """Set up one warmup's compiles for ``target``: AOT driver, compile pool, hooks.

        Args:
            target: None for this device, else e.g. ``"cuda:90"``.
            jobs: how many compiles may run at once (1 = serial, no pool).

        Raises:
            ValueError: an unknown target string.
            TritonNotInstalledError: Triton is missing.
        """
        require_triton()
        _setup.check()  # what warmkit.prepare() read early is still what this warmup reads
        if target == INTERPRETER:
            target = None
        tgt = parse_target(target) if target is not None else None
        scope = _Scope(target=tgt, jobs=max(1, int(jobs)))
        with contextlib.ExitStack() as stack:
            # the CUDA start beside the imports below, not after them (warmkit._plugin.cuda)
            stack.enter_context(early_context(tgt is None and not api.interpreting()))
            _setup.settle_torch()  # before the compile threads: they must not race its import
            stack.enter_context(_hooks.probe())
            if tgt is not None:
                stack.enter_context(routing())
                scope.driver = AotDriver(tgt)
            else:
                try:
                    scope.device = real_driver().get_current_device()
                except Exception as exc:  # noqa: BLE001 - reported per key by compile()
                    logger.debug("compile_scope: no device (%s)", exc)
                if _envs.get("WARMKIT_TRITON_TORCH_START"):
                    # torch's own first-use costs beside the kernels' imports (_torch_start);
                    # here only: an ahead-of-time warmup (a compile worker's too) loads into no
                    # device, so the variable does not apply to it
                    if scope.device is not None:
                        stack.callback(_torch_start.start(scope.device))
                    else:
                        _torch_start.not_made()
            if scope.jobs > 1:
                scope.pool = _ContextThreadPool(scope.jobs, thread_name_prefix="warmkit-triton")
                scope.mode = api.async_compile_mode(scope.pool)
            skey = str(tgt) if tgt is not None else None
            with self._scopes_lock:
                self._scopes.setdefault(skey, []).append(scope)
            try:
                yield scope
            finally:
                with self._scopes_lock:
                    self._scopes[skey].remove(scope)
                    if not self._scopes[skey]:
                        del self._scopes[skey]
                self._close_scope(scope)

    def _close_scope(self, scope: _Scope) -> None:
        if scope.mode is not None:
            # Finalize anything still outstanding, in a throwaway context so that
            # AsyncCompileMode.__exit__ resets no context variable of the caller.
            contextvars.copy_context().run(scope.mode.__exit__, None, None, None)
        if scope.pool is not None:
            scope.pool.shutdown(wait=True)
        for fn in list(scope.fns):
            _replace_futures(fn)
            if scope.driver is not None:
                # the AOT binder and its CompiledKernels (cubins in memory) are not needed any more
                api.drop_device(fn, scope.driver.device)

    def scope_for(self, target: str | None) -> _Scope | None:
        with self._scopes_lock:
            stack = self._scopes.get(target)
            return stack[-1] if stack else None

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        require_triton()
        loaded = None if probing.get() is not None else Loaded.take(kernel, key, target)
        if loaded is not None:
            return loaded  # entry_key() just walked Triton's launch path and loaded the entry
        if target == INTERPRETER:
            target = None
        tgt = parse_target(target) if target is not None else None
        name = getattr(kernel, "name", type(kernel).__qualname__)
        fn = getattr(kernel, "fn", None)
        if fn is None or not api.is_jit_function(fn):
            raise TypeError(
                f"kernel {name!r} uses the triton backend but has no @triton.jit fn; "
                "subclass warmkit_triton.TritonKernel and set fn"
            )
        options = dict(kernel.launch_options(key) or {})
        stack = _stack.unwrap(fn)
        if stack is not None:  # @triton.autotune / @triton.heuristics over the @triton.jit function
            scope = self.scope_for(str(tgt) if tgt is not None else None)
            if tgt is not None and api.is_interpreted(stack.jit):
                raise RuntimeError(
                    f"kernel {name!r}: TRITON_INTERPRET=1 is set, so Triton interprets kernels and "
                    f"cannot compile them for {tgt}; unset it for an ahead-of-time compile"
                )
            with _hooks.managed(), _hooks.probe():
                return _autotune.compile_stack(
                    self, kernel, name, key, stack, kernel.warmup_args(key), options, tgt, scope
                )
        args, kwargs = check_warmup_args(name, fn, kernel.warmup_args(key), options)
        if api.is_interpreted(fn):
            if tgt is not None:
                raise RuntimeError(
                    f"kernel {name!r}: TRITON_INTERPRET=1 is set, so Triton interprets kernels and "
                    f"cannot compile them for {tgt}; unset it for an ahead-of-time compile"
                )
            return InterpretedExecutor(kernel=name, key=key, fn=fn, launch_options=options)
        scope = self.scope_for(str(tgt) if tgt is not None else None)
        with _hooks.managed(), _hooks.probe(), verifying():
            if tgt is not None:
                return self.compile_aot(name, key, fn, args, kwargs, options, tgt, scope)
            return self.compile_device(name, key, kernel, fn, args, kwargs, options, scope)

    def _warmup(
        self,
        fn: Any,
        args: Any,
        kwargs: Any,
        options: Any,
        scope: _Scope | None,
        *,
        aot: bool = False,
    ) -> Any:
        def call() -> Any:
            return api.warmup(fn, args, kwargs, options)

        if scope is not None:
            scope.fns.add(fn)
        hashes = probing.get()
        if hashes is not None:
            # One walk of the launch path: an entry on disk is loaded now (a verified hit; for
            # an AOT target only checked, not read: aot_hit); otherwise only its hash comes
            # out, and the fleet locks and compiles it.
            digest, kernel = api.probe_or_load(
                fn, args, kwargs, options, entry_on_disk, aot_hit if aot else None
            )
            if kernel is None:
                raise Probed(digest)
            hashes.append(digest)  # type: ignore[arg-type]  # not None: a kernel was loaded
            return kernel
        if scope is None or scope.mode is None:
            kernel = call()
        else:
            with api.active_async_mode(scope.mode):
                kernel = call()
            kernel = _resolve(kernel)
            # The same call again, synchronously: an in-memory hit that also makes sure
            # this exact launch signature has its entry when its compile was shared
            # with another key (Triton 3.6 records only the first key's entry).
            kernel = _resolve(call()) or kernel
        if kernel is None:
            raise RuntimeError(
                f"Triton did not compile {getattr(fn, '__name__', fn)}: a jit_cache_hook returned True"
            )
        return _resolve(kernel)

    @staticmethod
    def _prepare(fn: Any) -> Any:
        """Compute the function's hash and create its binder for the active device, once, under a lock.

        Triton computes both lazily and not thread-safely (3.6's ``cache_key``
        exposes a placeholder to other threads while it runs); doing it here
        first keeps parallel compiles from racing on them.
        """
        with _prep_lock:
            return api.prepare_function(fn)

    def compile_device(
        self,
        name: str,
        key: Any,
        kernel: Any,
        fn: Any,
        args: Any,
        kwargs: Any,
        options: Any,
        scope: _Scope | None,
    ) -> TritonExecutor:
        require_device(name)
        self.forget_in_memory(fn)
        with _device_guard(scope.device if scope is not None else None):
            device = self._prepare(fn)
            compiled = self._warmup(fn, args, kwargs, options, scope)
            # Load the module and build the launcher now (Triton 3.6 builds a C launcher
            # with gcc here), so that the first real launch builds and loads nothing.
            api.load_handles(compiled)
            spec = api.specialization_of(
                fn, device, [api.wrap_warmup_arg(a) for a in args], {**kwargs, **options}
            )
        digest = api.compiled_identity(compiled)[0]
        hit = _hooks.pop_outcome(digest)
        if hit is False:
            record_entry(entry_dir(cache_dir(), digest))
        executor = TritonExecutor(
            kernel=name,
            key=key,
            fn=fn,
            compiled=compiled,
            launch_options=options,
            device=device,
            cache_hit=hit is not False,
            specialization=spec,
            verify=bool(getattr(kernel, "verify_launches", False)),
        )
        with _device_guard(device):
            executor.primed = executor.prime(args, kwargs)
        logger.debug(
            "kernel %s key %r: %s on device %s",
            name,
            key,
            "cached" if hit is not False else "compiled",
            device,
        )
        return executor

    def compile_aot(
        self,
        name: str,
        key: Any,
        fn: Any,
        args: Any,
        kwargs: Any,
        options: Any,
        tgt: Target,
        scope: _Scope | None,
    ) -> AotArtifact:
        drv = scope.driver if scope is not None and scope.driver is not None else AotDriver(tgt)
        self.forget_in_memory(fn)
        with aot_driver(drv):
            self._prepare(fn)
            compiled = self._warmup(fn, args, kwargs, options, scope, aot=True)
        digest, fname = api.compiled_identity(compiled)
        hit = _hooks.pop_outcome(digest)
        if isinstance(compiled, AotHit):
            hit = True  # checked on disk, never compiled: Triton's listener had no word on it
        artifact = AotArtifact(
            kernel=name,
            key=key,
            target=str(tgt),
            hash=digest,
            name=fname,
            cache_dir=cache_dir(),
            cache_hit=hit is not False,
            launcher=api.launcher_recipe(compiled),
            identity=_pins.entry_identity(fn),
        )
        fleet = current_fleet()
        if fleet is None or not fleet.read_only:  # read-only serving writes nothing
            write_entry_record(artifact, tgt)
            if not artifact.cache_hit:
                record_entry(artifact.entry_dir)
        if scope is None:
            api.drop_device(fn, drv.device)
        logger.debug(
            "kernel %s key %r: %s for %s (%s)",
            name,
            key,
            "cached" if artifact.cache_hit else "compiled",
            tgt,
            artifact.hash[:12],
        )
        return artifact

    def forget_in_memory(self, fn: Any) -> None:
        if self._redirects == 0:
            return
        with _prep_lock:
            if fn in self._forgotten:
                return
            self._forgotten.add(fn)
            for cache in api.kernel_caches(fn):
                cache.clear()

    @contextlib.contextmanager
    def redirect(self, directory: str | os.PathLike[str]) -> Iterator[Path]:
        """Redirect Triton's cache to ``directory`` for the block (used to build a bundle).

        Variants already in Triton's in-memory caches would not be written to
        the new directory, so within the block each kernel's in-memory cache is
        dropped before its first compile.
        """
        path = Path(directory).resolve()
        path.mkdir(parents=True, exist_ok=True)
        previous = cache_dir()
        with api.cache_dir_scope(path):
            with self._scopes_lock:
                self._redirects += 1
                # tuned results of the cache in effect before are found, and copied into this one
                _tuned.lookup_dirs.append(previous)
            try:
                yield path
            finally:
                with self._scopes_lock:
                    _tuned.lookup_dirs.remove(previous)
                    self._redirects -= 1
                    if self._redirects == 0:
                        self._forgotten = weakref.WeakSet()


def _replace_futures(fn: Any) -> None:
    """Swap resolved ``FutureKernel`` placeholders in ``fn``'s in-memory caches for their kernels.

    Triton 3.9 leaves the placeholder in the cache after an ``AsyncCompileMode``
    compile; every later launch through ``fn[grid]`` would then pay an extra
    attribute indirection.
    """
    for kernel_cache in api.kernel_caches(fn):
        for k, v in list(kernel_cache.items()):
            done = api.resolved_future(v)
            if done is not None:
                kernel_cache[k] = done
