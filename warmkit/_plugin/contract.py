"""The plugin contract: what a backend and its executors implement; the compile target; the stubs.

A backend compiles kernels of one DSL (Triton, TileLang, CuTe DSL ...). It is
published as an entry point in the group ``warmkit.backends``. It must satisfy
:class:`Backend`; each optional capability is a protocol of its own
(:class:`BundleCapable`, :class:`CacheProbe`, :class:`FleetCapable`, :class:`MonitorHooks`,
:class:`CanonicalTargets`, :class:`TunedResults` ...), provided by the backend itself or
by one of its components (``backend.cache``, ``.identity``, ``.recording``, ``.tuning``,
``.runtime``: ``warmkit._plugin.components``). The core uses a capability only where
``capability(backend, Protocol)`` finds the object that provides it. What ``compile``
returns satisfies :class:`Executor` (and :class:`ReportsCacheHit` when it can
tell, :class:`ReportsTuning` for an autotuned kernel). ``docs/architecture.md`` is the guide, with the checklist a new backend
must pass.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
from collections.abc import Hashable, Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

import attrs

from .._exceptions import BackendNotImplementedError
from .components import capability, component
from .cuda import cuda_capability, early_context, local_capability, no_gpu_device

__all__ = [
    "Backend",
    "BackendStatus",
    "BundleCapable",
    "CacheProbe",
    "CanonicalTargets",
    "CuteDSLStubBackend",
    "Executor",
    "FleetCapable",
    "KernelClass",
    "KeyT",
    "MonitorHooks",
    "Prepares",
    "PreparesEntries",
    "RecordReplay",
    "ReportsCacheHit",
    "ReportsTuning",
    "SpecializationMap",
    "Target",
    "TileLangStubBackend",
    "TunedResults",
    "TuningPlan",
    "cuda_capability",
    "current_target",
    "early_context",
    "entry_check",
    "local_capability",
    "missing_members",
    "no_gpu_device",
    "target_scope",
]

#: A ``JitKernel`` subclass as the modules below ``_kernel`` see it: they cannot import
#: ``_kernel`` (a higher layer, tests/core/test_import_graph.py), so to mypy it is ``Any``.
KernelClass: TypeAlias = Any

#: A kernel's ``CompileKey`` type: a backend is generic over the keys it compiles.
KeyT = TypeVar("KeyT", bound=Hashable)
KeyT_contra = TypeVar("KeyT_contra", bound=Hashable, contravariant=True)

_target: ContextVar[str | None] = ContextVar("warmkit_target", default=None)


def current_target() -> str | None:
    """The target the compile in progress is for: ``None`` means this process's device.

    ``JitKernel.compile`` implementations that do not go through a backend
    read it to honour ``WarmupConfig.target``.
    """
    return _target.get()


class VarScope:
    """``with VarScope(var, value):`` sets a ``ContextVar`` for the block.

    A class, not a ``contextlib`` generator: warmup enters two per key.
    """

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[Any], value: Any) -> None:
        self._var, self._value = var, value

    def __enter__(self) -> None:
        self._token = self._var.set(self._value)

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._token)


def target_scope(target: str | None) -> ContextManager[None]:
    """Set ``current_target()`` for the duration of a block (in this thread or task)."""
    return VarScope(_target, target)


class _CapabilityMeta(type(Protocol)):  # type: ignore[misc]
    """``isinstance(obj, P)`` for warmkit's protocols, with P's members listed once.

    ``typing`` lists a protocol's members again on every ``isinstance`` (15-75 us
    on Python 3.11-3.13), and warmup asks several per key. The rule is the one
    ``typing`` applies on 3.11: a subclass of P, or an object that has every
    member, with no method set to None.
    """

    def __init__(cls, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (member, is a method)
        cls._warmkit_members = tuple((n, callable(getattr(cls, n, None))) for n in _members(cls))
        # the backend's component that may provide it (components.component; inherited), else None
        cls._warmkit_component = getattr(cls, "_warmkit_component", None)

    def __instancecheck__(cls, instance: Any) -> bool:
        members = cls.__dict__.get("_warmkit_runtime_members")
        if members is None:
            # @runtime_checkable runs after __init__: the first check finds out and remembers.
            if not (
                cls.__dict__.get("_is_protocol") and getattr(cls, "_is_runtime_protocol", False)
            ):
                return super().__instancecheck__(instance)  # a class implementing P, or a misuse
            members = cls._warmkit_runtime_members = cls._warmkit_members
        if cls in type(instance).__mro__:
            return True
        for name, method in members:
            value = getattr(instance, name, _ABSENT)
            if value is _ABSENT or (method and value is None):
                return False
        return True


_ABSENT = object()


def _members(protocol: type) -> list[str]:
    """A protocol's members (annotated or defined, public or ``__call__``), in definition order."""
    names: list[str] = []
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol) or not klass.__dict__.get("_is_protocol", False):
            continue
        for name in [*inspect.get_annotations(klass), *vars(klass)]:
            if (not name.startswith("_") or name == "__call__") and name not in names:
                names.append(name)
    return names


