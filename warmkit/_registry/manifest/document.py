"""The manifest document as a whole: a registry to JSON data and to a file, and back.

A manifest is ``{format, version, warmkit_version, registrations[, pins]
[, recorded]}`` (``schema.py`` checks it whole): ``format`` and ``version``
(``format.py``) are read before anything else; ``registrations`` holds the
declared search spaces, written and read here (version 2 writes consecutive
single points of one kernel as one ``points`` registration of rows); ``pins``
each declared kernel's pinned identity (``identity.py`` takes them);
``recorded`` the entries a run compiled at runtime (``entries.py``).

Its reader and writers work on any :class:`Registry` (``WarmupRegistry`` is
one): the registry's module imports this one, never the reverse.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol

from ..._exceptions import ManifestError, PluginLoadError
from ..._plugin.contract import KernelClass
from ..._version import __version__
from ..identity import manifest_pins
from ..registration import _CANON_AS_IS, Registration, _canon_point
from ..space import Choices, IntRange, ZipGroup
from .codec import _AS_IS, decode_value, encode_value
from .entries import RecordedEntry, parse_recorded, read_manifest, recorded_groups, written_groups
from .format import MANIFEST_FORMAT, MANIFEST_VERSION, check_header
from .text import manifest_text, write_atomic

__all__ = [
    "Registry",
    "declared_dict",
    "manifest_dict",
    "manifest_file",
    "read_into",
    "read_recording",
    "recording_file",
]

# Whether an iterable of types are all of the plain scalars a point holds (_CANON_AS_IS). Bound
# once here: CPython 3.11 compiles a method call on an imported name (_CANON_AS_IS.issuperset(..))
# as an attribute load, a new bound method per call, and a recording calls it once per key.
_plain = _CANON_AS_IS.issuperset


class Registry(Protocol):
    """What the manifest reads into and writes from (``WarmupRegistry``).

    A load adds a recording's registrations and entries straight into
    ``_regs`` and ``_recorded`` (identities made as ``add`` makes them): a
    recorded manifest has one of each per key.
    """

    pins: dict[str, Any] | None
    loaded: bool
    _regs: dict[tuple[Any, ...], Registration]
    _recorded: dict[str, RecordedEntry]

    def __iter__(self) -> Iterator[Registration]: ...

    def recorded(self) -> list[RecordedEntry]: ...

    def add(self, kernel: Any, *zip_groups: ZipGroup, **space: Any) -> bool: ...


# -- writing -------------------------------------------------------------------------------


def manifest_dict(registry: Registry) -> dict[str, Any]:
    """The manifest as JSON-ready data (``recorded`` grouped, as version 2 writes it)."""
    out = declared_dict(registry)
    if registry.pins is not None:  # a loaded manifest's, even empty (see manifest_file)
        out["pins"] = registry.pins
    recorded = registry.recorded()
    if recorded:
        out["recorded"] = recorded_groups(recorded)
    return out


def declared_dict(registry: Registry) -> dict[str, Any]:
    """The manifest's header and its declared ``registrations``, as JSON-ready data."""
    from ..._plugin.discovery import kernel_ref

    refs: dict[KernelClass, str] = {}
    regs: list[dict[str, Any]] = []
    run: tuple[KernelClass, tuple[str, ...]] | None = None  # the points of regs[-1], if any
    for reg in registry:
        if reg.kernel_cls not in refs:
            refs[reg.kernel_cls] = kernel_ref(reg.kernel_cls)
        space = reg.space
        if not reg.zip_groups and _plain(map(type, space.values())):
            # Consecutive points of one kernel and names (a recording's shape): one
            # registration of rows, each row a registration of its own on load.
            names = tuple(space)
            if run == (reg.kernel_cls, names):
                regs[-1]["points"]["rows"].append(list(space.values()))
                continue
            run = (reg.kernel_cls, names)
            points = {"names": list(names), "rows": [list(space.values())]}
            regs.append({"kernel": refs[reg.kernel_cls], "name": reg.kernel, "points": points})
            continue
        run = None
        regs.append(
            {
                "kernel": refs[reg.kernel_cls],
                "name": reg.kernel,
                "zip": [
                    {
                        "names": list(g.names),
                        "rows": [[encode_value(v) for v in r] for r in g.rows],
                    }
                    for g in reg.zip_groups
                ],
                "space": {k: _encode_axis(v) for k, v in reg.space.items()},
            }
        )
    for i, written in enumerate(regs):  # a lone point is written as the registration it is
        if "points" in written and len(written["points"]["rows"]) == 1:
            names, (row,) = written["points"]["names"], written.pop("points")["rows"]
            regs[i] = written | {"zip": [], "space": dict(zip(names, row, strict=True))}
    out: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "warmkit_version": __version__,
        "registrations": regs,
    }
    return out


