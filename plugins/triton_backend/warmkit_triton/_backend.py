"""``TritonBackend``: the ``triton`` entry point of ``warmkit.backends``, composed of parts.

The backend object is what the core's capability protocols see; each method is
a short delegation to the part that owns it:

* compiling: ``_compiler.TritonCompiler`` (compile scopes, device and ahead-of-time
  compiles, the cache redirect of ``cache_scope``); autotuned and heuristic keys
  through ``_autotune.compile_stack``;
* the on-disk entry (fleet store, bundles, ``warmkit cache``): ``_entry``;
* pinned identity and explanations: ``_pins``, ``_explain``
  (``IdentityCapabilities``);
* tuned results: ``_autotune``, ``_tuned``; recorded kernels: ``_record``;
  coverage: ``_coverage``; the runtime monitor: ``_hooks``; early setup: ``_setup``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from warmkit import pinning

from . import _autotune, _explain, _hooks, _pins, _setup, _stack, _tuned
from . import _triton_api as api
from ._aot import (
    cache_dir,
    validate_target,
)
from ._compiler import INTERPRETER, TritonCompiler, device_target
from ._entry import (
    complete_entry,
    custom_cache_manager,
    describe_entry,
    entry_file_allowed,
    entry_hash,
    fingerprint,
    prepare_entries,
    relocate_cache_entry,
    verify_cache_entry,
)
from ._kernel import TritonKernel
from ._probe import Loaded, Probed, probing
from ._triton_api import INSTALL_HINT, TritonNotInstalledError, require_triton

__all__ = ["TritonBackend"]

logger = logging.getLogger(__name__)


class TritonBackend(_explain.IdentityCapabilities):
    """The Triton backend (entry point ``triton`` in ``warmkit.backends``).

    Constructed with no arguments by warmkit's plugin loader. See
    ``docs/architecture.md`` for the interface and ``docs/triton.md`` for how
    it compiles.
    """

    name = "triton"

    def __init__(self) -> None:
        self._compiler = TritonCompiler()

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
        return device_target()

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
        if self._compiler.redirected:
            return None
        if target is not None and pinning():
            return None  # a worker would compile with this host's globals, not the pinned ones
        if target is None:
            target = self.default_target()
        if target is None or target == INTERPRETER:
            return None
        return self.canonical_target(target)

    # -- compiling (the TritonCompiler part) ------------------------------------------------

    def compile_scope(
        self, target: str | None, jobs: int
    ) -> contextlib.AbstractContextManager[Any]:
        """Set up one warmup's compiles for ``target`` (``TritonCompiler.compile_scope``).

        Raises:
            ValueError: an unknown target string.
            TritonNotInstalledError: Triton is missing.
        """
        return self._compiler.compile_scope(target, jobs)

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
        return _pins.compile_pinned(self._compiler.compile, kernel, key, target, aot)

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

    def cache_scope(
        self, directory: str | os.PathLike[str]
    ) -> contextlib.AbstractContextManager[Path]:
        """Redirect Triton's cache to ``directory`` for the block (``TritonCompiler.redirect``)."""
        return self._compiler.redirect(directory)

    def verify_cache_entry(self, entry: Path) -> list[str]:
        """Structural problems of one cache entry (unparseable metadata, empty binaries); [] when sound."""
        return verify_cache_entry(entry)

    def relocate_cache_entry(self, staged: Path, final: Path) -> None:
        """Point the group files of an entry staged at ``staged`` to ``final`` (absolute paths)."""
        relocate_cache_entry(staged, final)

    def prepare_entries(self, directory: Path, entries: Sequence[str]) -> str:
        """Build installed AOT entries' C launchers on this GPU host (``_entry.prepare_entries``)."""
        return prepare_entries(directory, entries)

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