class _Capability(Protocol, metaclass=_CapabilityMeta):
    """The base of warmkit's protocols: ``isinstance`` against them is cheap (``_CapabilityMeta``)."""


_CUDA_TARGET = re.compile(r"^(?:cuda:)?(?:sm_?)?(?P<cc>\d{2,3})(?P<feature>[af]?)$")
_DOTTED_TARGET = re.compile(r"^cuda:(?P<major>\d{1,2})\.(?P<minor>\d)$")
_HIP_TARGET = re.compile(r"^(?:hip:)?(?P<arch>gfx[0-9a-f]+)$")
TARGET_FORMS = (
    "'cuda:<compute capability>[a|f]' such as 'cuda:90', 'cuda:90a', 'cuda:100' "
    "(also 'sm_90', 'sm_90a', '90', 'cuda:9.0'), or 'hip:<gfx arch>' such as 'hip:gfx942'"
)


@attrs.frozen
class Target:
    """A compile target: a platform and its architecture, e.g. ``cuda:90``, ``cuda:90a``, ``hip:gfx942``.

    ``Target.parse`` reads every spelling warmkit's plugins accept; ``str()`` is the
    one spelling (``"cuda:90a"``). Each backend then says which targets it can
    compile (its ``canonical_target``); an option or a config field that takes a
    target string also takes a ``Target``.

    Attributes:
        platform: ``"cuda"`` or ``"hip"``.
        arch: ``"90"``, ``"90a"``, ``"100f"`` (a compute capability and its feature
            suffix) for CUDA; ``"gfx942"`` for HIP.
    """

    platform: str
    arch: str

    @classmethod
    def parse(cls, target: str | Target) -> Target:
        """``"cuda:90"``, ``"sm_90a"``, ``"90"``, ``"cuda:9.0"``, ``"hip:gfx942"`` ... -> a ``Target``.

        Raises:
            ValueError: any other string; the message names it and the accepted forms.
            TypeError: neither a string nor a ``Target``.
        """
        if isinstance(target, Target):
            return target
        if not isinstance(target, str):
            raise TypeError(f"a target is a string, one of {TARGET_FORMS}; got {target!r}")
        text = target.strip().lower()
        if m := _CUDA_TARGET.match(text):
            return cls("cuda", m["cc"] + m["feature"])
        if m := _DOTTED_TARGET.match(text):
            return cls("cuda", f"{m['major']}{m['minor']}")
        if m := _HIP_TARGET.match(text):
            return cls("hip", m["arch"])
        raise ValueError(f"unknown target {target!r}; accepted: {TARGET_FORMS}")

    @property
    def capability(self) -> int:
        """The CUDA compute capability as one number (``90`` for ``cuda:90a``); ValueError for HIP."""
        if self.platform != "cuda":
            raise ValueError(f"target {self} has no CUDA compute capability")
        return int(self.arch.rstrip("af"))

    @property
    def major(self) -> int:
        """The CUDA compute capability's major version (``9`` for ``cuda:90``)."""
        return self.capability // 10

    @property
    def minor(self) -> int:
        """The CUDA compute capability's minor version (``0`` for ``cuda:90``)."""
        return self.capability % 10

    @property
    def feature(self) -> str:
        """The CUDA architecture's feature suffix: ``"a"``, ``"f"`` or ``""``."""
        return self.arch[-1] if self.platform == "cuda" and self.arch[-1] in "af" else ""

    def __str__(self) -> str:
        return f"{self.platform}:{self.arch}"


