"""Plugin discovery: backends and kernel packages, through entry points and stevedore.

Entry points are read fresh from ``importlib.metadata`` on every discovery:
stevedore's on-disk cache keys on 32-bit-float mtimes and goes stale when a
plugin's entry points change without a version bump (``shared/notes/plugins.md``).
stevedore's managers still do the loading, filtered by name *before* import,
so only the plugins a plan needs are imported.

Rules:

* ``WARMKIT_PLUGINS``: comma-separated allow-list of entry-point names; unset
  means every plugin, empty means none.
* One name provided by two distributions is a conflict: loading it raises
  ``PluginLoadError`` naming both. The one intended exception: a plugin
  distribution that provides a name the core registers as a stub backend
  (``tilelang``, ``cutedsl``) replaces the stub; ``PluginInfo.replaces`` says so.
* Load failures are collected into ``PluginLoadError`` (name, distribution,
  version, cause); listing never raises.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import attrs

from .. import _envs
from .._exceptions import (
    BackendUnavailableError,
    PluginError,
    PluginFailure,
    PluginLoadError,
    WarmkitError,
)
from .components import capability
from .contract import Backend, CanonicalTargets, KernelClass, missing_members

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "BACKENDS_GROUP",
    "KERNELS_GROUP",
    "PluginInfo",
    "call_hook",
    "check_target",
    "discover",
    "get_backend",
    "kernel_ref",
    "load_kernel",
    "loaded_backends",
]

logger = logging.getLogger(__name__)

BACKENDS_GROUP = "warmkit.backends"
KERNELS_GROUP = "warmkit.kernels"

#: What to install for backends that warmkit knows of but that may be missing.
INSTALL_HINTS = {
    "triton": "pip install warmkit-triton",
    "tilelang": "pip install 'warmkit-tilelang[tilelang]'",
    "cutedsl": "pip install 'warmkit-cutedsl[cutedsl]'",
}

#: The core's stub backends (``pyproject.toml``), which a plugin of the same name replaces.
_CORE_STUBS = frozenset(
    {"warmkit._plugin.contract:TileLangStubBackend", "warmkit._plugin.contract:CuteDSLStubBackend"}
)

_lock = threading.RLock()
_backends: dict[str, Any] = {}
_load_listeners: list[Callable[[Backend], None]] = []


def on_backend_loaded(listener: Callable[[Backend], None]) -> None:
    """Call ``listener(backend)`` after each backend loads (``warmkit.monitor`` uses it)."""
    _load_listeners.append(listener)


@attrs.frozen
class PluginInfo:
    """One discovered entry point.

    Attributes:
        name: the entry-point name.
        group: ``warmkit.backends`` or ``warmkit.kernels``.
        value: ``module:attr``.
        distribution: the providing distribution's name, if known.
        version: its version, if known.
        conflicts: the other distributions providing the same name, if any.
        replaces: the core stub this plugin replaces (``module:attr``), if any.
    """

    name: str
    group: str
    value: str
    distribution: str | None
    version: str | None
    conflicts: tuple[str, ...] = ()
    replaces: str | None = None

    def entry_point(self) -> EntryPoint:
        from importlib.metadata import EntryPoint

        return EntryPoint(self.name, self.value, self.group)


def _allowed() -> tuple[str, ...] | None:
    """``WARMKIT_PLUGINS``, checked: a name no installed plugin has is a typo, not "none".

    Raises:
        ValueError: it names a plugin that is not installed; the message lists the installed ones.
    """
    allowed = _envs.get("WARMKIT_PLUGINS")
    if allowed:
        if _snapshot.get() is not None:  # one_scan(): its snapshot, read once
            known = {
                info.name
                for group in (BACKENDS_GROUP, KERNELS_GROUP)
                for info in discover(group, honour_allow_list=False)
            }
        else:  # names only: no distribution metadata read
            from importlib.metadata import entry_points

            known = {
                ep.name
                for group in (BACKENDS_GROUP, KERNELS_GROUP)
                for ep in entry_points(group=group)
            }
        unknown = [n for n in allowed if n not in known]
        if unknown:
            raise ValueError(
                f"WARMKIT_PLUGINS names {', '.join(map(repr, unknown))}, which no installed "
                f"plugin provides; installed: {', '.join(sorted(known)) or '(none)'}"
            )
    return allowed


@contextlib.contextmanager
def one_scan() -> Iterator[None]:
    """In the block, discovery reads each group's entry points once, not once per lookup.

    Loading or saving a manifest, and a warmup, resolve one kernel or backend
    after another, and each fresh scan reads every installed distribution's
    entry points (3-15 ms, more with more packages installed). In the block
    they share one snapshot: the plugins installed when the block first looked.
    Blocks nest (the outermost one's snapshot is used); other threads started
    in the block see it only through a copy of its context.
    """
    if _snapshot.get() is not None:
        yield
        return
    token = _snapshot.set({})
    try:
        yield
    finally:
        _snapshot.reset(token)


_snapshot: ContextVar[dict[str, list[PluginInfo]] | None] = ContextVar(
    "warmkit_plugin_snapshot", default=None
)


def discover(group: str, *, honour_allow_list: bool = True) -> list[PluginInfo]:
    """Every plugin in ``group``, sorted by name, read fresh (or in ``one_scan``); nothing is imported.

    Entry points listed twice for one distribution (e.g. an editable install
    seen through two paths) are collapsed; one name from two distributions is
    kept once, with ``conflicts`` naming the others.
    """
    snapshot = _snapshot.get()
    infos = None if snapshot is None else snapshot.get(group)
    if infos is None:
        infos = _scan(group)
        if snapshot is not None:
            snapshot[group] = infos
    allowed = _allowed() if honour_allow_list else None
    return infos if allowed is None else [i for i in infos if i.name in allowed]


def _scan(group: str) -> list[PluginInfo]:
    # imported here, not at the top: with the email package it pulls in, it was 20-45 ms of
    # `import warmkit` (B7), and an engine that declares its kernels never scans
    from importlib.metadata import entry_points

    by_name: dict[str, list[PluginInfo]] = {}
    seen: set[tuple[str, str, str | None]] = set()
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        dname = _dist_name(dist)
        ident = (ep.name, ep.value, dname)
        if ident in seen:
            continue
        seen.add(ident)
        info = PluginInfo(ep.name, group, ep.value, dname, getattr(dist, "version", None))
        by_name.setdefault(ep.name, []).append(info)
    out = []
    for name in sorted(by_name):
        infos = by_name[name]
        stubs = [i for i in infos if _is_core_stub(i)]
        if stubs and len(infos) - len(stubs) == 1:
            # A plugin distribution replacing the core's stub: intended, not a conflict.
            (plugin,) = (i for i in infos if not _is_core_stub(i))
            infos = [attrs.evolve(plugin, replaces=stubs[0].value)]
        first = infos[0]
        if len(infos) > 1:
            others = tuple(f"{i.distribution} {i.version} ({i.value})" for i in infos)
            first = attrs.evolve(first, conflicts=others)
        out.append(first)
    return out


def _is_core_stub(info: PluginInfo) -> bool:
    """An entry point of the core distribution naming one of its stub backends."""
    return (
        info.group == BACKENDS_GROUP
        and info.distribution == "warmkit"
        and info.value.replace(" ", "") in _CORE_STUBS
    )


def _dist_name(dist: Any) -> str | None:
    if dist is None:
        return None
    try:
        return dist.metadata["Name"]
    except Exception:  # noqa: BLE001 -- a broken METADATA must not break discovery
        return getattr(dist, "name", None)


def _find(group: str, name: str) -> PluginInfo | None:
    for info in discover(group, honour_allow_list=False):
        if info.name == name:
            return info
    return None


def _load(info: PluginInfo, *, invoke: bool) -> Any:
    """Import one plugin through stevedore, raising ``PluginLoadError`` with its provenance."""
    if info.conflicts:
        raise PluginLoadError(
            [
                PluginFailure(
                    info.name,
                    info.group,
                    info.value,
                    info.distribution,
                    info.version,
                    RuntimeError(
                        f"name {info.name!r} is provided by several distributions: "
                        f"{'; '.join(info.conflicts)}. Uninstall all but one."
                    ),
                )
            ]
        )
    from stevedore import NamedExtensionManager

    failures: list[PluginFailure] = []

    class _Fresh(NamedExtensionManager):
        def list_entry_points(self) -> list[EntryPoint]:
            return [info.entry_point()]

    def on_fail(_mgr: Any, ep: Any, err: BaseException) -> None:
        failures.append(
            PluginFailure(info.name, info.group, info.value, info.distribution, info.version, err)
        )

    try:
        mgr = _Fresh(
            info.group,
            names=[info.name],
            invoke_on_load=invoke,
            on_load_failure_callback=on_fail,
            on_missing_entrypoints_callback=None,
        )
    except Exception as exc:  # noqa: BLE001 -- stevedore re-raises AssertionError itself
        on_fail(None, None, exc)
    if failures:
        raise PluginLoadError(failures) from failures[0].error
    ext = mgr[info.name]
    return ext.obj if invoke else ext.plugin


def get_backend(name: str, *, kernel: str | None = None) -> Backend:
    """The backend object for entry-point ``name``, loaded once per process.

    Args:
        name: the backend's entry-point name, e.g. ``"triton"``.
        kernel: the kernel that needs it, named in errors.

    Raises:
        BackendUnavailableError: no such backend installed, or not allowed by
            ``WARMKIT_PLUGINS``; the message names the kernel and the install hint.
        PluginLoadError: the backend's plugin failed to import.
    """
    # A loaded one without the lock (a dict read is atomic): a kernel's default compile()
    # asks for every key, and under the lock a reader would see the same value.
    backend = _backends.get(name)
    if backend is not None:
        return backend
    with _lock:
        backend = _backends.get(name)
        if backend is not None:
            return backend
        info = _find(BACKENDS_GROUP, name)
        hint = INSTALL_HINTS.get(name)
        if info is None:
            raise BackendUnavailableError(
                name,
                f"no plugin named {name!r} in entry-point group {BACKENDS_GROUP!r} is installed",
                kernel=kernel,
                install_hint=hint or f"install the distribution that provides backend {name!r}",
            )
        allowed = _allowed()
        if allowed is not None and name not in allowed:
            raise BackendUnavailableError(
                name,
                "it is not in WARMKIT_PLUGINS",
                kernel=kernel,
                install_hint=f"add {name} to WARMKIT_PLUGINS (now {os.environ.get('WARMKIT_PLUGINS')!r})",
            )
        backend = _load(info, invoke=True)
        missing = conform(name, backend)
        if missing:
            raise PluginLoadError(
                [
                    PluginFailure(
                        name,
                        info.group,
                        info.value,
                        info.distribution,
                        info.version,
                        TypeError(
                            f"{type(backend).__qualname__} is not a warmkit backend: it lacks "
                            f"{', '.join(missing)} of warmkit.Backend (see docs/architecture.md)"
                        ),
                    )
                ]
            )
        _backends[name] = backend
        for listener in _load_listeners:
            listener(backend)  # the monitor hooks up a backend loaded after it was armed
        logger.debug("loaded backend %s from %s %s", name, info.distribution, info.version)
        return backend


def loaded_backends() -> list[Backend]:
    """The backends loaded so far in this process."""
    with _lock:
        return list(_backends.values())


def load_backends_of_imported_dsls() -> None:
    """Load each allowed backend whose name is an imported module (``triton`` ...), quietly.

    The monitor calls this when armed, so that a process launching raw
    ``@triton.jit`` kernels is watched even if its warmup plan had no Triton
    kernel; a backend whose DSL was never imported stays unloaded.
    """
    for info in discover(BACKENDS_GROUP):
        if info.name in sys.modules and info.name not in _backends:
            _load_quietly(info.name, logging.DEBUG)


def load_every_backend() -> None:
    """Load each allowed backend; one that fails to load is a warning naming it.

    ``warmkit record`` of a command that never imports warmkit calls this before
    arming the monitor, so every DSL's compiles are hooked before the command runs.
    """
    for info in discover(BACKENDS_GROUP):
        _load_quietly(info.name, logging.WARNING)


def _load_quietly(name: str, level: int) -> None:
    try:
        get_backend(name)
    except Exception as exc:  # noqa: BLE001 -- arming must not fail on a broken plugin
        logger.log(level, "backend %s not loaded for the monitor: %s", name, exc)


def load_kernel(ref: str) -> KernelClass:
    """The ``JitKernel`` class for a ``warmkit.kernels`` entry-point name or a ``module:attr`` path.

    Raises:
        LookupError: no such entry point or attribute; the message says how to fix it.
        PluginLoadError: the kernel's plugin failed to import.
        TypeError: the object is not a ``JitKernel`` subclass.
    """
    # A module:attr path is imported as such, with no entry-point scan (3-15 ms): kernel_ref
    # never names a kernel by an entry-point name of that form.
    info = None if _MODULE_PATH.match(ref) else _find(KERNELS_GROUP, ref)
    if info is not None:
        allowed = _allowed()
        if allowed is not None and ref not in allowed:
            raise LookupError(f"kernel plugin {ref!r} is not in WARMKIT_PLUGINS")
        obj = _load(info, invoke=False)
    elif ":" in ref:
        module, _, attr = ref.partition(":")
        try:
            obj = importlib.import_module(module)
        except ImportError as exc:
            raise LookupError(
                f"kernel {ref!r}: cannot import module {module!r} ({exc}); install the package "
                "that provides it"
            ) from exc
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise LookupError(f"kernel {ref!r}: module {module!r} has no {attr!r}") from None
    else:
        known = ", ".join(i.name for i in discover(KERNELS_GROUP)) or "(none installed)"
        raise LookupError(
            f"kernel {ref!r}: no entry point of that name in {KERNELS_GROUP!r} (installed: "
            f"{known}), and it is not a module:attr path"
        )
    if not _is_kernel_class(obj):
        raise TypeError(f"kernel {ref!r} resolves to {obj!r}, which is not a JitKernel subclass")
    return obj


def _is_kernel_class(obj: Any) -> bool:
    """Whether ``obj`` subclasses ``warmkit.JitKernel``, told by its MRO: ``_kernel`` imports this module."""
    return isinstance(obj, type) and any(
        c.__module__ == "warmkit._kernel.jit" and c.__qualname__ == "JitKernel" for c in obj.__mro__
    )


#: A ``module:attr`` path (dotted identifiers on both sides): never read as an entry-point name.
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def kernel_ref(cls: type) -> str:
    """How a manifest names ``cls``: its ``warmkit.kernels`` entry-point name if it has one, else ``module:QualName``.

    An entry-point name that is itself of the form ``module:attr`` is not used:
    ``load_kernel`` reads such a ref as a path.
    """
    path = f"{cls.__module__}:{cls.__qualname__}"
    for info in discover(KERNELS_GROUP, honour_allow_list=False):
        if _MODULE_PATH.match(info.name):
            continue
        if info.value.replace(" ", "") == path:
            return info.name
        module, _, attr = info.value.partition(":")
        mod = sys.modules.get(module.strip())
        if mod is not None and _getattr_path(mod, attr.strip()) is cls:
            return info.name
    return path


def _getattr_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj


def conform(name: str, backend: Any) -> list[str]:
    """The members of ``warmkit.Backend`` that ``backend`` lacks; a nameless one is named ``name``."""
    missing = [m for m in missing_members(backend, Backend) if m != "name"]
    if not missing and not getattr(backend, "name", None):
        backend.name = name
    return missing


def swap_backend(name: str, backend: Any) -> Any:
    """Make ``backend`` the loaded backend ``name`` (None: unload it); return what was there.

    The seam behind ``warmkit.testing``; nothing else replaces a loaded backend.
    """
    with _lock:
        previous = _backends.pop(name, None)
        if backend is not None:
            _backends[name] = backend
        return previous


def loaded_backend_table() -> dict[str, Any]:
    """A copy of name -> loaded backend (``warmkit.testing.isolated_backends`` restores it)."""
    with _lock:
        return dict(_backends)


def restore_backend_table(table: dict[str, Any]) -> None:
    """Make exactly ``table`` the loaded backends."""
    with _lock:
        _backends.clear()
        _backends.update(table)


def call_hook(plugin: str | None, hook: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: a plugin's hook ``hook``, whose own error is a ``PluginError`` naming both.

    A ``WarmkitError`` it raises is passed on as it is: it already says what is
    wrong (a missing DSL, an unavailable backend, a cache miss).

    Raises:
        PluginError: the hook raised anything else; its cause is kept.
    """
    try:
        return fn(*args)
    except WarmkitError:
        raise
    except Exception as exc:
        where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', hook)}"
        raise PluginError(plugin, hook, where, exc) from exc


def check_target(target: str | None, backends: Sequence[str]) -> None:
    """The one check of a target, for ``warmup``, ``plan`` and ``bundle build``: before any compile.

    Each backend that can spell targets (``canonical_target``) must accept
    ``target``; a backend that cannot be loaded is left to the compile, which
    reports it per key.

    Raises:
        ValueError: a backend rejects the target; the message names both and the accepted forms.
    """
    if target is None:
        return
    for name in backends:
        try:
            backend = get_backend(name)
        except Exception as exc:  # noqa: BLE001 -- reported per key, with its install hint
            logger.debug("target check skipped for backend %s: %s", name, exc)
            continue
        targets = capability(backend, CanonicalTargets)
        if targets is None:
            continue
        try:
            targets.canonical_target(target)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"target {target!r} (backend {name!r}): {exc}") from exc
