"""``TritonBackend``: the ``triton`` entry point of ``warmkit.backends``, a compiler plus components.

The backend object is the required ``warmkit.Backend`` (availability, targets,
compile scopes, ``compile``), which the compiler part does
(``_compiler.TritonCompiler``; autotuned and heuristic keys through
``_autotune.compile_stack``). Its optional capabilities are components
(``warmkit._plugin.components``), each in the module that owns its concept:

* ``cache``: ``_cache.TritonCache``, the persistent cache and its entries (bundles,
  the fleet store, ``warmkit cache``) over ``_entry`` and ``_probe``;
* ``identity``: ``_explain.TritonIdentity``, pinned identity and explanations;
* ``recording``: ``_recording.TritonRecording``, replaying recorded entries
  (``_record``) and the specializations of declared keys (``_coverage``);
* ``tuning``: ``_autotune.TritonTuning``, the tuned results (``_tuned``) and which keys
  still need tuning;
* ``runtime``: ``_setup.TritonRuntime``, early setup, compile workers and the
  monitor's hooks (``_hooks``).

The core asks the components. The backend keeps the flat methods it had before
them (``backend.entry_key(...)``, ``isinstance(backend, warmkit.FleetCapable)``) for
code outside warmkit: one-line delegations to the components, last in the class.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ._aot import validate_target
from ._autotune import TritonTuning
from ._cache import TritonCache
from ._compiler import TritonCompiler, device_target
from ._explain import TritonIdentity
from ._recording import TritonRecording
from ._setup import TritonRuntime
from ._triton_api import INSTALL_HINT, TritonNotInstalledError, require_triton

__all__ = ["TritonBackend"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _delegate(
    part: str, method: Callable[Concatenate[Any, _P], _R]
) -> Callable[Concatenate[Any, _P], _R]:
    """A backend method that calls ``method`` on the backend's component ``part`` (same signature and doc)."""
    name = method.__name__

    def delegation(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return getattr(getattr(self, part), name)(*args, **kwargs)

    return functools.update_wrapper(delegation, method)


class TritonBackend:
    """The Triton backend (entry point ``triton`` in ``warmkit.backends``): a compiler plus components.

    Constructed with no arguments by warmkit's plugin loader. See
    ``docs/architecture.md`` for the interface and ``docs/triton.md`` for how
    it compiles.

    Attributes:
        cache: the persistent cache and its entries (``BundleCapable``,
            ``CacheProbe``, ``FleetCapable``, ``PreparesEntries``).
        identity: pinned identity and explanations (``PinsIdentity``, ``ExplainsMisses``).
        recording: recorded entries (``RecordReplay``, ``SpecializationMap``).
        tuning: autotune results (``TunedResults``, ``TuningPlan``).
        runtime: this process's setup, workers and monitor hooks (``Prepares``,
            ``ProcessCompiles``, ``PrimesWorkers``, ``MonitorHooks``).
    """

    name = "triton"

    def __init__(self) -> None:
        self._compiler = TritonCompiler()
        self.cache = TritonCache(self._compiler)
        self.identity = TritonIdentity()
        self.recording = TritonRecording()
        self.tuning = TritonTuning(self._compiler)
        self.runtime = TritonRuntime(self._compiler)

    # -- warmkit.Backend: availability and targets ----------------------------------------------

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

    def parallelism(self, target: str | None) -> int:
        """Compiles worth running at once: one per CPU core (Triton releases the GIL), at most 32."""
        return max(1, min(os.cpu_count() or 1, 32))

    # -- warmkit.Backend: compiling (the TritonCompiler part) -------------------------------------

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
        return self._compiler.compile_key(kernel, key, target)

    def __repr__(self) -> str:
        return "<TritonBackend>"

    # -- compatibility: the flat capability methods, delegations to the components --------------
    # The core finds each capability on its component (warmkit._plugin.components.capability).
    # These keep `TritonBackend().entry_key(...)` and `isinstance(backend, warmkit.FleetCapable)`
    # working for code outside warmkit. A static member is the component's own function.

    # cache: _cache.TritonCache
    cache_dir = _delegate("cache", TritonCache.cache_dir)
    cache_fingerprint = _delegate("cache", TritonCache.cache_fingerprint)
    cache_scope = _delegate("cache", TritonCache.cache_scope)
    verify_cache_entry = staticmethod(TritonCache.verify_cache_entry)
    relocate_cache_entry = staticmethod(TritonCache.relocate_cache_entry)
    prepare_entries = staticmethod(TritonCache.prepare_entries)
    entry_key = _delegate("cache", TritonCache.entry_key)
    entry_dir = _delegate("cache", TritonCache.entry_dir)
    entry_files = _delegate("cache", TritonCache.entry_files)
    entry_key_of = staticmethod(TritonCache.entry_key_of)
    entry_file_allowed = staticmethod(TritonCache.entry_file_allowed)
    entry_info = staticmethod(TritonCache.entry_info)

    # identity: _explain.TritonIdentity
    identity_pins = _delegate("identity", TritonIdentity.identity_pins)
    key_factors = staticmethod(TritonIdentity.key_factors)
    entry_factors = staticmethod(TritonIdentity.entry_factors)

    # recording: _recording.TritonRecording
    recorded_kernel = _delegate("recording", TritonRecording.recorded_kernel)
    specializations = _delegate("recording", TritonRecording.specializations)

    # tuning: _autotune.TritonTuning
    tuning_plan = _delegate("tuning", TritonTuning.tuning_plan)
    tuned_results = _delegate("tuning", TritonTuning.tuned_results)

    # runtime: _setup.TritonRuntime
    prepare = staticmethod(TritonRuntime.prepare)
    prime_worker = staticmethod(TritonRuntime.prime_worker)
    worker_target = _delegate("runtime", TritonRuntime.worker_target)
    install_monitor = _delegate("runtime", TritonRuntime.install_monitor)
    uninstall_monitor = _delegate("runtime", TritonRuntime.uninstall_monitor)