@attrs.frozen
class BackendStatus:
    """Whether a backend can compile in this process.

    Attributes:
        ok: True when the backend can be used.
        reason: why not (or a short description when ok).
        install_hint: the command that makes it available, if any.
        version: the version of the DSL the backend drives, if installed.
    """

    ok: bool
    reason: str = ""
    install_hint: str | None = None
    version: str | None = None


@runtime_checkable
class Backend(_Capability, Protocol[KeyT_contra]):
    """What every ``warmkit.backends`` entry point provides (checked when it loads).

    The entry point names a class (constructed with no arguments) or an object.
    ``name`` may be left out: the loader sets it to the entry-point name.
    ``Backend[K]`` compiles keys of type ``K`` (a plain ``Backend`` takes any key).
    """

    name: str

    def available(self) -> BackendStatus:
        """Whether this backend can compile here, and how to fix it if not. Never raises."""
        ...

    def default_target(self) -> str | None:
        """The current device's target (e.g. ``"cuda:90"``), or None when there is no device."""
        ...

    def parallelism(self, target: str | None) -> int:
        """How many compiles are worth running at once for ``target`` (1 = serial)."""
        ...

    def compile_scope(self, target: str | None, jobs: int) -> ContextManager[object]:
        """A context entered around one warmup's compiles on this backend (pools, drivers, hooks)."""
        ...

    def compile(self, kernel: Any, key: KeyT_contra, target: str | None) -> Executor:
        """Compile ``key`` of ``kernel`` for ``target`` (None = this device); return an :class:`Executor`.

        Safe to call from several threads inside one ``compile_scope``. Raises
        an error naming the kernel and key when it cannot compile.
        """
        ...


@component("runtime")
@runtime_checkable
class MonitorHooks(_Capability, Protocol):
    """Optional: runtime-compile hooks that report to ``warmkit.monitor``.

    A backend without them is watched only through ``JitKernel.get_or_compile``.
    """

    def install_monitor(self) -> None:
        """Install hooks that report every runtime compile to ``warmkit.monitor`` (idempotent)."""
        ...

    def uninstall_monitor(self) -> None:
        """Remove them, restoring whatever was installed before (idempotent)."""
        ...


@runtime_checkable
class CanonicalTargets(_Capability, Protocol):
    """Optional: one spelling per target, so that ``"sm_90"`` and ``"cuda:90"`` are one target."""

    def canonical_target(self, target: str) -> str:
        """The spelling ``default_target`` uses; raises ``ValueError`` for an unknown target."""
        ...


@component("cache")
@runtime_checkable
class BundleCapable(_Capability, Protocol):
    """Optional: export and import of the backend's persistent cache (``warmkit`` bundles)."""

    def cache_dir(self) -> Path:
        """The absolute directory the backend's runtime looks compiled entries up in."""
        ...

    def cache_fingerprint(self, target: str | None) -> Mapping[str, str]:
        """What entries built for ``target`` are valid for; must be equal where they are used."""
        ...

    def cache_scope(self, directory: str | os.PathLike[str]) -> ContextManager[Path]:
        """Redirect the backend's cache to ``directory`` for the block (a bundle is built there)."""
        ...

    def relocate_cache_entry(self, staged: Path, final: Path) -> None:
        """Rewrite an entry staged at ``staged`` so that it is valid once moved to ``final``."""
        ...


@component("runtime")
@runtime_checkable
class Prepares(_Capability, Protocol):
    """Optional: a backend's one-time, kernel-independent setup, run by ``warmkit.prepare()``.

    Called in a background thread, at most once per process and target, before
    any warmup of the process needs it. It must be safe alongside the engine's
    own threads, must not depend on the caller's context variables, and must
    not latch environment-dependent state that a warmup reads later.
    """

    def prepare(self, target: str | None) -> None:
        """Do the setup for ``target`` (None = this device); an error fails this backend's keys."""
        ...


@component("cache")
@runtime_checkable
class PreparesEntries(_Capability, Protocol):
    """Optional: finish installed cache entries for this host (``install_bundle``).

    What a runtime would otherwise build at its first load of an entry, and
    can build only where the entries are used (warmkit-triton: Triton's C
    launchers, which need this host's CUDA driver), is built here, once.
    """

    def prepare_entries(self, directory: Path, entries: Sequence[str]) -> str:
        """Prepare the named entries of ``directory``; return a one-line summary of what was done.

        Raises:
            Exception: preparing failed; the entries are still valid (the
                runtime then builds what is missing on first load).
        """
        ...


