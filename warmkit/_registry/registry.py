"""The scoped warmup registry.

Engine objects call ``kernel.register_warmup(**space)`` while they are built.
That lands in the registry made active by ``registry.activate()`` (a
``ContextVar``, so it nests, and works in asyncio tasks); ``registry.bind(fn)``
carries it into worker threads, where a ``ContextVar`` would otherwise be
unset and registrations silently lost.

A registry saves to and loads from a manifest: ``to_dict``, ``save``,
``from_dict`` and ``load`` hand the document to ``manifest/document.py``;
``save`` first refuses a kernel that another process could not replay.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from .._compat import gc_paused
from .._exceptions import ManifestError, naming
from .._plugin.contract import KernelClass
from .manifest.document import manifest_dict, manifest_file, read_into
from .manifest.entries import RecordedEntry, read_manifest
from .registration import Registration, _canon_space
from .space import Choices, IntRange, ZipGroup, _names, check_keyword_names

__all__ = [
    "Registration",
    "WarmupRegistry",
    "activate",
    "active_registry",
    "check_registration",
    "default_registry",
    "warn_unregistered",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_PLAIN_SCALARS = (type(None), bool, int, float, str)

_active: ContextVar[WarmupRegistry | None] = ContextVar("warmkit_registry", default=None)


class WarmupRegistry:
    """Collects what the engine's objects will launch; plans, saves and loads it.

    Identical registrations (kernel name plus canonical space) are stored once,
    in O(1): a 61-layer model registering one kernel 61 times stores one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regs: dict[tuple[Any, ...], Registration] = {}
        self._classes: dict[str, KernelClass] = {}
        self._recorded: dict[str, RecordedEntry] = {}
        #: A loaded manifest's pinned identities by kernel name (``_identity``); None: the
        #: registry was not loaded from a manifest, or its manifest predates pins.
        self.pins: dict[str, Any] | None = None
        self.loaded = False

    # -- scope -------------------------------------------------------------------

    @contextlib.contextmanager
    def activate(self) -> Iterator[WarmupRegistry]:
        """Make this the active registry for the block; nesting restores the outer one."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def bind(self, fn: F) -> F:
        """Wrap ``fn`` so that it runs with this registry active, in whatever thread calls it.

        Use it for work handed to threads or executors::

            pool.submit(registry.bind(build_layer), i)
            threading.Thread(target=registry.bind(build_layer)).start()
        """

        def bound(*args: Any, **kwargs: Any) -> Any:
            with self.activate():
                return fn(*args, **kwargs)

        bound.__name__ = getattr(fn, "__name__", "bound")
        bound.__doc__ = getattr(fn, "__doc__", None)
        bound.__wrapped__ = fn  # type: ignore[attr-defined]
        return bound  # type: ignore[return-value]

    # -- contents ------------------------------------------------------------------

    def add(self, kernel: Any, *zip_groups: ZipGroup, **space: Any) -> bool:
        """Record one registration; returns False if an identical one was already there.

        ``kernel`` is a ``JitKernel`` instance or class. Names are checked
        against its ``dispatch`` now, not at warmup.

        Raises:
            TypeError: a positional argument that is not a ``zip_inputs`` group, an
                input the kernel's dispatch does not accept, or a value that is not
                plain immutable data (it would keep objects alive and not be savable).
            ValueError: a name given twice, or a kernel name already registered
                by another class.
        """
        cls: KernelClass = kernel if isinstance(kernel, type) else type(kernel)
        cls._concrete()
        check_registration(cls, zip_groups, space)
        ident = (cls.name, _canon_space(zip_groups, space))
        try:
            ref = None if kernel is cls else weakref.ref(kernel)
        except TypeError:
            ref = None
        reg = Registration(cls.name, cls, tuple(zip_groups), dict(space), ref)
        with self._lock:
            other: KernelClass = self._classes.setdefault(cls.name, cls)
            if other is not cls:
                raise ValueError(
                    f"kernel name {cls.name!r} is used by two classes, "
                    f"{other.__module__}.{other.__qualname__} and "
                    f"{cls.__module__}.{cls.__qualname__}: one would compile the other's keys. "
                    "Give each kernel class its own name"
                )
            # One hash of the (deep) identity, not two: a recording adds a registration per key.
            return self._regs.setdefault(ident, reg) is reg

    def add_recorded(self, entry: RecordedEntry) -> bool:
        """Add one recorded entry (``docs/record.md``); returns False if it was already there."""
        with self._lock:
            if entry.id in self._recorded:
                return False
            self._recorded[entry.id] = entry
        return True

    def recorded(self) -> list[RecordedEntry]:
        """The recorded entries, in the order they were added."""
        with self._lock:
            return list(self._recorded.values())

    def __len__(self) -> int:
        return len(self._regs)

    def __iter__(self) -> Iterator[Registration]:
        with self._lock:
            return iter(list(self._regs.values()))

    def clear(self) -> None:
        """Forget every registration."""
        with self._lock:
            self._regs.clear()
            self._classes.clear()
            self._recorded.clear()

    def plan(self) -> dict[str, list[Any]]:
        """Each kernel's ordered, unique keys, deduplicated across registrations and instances."""
        return {name: keys for name, (_k, keys) in self.resolve().items()}

    def resolve(self) -> dict[str, tuple[Any, list[Any]]]:
        """kernel name -> (a kernel instance, its ordered unique keys), expanded once.

        The instance is a registering one while it lives, else a fresh one.

        Raises:
            TypeError: a kernel cannot be constructed, or its space does not expand.
            ValueError: a space larger than the kernel's ``max_points``.
        """
        out: dict[str, tuple[Any, dict[Any, None]]] = {}
        fresh: dict[type, Any] = {}  # one fresh instance per class, not per registration
        planners: dict[type, Any] = {}
        for reg in self:
            kernel_cls = reg.kernel_cls
            inst = reg._instance() if reg._instance is not None else None
            if inst is None:
                inst = fresh.get(kernel_cls)
                if inst is None:
                    inst = fresh[kernel_cls] = reg.kernel_instance()
            try:
                plan = planners.get(kernel_cls)
                if plan is None:
                    plan = planners[kernel_cls] = kernel_cls._warmkit_planner()
                keys = plan(inst, reg.zip_groups, reg.space)
            except Exception as exc:
                # The user's dispatch (or space) raised: say whose, keep the type and the cause.
                where = (
                    f"kernel {reg.kernel!r} "
                    f"({reg.kernel_cls.__module__}.{reg.kernel_cls.__qualname__}), registration "
                    f"{dict(reg.space)!r}"
                )
                named = naming(exc, f"while planning {where}")
                if named is exc:
                    raise
                raise named from exc
            # expand's dict keeps each key's hash: merged into this one, no key is hashed again
            ordered = keys if type(keys) is dict else dict.fromkeys(keys)
            found = out.get(reg.kernel)
            if found is None:
                out[reg.kernel] = (inst, ordered)
            else:
                found[1].update(ordered)
        return {name: (inst, list(keys)) for name, (inst, keys) in out.items()}

    # -- manifest ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The manifest as JSON-ready data (``recorded`` grouped, as version 2 writes it)."""
        return manifest_dict(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the versioned JSON manifest atomically; returns the path.

        Raises:
            ManifestError: a kernel that another process could not replay: defined
                in ``__main__`` or inside a function, not importable under its
                name, not constructible with no arguments, or whose ``dispatch``
                reads instance state that a fresh instance does not reproduce.
            OSError: the file cannot be written; the message names the path, and
                no temporary file is left behind.
        """
        from .._plugin.discovery import one_scan

        path = Path(path)
        with one_scan():  # each kernel's ref is found and imported back: one scan for them all
            self._check_replayable(path)
            manifest_file(self, path)
        return path

    def _check_replayable(self, path: Path) -> None:
        """Refuse, now, what a replay in another process would get wrong or fail on."""
        from .._plugin.discovery import kernel_ref, load_kernel

        checked: set[KernelClass] = set()
        for reg in self:
            cls = reg.kernel_cls
            where = f"{cls.__module__}.{cls.__qualname__}"
            problem = None
            if cls not in checked:
                checked.add(cls)
                if cls.__module__ == "__main__":
                    problem = "it is defined in __main__ (a script), which another process cannot import; move it into a module"
                elif "<locals>" in cls.__qualname__:
                    problem = "it is defined inside a function, so it cannot be imported by name; define it at module level"
                else:
                    found: KernelClass | Exception
                    try:
                        found = load_kernel(kernel_ref(cls))
                    except Exception as exc:  # noqa: BLE001 -- reported as the reason
                        found = exc
                    if found is not cls:
                        problem = (
                            f"{kernel_ref(cls)!r} does not import back as this class ({found!r})"
                        )
            if problem is None:
                problem = _replay_differs(reg)
            if problem is not None:
                raise ManifestError(
                    f"kernel {reg.kernel!r} ({where}) cannot be saved in a manifest: {problem}",
                    path=path,
                )

    @classmethod
    def from_dict(cls, data: Any, *, path: Any = None) -> WarmupRegistry:
        """Build a registry from manifest data, importing each kernel it names.

        Raises:
            ManifestError: wrong format or version, malformed entries, or a
                kernel that cannot be resolved (the message names it).
            PluginLoadError: a kernel's plugin failed to import.
        """
        return cls._from_data(data, path, keep=False)

    @classmethod
    def _from_data(
        cls, data: Any, path: Any, *, keep: bool, entries: list[RecordedEntry] | None = None
    ) -> WarmupRegistry:
        # keep: data was just read from a file, so recorded entries may keep their parsed specs;
        # entries: its recorded section, already read and checked (read_manifest)
        registry = cls()
        read_into(registry, data, path, keep=keep, entries=entries)
        return registry

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> WarmupRegistry:
        """Read a manifest written by ``save``.

        Its ``recorded`` entries (``docs/record.md``) are read beside the
        declared registrations.

        Raises:
            ManifestError: unreadable, malformed, or naming an unresolvable kernel.
        """
        from .._plugin.discovery import one_scan

        with gc_paused(), one_scan():
            data, entries = read_manifest(path)
            return cls._from_data(data, path, keep=True, entries=entries)


def _replay_differs(reg: Registration) -> str | None:
    """Why a replay (a fresh ``kernel_cls()``) would plan other keys than this registration, if it would."""
    inst = reg._instance() if reg._instance is not None else None
    try:
        fresh = reg.kernel_cls()
    except Exception as exc:  # noqa: BLE001 -- reported as the reason
        return f"{reg.kernel_cls.__qualname__}() fails ({type(exc).__name__}: {exc}); a replay constructs it with no arguments"
    if inst is None:
        return None
    try:
        mine = inst.get_warmup_keys(*reg.zip_groups, **reg.space)
        theirs = fresh.get_warmup_keys(*reg.zip_groups, **reg.space)
    except Exception:  # noqa: BLE001 -- a planning error is reported by plan/warmup, with its name
        return None
    if mine != theirs:
        if len(mine) != len(theirs):
            diff = f"{len(mine)} key(s) here, {len(theirs)} on replay"
        else:
            a, b = next((a, b) for a, b in zip(mine, theirs, strict=True) if a != b)
            diff = f"e.g. {a!r} here, {b!r} on replay"
        return (
            "its dispatch reads instance state that a fresh instance does not reproduce, so a "
            f"replay would compile other keys ({diff}); make dispatch depend only on its inputs "
            "(pass the state as an input)"
        )
    return None


_default = WarmupRegistry()


def default_registry() -> WarmupRegistry:
    """The process-wide default registry."""
    return _default


def activate() -> contextlib.AbstractContextManager[WarmupRegistry]:
    """Activate the process-wide default registry for a block."""
    return _default.activate()


def active_registry() -> WarmupRegistry | None:
    """The registry active in this thread or task, if any."""
    return _active.get()


# -- registration checks ----------------------------------------------------------------


def check_registration(cls: Any, zip_groups: Any, space: Any) -> None:
    """Check one registration of kernel class ``cls``: its names and its plain-data values.

    Raises:
        TypeError: a positional argument that is not a zip group, an input
            dispatch does not accept, or a value that is not plain immutable data.
        ValueError: a name given twice.
    """
    info = cls.dispatch_info()
    if zip_groups:
        info.check_names(cls.name, _names(zip_groups, space))
    else:
        check_keyword_names(cls.name, info, space)
    for name, value in space.items():
        if type(value) not in _PLAIN_SCALARS:
            _check_plain(cls.name, name, value)
    for i, group in enumerate(zip_groups):
        for row in group.rows:
            for name, value in zip(group.names, row):
                _check_plain(cls.name, f"{name} (zip group {i})", value, allow_space=False)


def _check_plain(kernel: str, name: str, value: Any, *, allow_space: bool = True) -> None:
    # Exact types: a subclass (an IntEnum, a str Enum) would come back from a saved
    # manifest as its plain base and could dispatch differently on replay.
    if type(value) in _PLAIN_SCALARS:
        return
    if type(value) is tuple:
        for v in value:
            _check_plain(kernel, name, v, allow_space=False)
        return
    if allow_space and isinstance(value, IntRange):
        return
    if isinstance(value, ZipGroup):
        raise TypeError(
            f"kernel {kernel!r}: register_warmup argument {name!r}: pass zip_inputs(...) "
            "positionally, not as a keyword"
        )
    if allow_space and isinstance(value, (Choices, list)):
        for v in value:
            _check_plain(kernel, name, v, allow_space=False)
        return
    raise TypeError(
        f"kernel {kernel!r}: register_warmup argument {name!r} is a {type(value).__name__}; "
        "registrations hold only plain immutable data (None, bool, int, float, str, tuples "
        "of these, lists/Choices/IntRange of these) so that a registry never keeps large "
        "objects alive and can be saved. Pass the scalar the kernel dispatches on "
        "(e.g. tensor.shape[1], not the tensor)."
    )


_unregistered: set[str] = set()
_unregistered_lock = threading.Lock()


def warn_unregistered(kernel: str, space: Any) -> None:
    """Warn once per kernel that a registration was dropped: nothing would warm it up."""
    with _unregistered_lock:
        if kernel in _unregistered:
            return
        _unregistered.add(kernel)
    thread = threading.current_thread()
    where = (
        f"in thread {thread.name!r}, which has no active registry: wrap the work handed to "
        "the thread with registry.bind(fn)"
        if thread is not threading.main_thread()
        else "outside any registry: build the engine under `with registry.activate():` "
        "(in threads: registry.bind(fn))"
    )
    message = (
        f"kernel {kernel}: register_warmup({', '.join(space)}) {where}. It was dropped, so "
        "warmup will not compile it (further drops of this kernel are not reported)"
    )
    logger.warning("%s", message)
    # Also a Python warning: shown even where the application configured no logging
    # (warmkit's loggers have only a NullHandler then).
    warnings.warn(message, RuntimeWarning, stacklevel=3)
