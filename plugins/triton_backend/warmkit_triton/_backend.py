"""``TritonBackend``: the ``triton`` entry point of ``warmkit.backends``.

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
import threading
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from warmkit import current_fleet, pinning

from . import _autotune, _explain, _hooks, _pins, _setup, _stack, _tuned
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
from ._entry import (
    complete_entry,
    custom_cache_manager,
    describe_entry,
    entry_dir,
    entry_file_allowed,
    entry_hash,
    fingerprint,
    prepare_entries,
    record_entry,
    relocate_cache_entry,
    verify_cache_entry,
    verifying,
    write_entry_record,
)
from ._kernel import InterpretedExecutor, TritonExecutor, TritonKernel, check_warmup_args
from ._probe import Loaded, Probed, entry_on_disk, probing
from ._triton_api import INSTALL_HINT, TritonNotInstalledError, require_triton

__all__ = ["TritonBackend"]

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


class TritonBackend(_explain.IdentityCapabilities):
    """The Triton backend (entry point ``triton`` in ``warmkit.backends``).

    Constructed with no arguments by warmkit's plugin loader. See
    ``docs/architecture.md`` for the interface and ``docs/triton.md`` for how
    it compiles.
    """

    name = "triton"

    def __init__(self) -> None:
        self._scopes: dict[str | None, list[_Scope]] = {}
        self._scopes_lock = threading.Lock()
        self._redirects = 0
        self._forgotten: weakref.WeakSet[Any] = weakref.WeakSet()

    # -- availability and targets ---------------------------------------------------------

    def available(self) -> Any:
        """Whether Triton (>= 3.6) is importable; the install hint when not."""
        from warmkit import BackendStatus

        try:
            triton = require_triton()
        except TritonNotInstalledError as exc:
            return BackendStatus(
                ok=False, reason=str(exc), install_hint=INSTALL_HINT, version=exc.found
            )
        return BackendStatus(
            ok=True, reason=f"Triton {triton.__version__}", version=triton.__version__
        )

    def default_target(self) -> str | None:
        """The local GPU's target (``"cuda:90"`` on an H100/H200), or None without a GPU.

        Under ``TRITON_INTERPRET=1`` it is ``"interpreter"``: kernels run on CPU
        tensors and a device warmup only prepares interpreter executors.
        """
        try:
            if api.interpreting():
                return INTERPRETER
            target = real_driver().get_current_target()
        except Exception as exc:  # noqa: BLE001 - no GPU, no driver: no default target
            logger.debug("no Triton device target: %s", exc)
            return None
        if target.backend == "cuda":
            return f"cuda:{target.arch}"
        return f"{target.backend}:{target.arch}"

    def canonical_target(self, target: str) -> str:
        """The canonical spelling of a target (``"sm_90"`` -> ``"cuda:90"``), as ``default_target`` gives it.

        Raises:
            ValueError: an unknown target string, or one this Triton's ptxas cannot compile for.
        """
        return str(validate_target(target))

    def prepare(self, target: str | None) -> None:
        """The process's one-time setup, run early by ``warmkit.prepare()`` (``warmkit.Prepares``).

        Triton's import and ``triton_key()``, the specializer's lazy imports, the
        ptxas probes for a CUDA ``target``, and the driver (``_setup``).

        Raises:
            ValueError: ``target`` is malformed or this ptxas cannot compile for it.
        """
        _setup.prepare(target)

    def prime_worker(self, target: str) -> None:
        """In a compile worker process: one throwaway compile for ``target`` (``warmkit.PrimesWorkers``)."""
        _setup.prime_worker(target)

    def parallelism(self, target: str | None) -> int:
        """Compiles worth running at once: one per CPU core (Triton releases the GIL), at most 32."""
        return max(1, min(os.cpu_count() or 1, 32))

    def worker_target(self, target: str | None) -> str | None:
        """What a compile worker process compiles for, so that this process's compile hits its entry.

        Ahead of time for the device's own target (the hash of an AOT compile equals
        a device compile's, ``docs/triton.md``) or for ``target``, into the shared
        Triton cache. None inside ``cache_scope`` (a worker would not see the
        redirect) and under the interpreter.
        """
        if self._redirects:
            return None
        if target is not None and pinning():
            return None  # a worker would compile with this host's globals, not the pinned ones
        if target is None:
            target = self.default_target()
        if target is None or target == INTERPRETER:
            return None
        return self.canonical_target(target)

    # -- compiling ---------------------------------------------------------------------------

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
            stack.enter_context(_hooks.probe())
            if tgt is not None:
                stack.enter_context(routing())
                scope.driver = AotDriver(tgt)
            else:
                try:
                    scope.device = real_driver().get_current_device()
                except Exception as exc:  # noqa: BLE001 - reported per key by compile()
                    logger.debug("compile_scope: no device (%s)", exc)
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

    def _scope_for(self, target: str | None) -> _Scope | None:
        with self._scopes_lock:
            stack = self._scopes.get(target)
            return stack[-1] if stack else None

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        """Compile ``key`` of a ``TritonKernel`` for ``target``; return its executor.

        Ahead of time, a key with pinned identity (``_pins``) compiles with the
        pinned globals, or is refused naming what differs (``PinMismatchError``).

        Args:
            kernel: a ``TritonKernel`` instance.
            key: one of its ``CompileKey``\\ s.
            target: None for this process's GPU (device mode), else e.g.
                ``"cuda:90"`` (ahead of time, no GPU needed).

        Returns:
            A :class:`TritonExecutor` (device mode), an :class:`AotArtifact`
            (ahead of time), or an ``InterpretedExecutor`` (``TRITON_INTERPRET=1``).

        Raises:
            TritonNotInstalledError: Triton is missing (with the install hint).
            ValueError: an unknown target string.
            TypeError: ``warmup_args``/``launch_options`` do not match ``fn``
                (the message names the parameter), or ``kernel`` is not a TritonKernel.
            RuntimeError: device mode without a GPU.
        """
        aot = target not in (None, INTERPRETER)
        return _pins.compile_pinned(self._compile, kernel, key, target, aot)

    def _compile(self, kernel: Any, key: Any, target: str | None) -> Any:
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
            scope = self._scope_for(str(tgt) if tgt is not None else None)
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
        scope = self._scope_for(str(tgt) if tgt is not None else None)
        with _hooks.managed(), _hooks.probe(), verifying():
            if tgt is not None:
                return self._compile_aot(name, key, fn, args, kwargs, options, tgt, scope)
            return self._compile_device(name, key, kernel, fn, args, kwargs, options, scope)

    def _warmup(self, fn: Any, args: Any, kwargs: Any, options: Any, scope: _Scope | None) -> Any:
        def call() -> Any:
            return api.warmup(fn, args, kwargs, options)

        if scope is not None:
            scope.fns.add(fn)
        hashes = probing.get()
        if hashes is not None:
            # One walk of the launch path: an entry on disk is loaded now (a verified hit);
            # otherwise only its hash comes out, and the fleet locks and compiles it.
            digest, kernel = api.probe_or_load(fn, args, kwargs, options, entry_on_disk)
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

    def _compile_device(
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
        self._forget_in_memory(fn)
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

    def _compile_aot(
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
        self._forget_in_memory(fn)
        with aot_driver(drv):
            self._prepare(fn)
            compiled = self._warmup(fn, args, kwargs, options, scope)
        digest, fname = api.compiled_identity(compiled)
        hit = _hooks.pop_outcome(digest)
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

    # -- cache entries (the fleet store, docs/fleet.md) ------------------------------------------

    def entry_key(self, kernel: Any, key: Any, target: str | None) -> str | None:
        """Triton's cache hash (hex sha256) of what ``compile(kernel, key, target)`` writes, without compiling.

        It runs the kernel's own ``JITFunction.warmup`` up to the point where
        Triton has computed the cache key and would compile
        (``_triton_api.probe_or_load``); an entry complete on disk is loaded by
        the same walk, and the thread's next ``compile`` of the key returns it.

        Returns:
            The hash, or None when it cannot be known here: the variant is
            already in Triton's memory, the kernel is interpreted or autotuned, or a custom
            ``TRITON_CACHE_MANAGER``/``TRITON_REMOTE_CACHE_BACKEND`` or stages
            inspection hook decides where entries live.
        """
        if custom_cache_manager() or api.cache_is_redirected():
            return None
        try:
            fn = kernel.function_for(key) if isinstance(kernel, TritonKernel) else None
        except Exception:  # noqa: BLE001 -- compile() reports it, naming the kernel and key
            return None
        if fn is None or not api.is_jit_function(fn) or api.is_interpreted(fn):
            return None  # compile() says why, or there is nothing on disk to share
        if _stack.unwrap(fn) is not None:
            # An autotuned stack compiles one entry per surviving config and benchmarks them:
            # it has no single entry key (its tuned results are entries of their own).
            return None
        Loaded.take(kernel, key, target)  # nothing of an earlier probe is served from here on
        loaded: list[str] = []
        token = probing.set(loaded)
        try:
            result = self.compile(kernel, key, target)
        except Probed as probed:
            return probed.digest
        finally:
            probing.reset(token)
        if not loaded:
            return None
        Loaded.put(kernel, key, target, result)
        return loaded[0]

    def entry_dir(self, entry_key: str) -> Path:
        """The directory of entry ``entry_key`` in the Triton cache (the base32 of the hash)."""
        return Path(api.cache_entry_dir(cache_dir(), entry_key))

    def entry_files(self, entry_key: str) -> dict[str, Path] | None:
        """The files of the complete local entry ``entry_key`` (``_cache.complete_entry``), or None."""
        found = Loaded.take_files(entry_key)  # what entry_key()'s probe just found, if this key
        return found if found is not None else complete_entry(self.entry_dir(entry_key))

    def entry_key_of(self, directory: str | os.PathLike[str]) -> str | None:
        """The hash of the entry in ``directory`` (the inverse of ``entry_dir``); None if not one."""
        return entry_hash(directory)

    entry_file_allowed = staticmethod(entry_file_allowed)  # which names an entry may hold

    def entry_info(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """What ``warmkit cache info`` shows of an entry: kernel, target, why stale (``_entry.describe_entry``)."""
        return describe_entry(directory)

    # -- persistent cache (warmkit bundles) ---------------------------------------------------------

    def cache_dir(self) -> Path:
        """Where Triton looks entries up: ``TRITON_CACHE_DIR``, default ``~/.triton/cache`` (absolute)."""
        return Path(cache_dir())

    def cache_fingerprint(self, target: str | None) -> dict[str, str]:
        """What cache entries built for ``target`` are valid for; must be equal where they are used.

        Fields: the target, Triton's version and ``triton_key()`` digest (the
        whole wheel, so the CPython ABI too), the CPython ABI, the ptxas
        version for the target's arch, and the cache-invalidating environment
        variables that are set.

        Args:
            target: e.g. ``"cuda:90"``; None = this host's device (if any).
        """
        require_triton()
        if target is None:
            target = self.default_target()
        if target is None or target == INTERPRETER:
            return fingerprint(None)
        return fingerprint(validate_target(target))

    @contextlib.contextmanager
    def cache_scope(self, directory: str | os.PathLike[str]) -> Iterator[Path]:
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

    def verify_cache_entry(self, entry: Path) -> list[str]:
        """Structural problems of one cache entry (unparseable metadata, empty binaries); [] when sound."""
        return verify_cache_entry(entry)

    def relocate_cache_entry(self, staged: Path, final: Path) -> None:
        """Point the group files of an entry staged at ``staged`` to ``final`` (absolute paths)."""
        relocate_cache_entry(staged, final)

    def prepare_entries(self, directory: Path, entries: Sequence[str]) -> str:
        """Build installed AOT entries' C launchers on this GPU host (``_entry.prepare_entries``)."""
        return prepare_entries(directory, entries)

    def _forget_in_memory(self, fn: Any) -> None:
        if self._redirects == 0:
            return
        with _prep_lock:
            if fn in self._forgotten:
                return
            self._forgotten.add(fn)
            for cache in api.kernel_caches(fn):
                cache.clear()

    def tuning_plan(self, kernel: Any, keys: list[Any], target: str | None) -> dict[Any, str]:
        """For each autotuned key: ``"needs device tuning"``, or the GPU models with a stored winner.

        Args:
            kernel: a ``TritonKernel``.
            keys: its keys.
            target: the target the keys would be compiled for (None: this device's).
        """
        stack = _stack.unwrap(getattr(kernel, "fn", None))
        if stack is None or stack.tuner is None or len(stack.tuner.configs) <= 1:
            return {}
        tgt = target if target is not None else self.default_target()
        out: dict[Any, str] = {}
        for key in keys:
            try:
                tkey = _autotune.tuning_key_of(kernel, stack, key)
            except Exception as exc:  # noqa: BLE001 - a note, the warmup reports the error
                out[key] = f"autotuned; cannot derive its autotune key: {exc}"
                continue
            if tgt is None:
                out[key] = "autotuned; pass --target to see whether it is tuned"
                continue
            rid = _tuned.result_id(stack, tkey, "", str(tgt))
            known = _tuned.known_winners(stack, rid, cache_dir())
            out[key] = f"tuned on {', '.join(sorted(known))}" if known else "needs device tuning"
        return out

    def tuned_results(
        self, directory: str | os.PathLike[str] | None = None
    ) -> list[dict[str, Any]]:
        """The tuned autotune results stored in a cache directory (default: the one in effect).

        Each is a dict: ``kernel``, ``function``, ``autotune_key``, ``gpu``,
        ``target``, ``triton_version``, ``winner`` (config index),
        ``winner_config`` and ``timings_ms``. Bundles list them (``bundle inspect``).
        """
        base = directory if directory is not None else cache_dir()
        out = []
        for body in _tuned.scan_results(base):
            rid = body["id"]
            out.append(
                {
                    "kernel": body.get("kernel"),
                    "function": rid["function"],
                    "autotune_key": rid["autotune_key"],
                    "gpu": rid["gpu"],
                    "target": rid["target"],
                    "triton_version": rid["triton_version"],
                    "winner": body.get("winner"),
                    "winner_config": body.get("winner_config"),
                    "timings_ms": body.get("timings_ms"),
                }
            )
        return out

    # -- recorded kernels ---------------------------------------------------------------------------

    def recorded_kernel(self, entry: Any) -> tuple[Any, Any]:
        """The kernel and key that replay a recorded raw ``@triton.jit`` entry (``docs/record.md``).

        Nothing is imported here: the function is imported, and its source
        checked, when the key compiles, so a stale entry fails alone.
        """
        from ._record import recorded_kernel

        return recorded_kernel(entry)

    def specializations(
        self, kernel: Any, keys: list[Any], target: str | None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Map a declared kernel's keys to the Triton specializations they compile, without compiling.

        Used by ``warmkit coverage``; no GPU needed (see ``_coverage.declared_specializations``).
        """
        require_triton()
        from ._coverage import declared_specializations

        return declared_specializations(kernel, keys, target)

    # -- runtime monitor ---------------------------------------------------------------------------

    def install_monitor(self) -> None:
        """Report every runtime Triton compile, disk hit and module load to ``warmkit.monitor`` (idempotent)."""
        try:
            require_triton()
        except TritonNotInstalledError:
            logger.debug("triton not installed: no runtime hooks to install")
            return
        _hooks.install()

    def uninstall_monitor(self) -> None:
        """Remove the hooks, restoring the ones installed before (idempotent)."""
        try:
            require_triton()
        except TritonNotInstalledError:
            return
        _hooks.uninstall()

    def __repr__(self) -> str:
        return "<TritonBackend>"


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