@component("cache")
@runtime_checkable
class CacheProbe(_Capability, Protocol):
    """Optional: a persistent cache warmkit can inspect (``warmkit cache verify``, bundle checks)."""

    def cache_dir(self) -> Path:
        """The absolute directory of the backend's persistent cache."""
        ...

    def verify_cache_entry(self, entry: str | os.PathLike[str]) -> list[str]:
        """The structural problems of one entry directory; empty when it is sound."""
        ...


@component("cache")
@runtime_checkable
class FleetCapable(BundleCapable, Protocol):
    """Optional: cache entries addressable by key, so a fleet compiles each once (``docs/fleet.md``)."""

    def entry_key(self, kernel: Any, key: Hashable, target: str | None) -> str | None:
        """The backend's own cache key of what ``compile`` would write, computed without compiling.

        None when it cannot be known (then the key compiles as without a fleet).
        """
        ...

    def entry_dir(self, entry_key: str) -> Path:
        """Where entry ``entry_key`` lives in the local cache (it may not exist)."""
        ...

    def entry_files(self, entry_key: str) -> Mapping[str, Path] | None:
        """The files of the complete local entry (name -> path), or None for a miss."""
        ...

    def entry_key_of(self, directory: str | os.PathLike[str]) -> str | None:
        """The key of the entry in ``directory`` (the inverse of ``entry_dir``), or None."""
        ...

    def entry_info(self, directory: str | os.PathLike[str]) -> Mapping[str, Any]:
        """``{"kernel", "target", "stale"}`` of one entry (``warmkit cache info``); stale: why, or None."""
        ...

    def entry_file_allowed(self, name: str) -> bool:
        """Whether an entry of this backend may hold a file named ``name``.

        A store entry is data, never paths: the fleet refuses (and deletes from
        the store) an entry holding any name this does not accept, before
        writing a byte of it. ``name`` is already one plain name (no separator,
        no ``..``, no leading dot); accept exactly the names the backend's
        entries hold, e.g. Triton's ``<kernel>.cubin`` and ``__grp__<kernel>.json``.
        """
        ...