def manifest_file(registry: Registry, path: Path) -> None:
    """Write ``registry``'s manifest at ``path`` atomically, with this host's pins.

    Raises:
        OSError: the file cannot be written; the message names the path, and
            no temporary file is left behind.
    """
    data = declared_dict(registry)
    # This host's identity of each kernel, except what a loaded manifest pinned (the
    # host it was saved on): re-saving elsewhere must not re-pin another host's values.
    taken, complete = manifest_pins(registry)
    pins = {**taken, **(registry.pins or {})}
    # Written even empty when every kernel's identity was taken: an ahead-of-time build of a
    # manifest without ``pins`` warns that it builds with its host's values, which is news
    # for one that predates pins or whose pinning failed, and wrong for one whose kernels'
    # backends pin nothing (TileLang, CuTe DSL): it told their users to save it again.
    if pins or complete or registry.pins is not None:
        data["pins"] = dict(sorted(pins.items()))
    text = manifest_text(data, written_groups(registry.recorded()))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def read_recording(path: Path) -> tuple[Any, list[RecordedEntry]]:
    """The manifest a recording adds to, and its entries; ``(None, [])`` when there is no file.

    Raises:
        ManifestError: the file is not a manifest this warmkit reads (it is left
            untouched), or one of its entries is damaged.
    """
    if not path.exists():
        return None, []
    data, stored = read_manifest(path)
    check_header(data, path, refusal="; refusing to record into it: choose another path")
    # Checked, not copied blindly: a damaged entry is refused, never carried on.
    if stored is None:
        stored = parse_recorded(data, path=path, keep=True)
    return data, stored


def recording_file(
    path: Path, data: Mapping[str, Any] | None, entries: list[RecordedEntry]
) -> None:
    """Write a recording atomically: ``data`` (a new manifest when None) with ``entries`` recorded.

    Written as version 2 (a version-1 file is upgraded; its registrations are the same).
    """
    if data is None:
        data = {"format": MANIFEST_FORMAT, "warmkit_version": __version__, "registrations": []}
    data = {k: v for k, v in data.items() if k != "recorded"} | {"version": MANIFEST_VERSION}
    write_atomic(path, manifest_text(data, written_groups(entries)))


# -- reading -------------------------------------------------------------------------------


def read_into(
    registry: Registry,
    data: Any,
    path: Any,
    *,
    keep: bool = False,
    entries: list[RecordedEntry] | None = None,
) -> None:
    """Add manifest ``data`` (its header and schema checked first) to an empty ``registry``.

    ``keep``: ``data`` was just read from a file, so recorded entries may keep
    their parsed specs; ``entries``: its recorded section, already read and
    checked (``entries.read_manifest``).

    Raises:
        ManifestError: wrong format or version, malformed entries, or a
            kernel that cannot be resolved (the message names it).
        PluginLoadError: a kernel's plugin failed to import.
    """
    from .schema import validate_manifest

    check_header(data, path)

    validate_manifest(data, path=path)
    registry.loaded = bool(data["registrations"])  # declared kernels from a manifest
    if "pins" in data:
        registry.pins = dict(data["pins"])
    recorded = registry._recorded
    if entries is None:
        entries = parse_recorded(data, path=path, keep=keep)
    for entry in entries:
        recorded.setdefault(entry.id, entry)  # as add_recorded: the first of an id stays
    _read_registrations(_Points(registry), data["registrations"], path, keep)


