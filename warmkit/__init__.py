"""warmkit: compile every JIT kernel variant a serving engine will launch, before it serves.

See ``README.md`` and ``docs/`` for the guide; ``docs/architecture.md`` maps
each concept to its module.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import metrics, monitor
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
from ._version import __version__
from ._warmup.config import WarmupConfig
from ._warmup.explain import explain
from ._warmup.orchestrate import warmup
from ._warmup.prepare import prepare
from ._warmup.report import ReportEntry, ReportStatus, WarmupReport
from ._warmup.workers import PrimesWorkers, ProcessCompiles

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

# Bundles pull in tarfile, hashlib and friends; load them on first use so that
# `import warmkit` stays cheap for engines that never touch a bundle.
_LAZY = {"BundleInstall", "build_bundle", "inspect_bundle", "install_bundle"}


def __getattr__(name: str) -> Any:
    if name == "build_bundle":
        from ._warmup.build import build_bundle

        return build_bundle
    if name in _LAZY:
        from ._cache import bundle as _bundle

        return getattr(_bundle, name)
    raise AttributeError(f"module 'warmkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)


if TYPE_CHECKING:
    from ._cache.bundle import BundleInstall, inspect_bundle, install_bundle
    from ._warmup.build import build_bundle