@runtime_checkable
class Executor(_Capability, Protocol):
    """What ``Backend.compile`` (or a ``JitKernel.compile`` override) returns: the launchable variant."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class ReportsCacheHit(_Capability, Protocol):
    """Optional for executors: whether the persistent cache served the variant (the warmup report says so)."""

    cache_hit: bool


@runtime_checkable
class ReportsTuning(_Capability, Protocol):
    """Optional for executors of autotuned kernels: what the backend did about tuning.

    ``tuning`` goes into the warmup report (``ReportEntry.tuning``); a runtime
    compile whose executor spent ``autotune_seconds > 0`` benchmarking is also
    a monitor event of kind ``"autotune"`` with ``tuning_key`` as its key.
    """

    tuning: str | None
    tuning_key: Any
    autotune_seconds: float


def reports_cache_hit(executor: Any) -> bool:
    """``isinstance(executor, ReportsCacheHit) and executor.cache_hit is True``, per key cheaply.

    The protocol has one member, so reading it is its check: warmup asks this
    of every key's executor, and a protocol check costs a Python call (~0.5 us).
    """
    return getattr(executor, "cache_hit", None) is True


def reported_tuning(executor: Any) -> str | None:
    """The executor's ``tuning`` if it is a ``ReportsTuning`` whose ``tuning`` is a string.

    The protocol is checked only for an executor that has a ``tuning`` (most have none).
    """
    tuning = getattr(executor, "tuning", None)
    if tuning is None or not isinstance(tuning, str) or not isinstance(executor, ReportsTuning):
        return None
    return tuning


@component("tuning")
@runtime_checkable
class TunedResults(_Capability, Protocol):
    """Optional: tuned results (autotune winners) among a cache directory's entries, for bundles."""

    def tuned_results(self, directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """One dict per tuned result: kernel, autotune key, GPU model, winner, timings."""
        ...


@component("recording")
@runtime_checkable
class RecordReplay(_Capability, Protocol):
    """Optional: replays a manifest's ``"raw"`` recorded entries (``docs/record.md``)."""

    def recorded_kernel(self, entry: Any) -> tuple[Any, Any]:
        """``(kernel instance, key)`` that warm ``entry`` through the usual warmup path.

        Import nothing here: a stale entry must fail as its own key, at compile time.
        """
        ...


@component("recording")
@runtime_checkable
class SpecializationMap(_Capability, Protocol):
    """Optional: maps declared keys to the specializations they compile (``warmkit coverage``)."""

    def specializations(
        self, kernel: Any, keys: list[KeyT], target: str | None
    ) -> list[tuple[str, dict[str, Any]]]:
        """``(function import path, {"args", "options"})`` per key, in recorded-entry form, no compile.

        A key of an autotuned kernel may also give ``{"autotune": {"key": ...}}``:
        it covers a run's raw autotune of that autotune key on any GPU model.
        """
        ...


@component("tuning")
@runtime_checkable
class TuningPlan(_Capability, Protocol):
    """Optional: which of a kernel's keys still need tuning on a device (``warmkit plan`` says so)."""

    def tuning_plan(self, kernel: Any, keys: list[KeyT], target: str | None) -> dict[KeyT, str]:
        """Key -> a short note (e.g. ``"needs device tuning"``), for the keys that are autotuned."""
        ...


def entry_check(backend: Any) -> Any:
    """The ``verify_cache_entry`` of the backend's :class:`CacheProbe`, else None (records only)."""
    probe = capability(backend, CacheProbe)
    return None if probe is None else probe.verify_cache_entry


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (methods must be callable), in definition order."""
    out = []
    for name in _members(protocol):
        member = getattr(protocol, name, None)
        value = getattr(obj, name, None)
        if value is None or (callable(member) and not callable(value)):
            out.append(name)
    return out


class _StubBackend:
    """A placeholder for a DSL whose warmkit plugin is not installed; it says so at runtime.

    The plugin distribution (``plugin``) publishes the same entry-point name
    and replaces the stub when installed (see ``_plugins.discover``).
    """

    name: str
    module: str
    distribution: str
    plugin: str
    extra: str

    def install_hint(self) -> str:
        """The command that installs the real backend, DSL included."""
        return f"pip install '{self.plugin}[{self.extra}]'"

    def available(self) -> BackendStatus:
        import importlib.metadata
        import importlib.util

        if importlib.util.find_spec(self.module) is None:
            return BackendStatus(
                ok=False,
                reason=(
                    f"stub: the {self.plugin} plugin is not installed, and neither is "
                    f"{self.distribution} (module {self.module!r} not found)"
                ),
                install_hint=self.install_hint(),
            )
        try:
            version = importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            version = None
        return BackendStatus(
            ok=False,
            reason=(
                f"stub: {self.distribution} is installed, but warmkit cannot compile {self.name} "
                f"kernels without the {self.plugin} plugin"
            ),
            install_hint=self.install_hint(),
            version=version,
        )

    def default_target(self) -> str | None:
        return None

    def parallelism(self, target: str | None) -> int:
        return 1

    def compile_scope(self, target: str | None, jobs: int) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        raise BackendNotImplementedError(
            self.name,
            f"the {self.name!r} backend is a stub: warmkit cannot compile kernel "
            f"{getattr(kernel, 'name', kernel)!r} key {key!r} without the {self.plugin} plugin. "
            f"Install it ({self.install_hint()}), or override compile() in the kernel wrapper.",
        )


class TileLangStubBackend(_StubBackend):
    """Stub backend ``tilelang``: stands in until ``warmkit-tilelang`` is installed; cannot compile."""

    name = "tilelang"
    module = "tilelang"
    distribution = "tilelang"
    plugin = "warmkit-tilelang"
    extra = "tilelang"


class CuteDSLStubBackend(_StubBackend):
    """Stub backend ``cutedsl`` (CuTe DSL): stands in until ``warmkit-cutedsl`` is installed; cannot compile."""

    name = "cutedsl"
    module = "cutlass"
    distribution = "nvidia-cutlass-dsl"
    plugin = "warmkit-cutedsl"
    extra = "cutedsl"
