"""warmkit: compile every JIT kernel variant a serving engine will launch, before it serves.

See ``README.md`` and ``docs/`` for the guide; ``docs/architecture.md`` maps
each concept to its module.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ._version import __version__

__all__ = [
    "Backend",
    "BackendNotImplementedError",
    "BackendStatus",
    "BackendUnavailableError",
    "BundleCapable",
    "BundleError",
    "BundleInstall",
    "CacheMissError",
    "CacheProbe",
    "CanonicalTargets",
    "Choices",
    "DispatchInfo",
    "EnvVar",
    "Executor",
    "ExplainsMisses",
    "Explanation",
    "Fleet",
    "FleetCapable",
    "FunctionKernel",
    "IdentityMismatchError",
    "IntRange",
    "JitKernel",
    "KernelDefinitionError",
    "ManifestError",
    "MethodHooks",
    "MonitorHooks",
    "PinsIdentity",
    "PluginError",
    "PluginFailure",
    "PluginLoadError",
    "Prepares",
    "PreparesEntries",
    "PrimesWorkers",
    "ProcessCompiles",
    "RecordReplay",
    "RecordedEntry",
    "Recorder",
    "Registration",
    "ReportEntry",
    "ReportStatus",
    "ReportsCacheHit",
    "ReportsTuning",
    "RuntimeCompileError",
    "SpecializationMap",
    "StoreError",
    "StoreUnavailableError",
    "Target",
    "TunedResults",
    "TuningPlan",
    "WarmkitError",
    "WarmupConfig",
    "WarmupError",
    "WarmupRegistry",
    "WarmupReport",
    "WorkerDiedError",
    "ZipGroup",
    "__version__",
    "activate",
    "active_recorder",
    "active_registry",
    "build_bundle",
    "current_fleet",
    "current_target",
    "default_registry",
    "explain",
    "inspect_bundle",
    "install_bundle",
    "metrics",
    "monitor",
    "pinned_identity",
    "pinning",
    "prepare",
    "read_recorded",
    "start_recording",
    "stop_recording",
    "warmup",
    "zip_inputs",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())

# Every public name is imported from its module on first use (PEP 562), so that
# `import warmkit` imports only `logging` (~20 ms, B7), and a process that needs a
# few names (the CLI's `warmkit run` before it becomes the command, the startup
# hook, a compile worker) does not import the rest. `from warmkit import X` and
# `warmkit.X` behave as before; the first use of a name pays for its module.
_LAZY: dict[str, str] = {
    "Fleet": "._cache.fleet",
    "current_fleet": "._cache.fleet",
    "ExplainsMisses": "._cache.misses",
    "Explanation": "._cache.misses",
    "EnvVar": "._envs",
    "BackendNotImplementedError": "._exceptions",
    "BackendUnavailableError": "._exceptions",
    "BundleError": "._exceptions",
    "CacheMissError": "._exceptions",
    "IdentityMismatchError": "._exceptions",
    "KernelDefinitionError": "._exceptions",
    "ManifestError": "._exceptions",
    "PluginError": "._exceptions",
    "PluginFailure": "._exceptions",
    "PluginLoadError": "._exceptions",
    "RuntimeCompileError": "._exceptions",
    "StoreError": "._exceptions",
    "StoreUnavailableError": "._exceptions",
    "WarmkitError": "._exceptions",
    "WarmupError": "._exceptions",
    "WorkerDiedError": "._exceptions",
    "FunctionKernel": "._kernel.dsl",
    "MethodHooks": "._kernel.dsl",
    "JitKernel": "._kernel.jit",
    "Backend": "._plugin.contract",
    "BackendStatus": "._plugin.contract",
    "BundleCapable": "._plugin.contract",
    "CacheProbe": "._plugin.contract",
    "CanonicalTargets": "._plugin.contract",
    "Executor": "._plugin.contract",
    "FleetCapable": "._plugin.contract",
    "MonitorHooks": "._plugin.contract",
    "Prepares": "._plugin.contract",
    "PreparesEntries": "._plugin.contract",
    "RecordReplay": "._plugin.contract",
    "ReportsCacheHit": "._plugin.contract",
    "ReportsTuning": "._plugin.contract",
    "SpecializationMap": "._plugin.contract",
    "Target": "._plugin.contract",
    "TunedResults": "._plugin.contract",
    "TuningPlan": "._plugin.contract",
    "current_target": "._plugin.contract",
    "PinsIdentity": "._registry.identity",
    "pinned_identity": "._registry.identity",
    "pinning": "._registry.identity",
    "RecordedEntry": "._registry.recorded",
    "Recorder": "._registry.recorded",
    "active_recorder": "._registry.recorded",
    "read_recorded": "._registry.recorded",
    "start_recording": "._registry.recorded",
    "stop_recording": "._registry.recorded",
    "Registration": "._registry.registry",
    "WarmupRegistry": "._registry.registry",
    "activate": "._registry.registry",
    "active_registry": "._registry.registry",
    "default_registry": "._registry.registry",
    "Choices": "._registry.space",
    "DispatchInfo": "._registry.space",
    "IntRange": "._registry.space",
    "ZipGroup": "._registry.space",
    "zip_inputs": "._registry.space",
    "WarmupConfig": "._warmup.config",
    "explain": "._warmup.explain",
    "warmup": "._warmup.orchestrate",
    "prepare": "._warmup.prepare",
    "ReportEntry": "._warmup.report",
    "ReportStatus": "._warmup.report",
    "WarmupReport": "._warmup.report",
    "PrimesWorkers": "._warmup.workers",
    "ProcessCompiles": "._warmup.workers",
    "metrics": ".metrics",
    "monitor": ".monitor",
    "BundleInstall": "._cache.bundle",
    "inspect_bundle": "._cache.bundle",
    "install_bundle": "._cache.bundle",
    "build_bundle": "._warmup.build",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'warmkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next use is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:
    from . import metrics, monitor
    from ._cache.bundle import BundleInstall, inspect_bundle, install_bundle
    from ._cache.fleet import Fleet, current_fleet
    from ._cache.misses import ExplainsMisses, Explanation
    from ._envs import EnvVar
    from ._exceptions import (
        BackendNotImplementedError,
        BackendUnavailableError,
        BundleError,
        CacheMissError,
        IdentityMismatchError,
        KernelDefinitionError,
        ManifestError,
        PluginError,
        PluginFailure,
        PluginLoadError,
        RuntimeCompileError,
        StoreError,
        StoreUnavailableError,
        WarmkitError,
        WarmupError,
        WorkerDiedError,
    )
    from ._kernel.dsl import FunctionKernel, MethodHooks
    from ._kernel.jit import JitKernel
    from ._plugin.contract import (
        Backend,
        BackendStatus,
        BundleCapable,
        CacheProbe,
        CanonicalTargets,
        Executor,
        FleetCapable,
        MonitorHooks,
        Prepares,
        PreparesEntries,
        RecordReplay,
        ReportsCacheHit,
        ReportsTuning,
        SpecializationMap,
        Target,
        TunedResults,
        TuningPlan,
        current_target,
    )
    from ._registry.identity import PinsIdentity, pinned_identity, pinning
    from ._registry.recorded import (
        RecordedEntry,
        Recorder,
        active_recorder,
        read_recorded,
        start_recording,
        stop_recording,
    )
    from ._registry.registry import (
        Registration,
        WarmupRegistry,
        activate,
        active_registry,
        default_registry,
    )
    from ._registry.space import Choices, DispatchInfo, IntRange, ZipGroup, zip_inputs
    from ._warmup.build import build_bundle
    from ._warmup.config import WarmupConfig
    from ._warmup.explain import explain
    from ._warmup.orchestrate import warmup
    from ._warmup.prepare import prepare
    from ._warmup.report import ReportEntry, ReportStatus, WarmupReport
    from ._warmup.workers import PrimesWorkers, ProcessCompiles