def _read_registrations(points: _Points, items: list[Any], path: Any, keep: bool) -> None:
    """The declared ``registrations``, each added to ``points.registry``."""
    from ..._plugin.discovery import load_kernel
    from .modules import check_kernel_ref

    registry = points.registry
    # One lookup per kernel, not per entry: resolving a ref reads every installed
    # distribution's entry points (~50 ms), and a recorded manifest has an entry per key.
    classes: dict[str, KernelClass] = {}
    for i, entry in enumerate(items):
        try:
            ref = entry["kernel"]
            kernel_cls = classes.get(ref)
            if kernel_cls is None:
                check_kernel_ref(ref, path)  # a manifest names code: where may it come from
                kernel_cls = classes[ref] = load_kernel(ref)
            if "points" in entry:  # version 2: rows of points, a registration each
                points.rows(kernel_cls, entry["points"], i, ref, path)
                continue
            space = entry["space"]
            if not entry.get("zip") and _plain(map(type, space.values())):
                points.add(kernel_cls, space if keep else dict(space))
                continue
            groups = [
                ZipGroup(
                    tuple(g["names"]),
                    tuple(tuple(decode_value(v) for v in r) for r in g["rows"]),
                )
                for g in entry.get("zip", [])
            ]
            space = {
                k: v if type(v) in _AS_IS else _decode_axis(v)
                for k, v in entry.get("space", {}).items()
            }
            registry.add(kernel_cls, *groups, **space)
        except (ManifestError, PluginLoadError):
            raise  # a broken plugin is reported as such, with its distribution
        except Exception as exc:
            what = entry.get("kernel") if isinstance(entry, dict) else entry
            raise ManifestError(f"registration {i} (kernel {what!r}): {exc}", path=path) from exc


class _Points:
    """Adds single-point registrations of plain scalars (a recording has one per key).

    The checks ``add()`` makes of such a point depend only on the kernel class
    and the input names, so they are made once per pair; the points after
    that go straight into the registry, with the identity ``add()`` gives them.
    """

    __slots__ = ("checked", "registry")

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        # (class, input names) whose single-point registrations add() has checked once.
        self.checked: dict[tuple[KernelClass, tuple[str, ...]], tuple[str, ...]] = {}

    def add(self, kernel_cls: KernelClass, space: dict[str, Any]) -> None:
        registry = self.registry
        if not _plain(map(type, space.values())):
            registry.add(kernel_cls, **{k: decode_value(v) for k, v in space.items()})
            return
        seen = (kernel_cls, tuple(space))
        order = self.checked.get(seen)
        if order is None:
            registry.add(kernel_cls, **space)
            self.checked[seen] = tuple(sorted(space))
            return
        ident = _canon_point(order, tuple([space[k] for k in order]))
        registry._regs.setdefault(
            (kernel_cls.name, ident), Registration(kernel_cls.name, kernel_cls, (), space)
        )

    def rows(
        self, kernel_cls: KernelClass, points: dict[str, Any], i: int, ref: str, path: Any
    ) -> None:
        """A version-2 ``points`` registration: each of its rows a registration."""
        checked, regs, new = self.checked, self.registry._regs, Registration
        names = points["names"]
        pair, order = (kernel_cls, tuple(names)), tuple(sorted(names))
        # the row's values in the order of the sorted names, for the identity
        pick = tuple if order == pair[1] else itemgetter(*map(names.index, order))
        name = kernel_cls.name
        known = pair in checked  # once checked, checked for the rest of the rows
        for j, row in enumerate(points["rows"]):
            try:
                if known and _plain(map(type, row)):
                    ident = _canon_point(order, pick(row))
                    space = dict(zip(names, row))
                    regs.setdefault((name, ident), new(name, kernel_cls, (), space))
                else:  # the first of these names (checked), or not plain
                    self.add(kernel_cls, dict(zip(names, row, strict=True)))
                    known = pair in checked
            except (ManifestError, PluginLoadError):
                raise
            except Exception as exc:
                raise ManifestError(
                    f"registration {i}, point {j} {row!r} (kernel {ref!r}): {exc}",
                    path=path,
                ) from exc


# -- JSON encoding of axes ------------------------------------------------------------------
# JSON has no tuple, and a tuple (one value) must never come back as a list
# (alternatives), so non-scalar values are tagged.


def _encode_axis(v: Any) -> Any:
    if isinstance(v, IntRange):
        if v.advance is None:
            return {"range": [v.start, v.stop, v.step or 1]}
        # A function cannot be saved: the manifest keeps the values it produced.
        return {"choices": [encode_value(x) for x in v]}
    if isinstance(v, Choices):
        return {"choices": [encode_value(x) for x in v.values]}
    if isinstance(v, list):
        return {"list": [encode_value(x) for x in v]}
    return encode_value(v)


def _decode_axis(v: Any) -> Any:
    if isinstance(v, dict) and len(v) == 1:
        ((tag, body),) = v.items()
        if tag == "range":
            start, stop, step = body
            return IntRange(start, stop, step)
        if tag == "choices":
            return Choices(*(decode_value(x) for x in body))
        if tag == "list":
            return [decode_value(x) for x in body]
    return decode_value(v)
