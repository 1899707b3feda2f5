"""``TritonCache``: the cache component of ``TritonBackend`` (``backend.cache``).

Triton's persistent cache as the core's capabilities see it: ``warmkit.BundleCapable``,
``warmkit.CacheProbe``, ``warmkit.FleetCapable`` and ``warmkit.PreparesEntries``.
It composes the on-disk entry (``_entry``: hashes, files, records, relocation,
fingerprints), the entry key's probe (``_probe``: computed without compiling),
Triton's cache directory (``_aot``) and the compiler's cache redirect
(``TritonCompiler.redirect``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from . import _stack
from . import _triton_api as api
from ._aot import cache_dir, validate_target
from ._compiler import INTERPRETER, TritonCompiler
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
from ._triton_api import require_triton

__all__ = ["TritonCache"]


class TritonCache:
    """Triton's persistent cache and its entries: bundles, the fleet store, ``warmkit cache``.

    Args:
        compiler: the backend's compiler: the entry key's probe walks its
            compile path, and ``cache_scope`` is its redirect.
    """

    def __init__(self, compiler: TritonCompiler) -> None:
        self._compiler = compiler

    # -- the persistent cache (warmkit bundles) ----------------------------------------------------

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
            target = self._compiler.device_target()
        if target is None or target == INTERPRETER:
            return fingerprint(None)
        return fingerprint(validate_target(target))

    def cache_scope(
        self, directory: str | os.PathLike[str]
    ) -> contextlib.AbstractContextManager[Path]:
        """Redirect Triton's cache to ``directory`` for the block (``TritonCompiler.redirect``)."""
        return self._compiler.redirect(directory)

    # the on-disk entry's own functions (``_entry``)
    verify_cache_entry = staticmethod(verify_cache_entry)  # unparseable metadata, empty binaries
    relocate_cache_entry = staticmethod(relocate_cache_entry)  # group files' absolute paths
    prepare_entries = staticmethod(prepare_entries)  # installed AOT entries' C launchers, here

    # -- entries by key (the fleet store, docs/fleet.md) -----------------------------------------------

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
            result = self._compiler.compile_key(kernel, key, target)
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
        """The files of the complete local entry ``entry_key`` (``_entry.complete_entry``), or None."""
        found = Loaded.take_files(entry_key)  # what entry_key()'s probe just found, if this key
        return found if found is not None else complete_entry(self.entry_dir(entry_key))

    entry_key_of = staticmethod(entry_hash)  # the inverse of entry_dir; None if not an entry
    entry_file_allowed = staticmethod(entry_file_allowed)  # which names an entry may hold
    entry_info = staticmethod(describe_entry)  # kernel, target, why stale (warmkit cache info)
