"""Why a key misses: the factor that differs from the nearest entry that exists, with both values.

``warmkit explain`` and ``warmkit bundle check`` take a manifest's keys
(declared and recorded) and a bundle or a cache directory, and say per key
whether this host (or ``--target``) will find its entry there, and if not,
why. Nothing compiles and no GPU is needed.

* The backend level, from any ``BundleCapable`` backend (Triton, TileLang,
  CuTe DSL): a bundle's recorded fingerprint (backend version, target,
  assembler, CPython ABI, cache-relevant environment) against
  ``cache_fingerprint(target)`` here. A field that differs is every key's reason.
* The key level, for a ``FleetCapable`` backend: the entry a key needs
  (``entry_key``, with the manifest's pinned identity applied as a warmup
  applies it) is there, or not. For a miss, a backend that implements
  :class:`ExplainsMisses` gives factors (flat ``{name: text}``) of the key and
  of each existing entry; the nearest entry of the same kernel is the one
  that agrees on most factors, and the first factor in which it differs is
  the reason: ``global m.PREC: 'tf32' there, 'ieee' here``.

A backend that cannot name a key's entry without compiling says so
(``unknown``): never a hit it cannot prove.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from .._plugin.contract import BundleCapable, FleetCapable, _Capability, target_scope

__all__ = ["ExplainsMisses", "Explanation", "explain", "miss_reason", "nearest_difference"]

logger = logging.getLogger(__name__)

# The order factors are reported in, after the backend's fingerprint fields: what a key
# names last (its options) is the least surprising difference.
_KINDS = ("kernel", "source ", "global ", "key", "option ")


@runtime_checkable
class ExplainsMisses(_Capability, Protocol):
    """Optional: the factors of a key's cache identity and of an existing entry (``warmkit explain``)."""

    def key_factors(self, kernel: Any, key: Any, target: str | None) -> Mapping[str, str]:
        """``{factor: text}`` of what compiling ``key`` for ``target`` here would write."""
        ...

    def entry_factors(self, files: Mapping[str, bytes]) -> Mapping[str, str]:
        """``{factor: text}`` of an existing entry, from its small (``.json``) files by name."""
        ...


@attrs.frozen
class Explanation:
    """One key against a bundle or cache: hit, miss (with the reason) or unknown.

    Attributes:
        backend: the key's backend.
        kernel: the kernel's name.
        key: the key, as text.
        status: ``"hit"``, ``"miss"`` or ``"unknown"``.
        reason: one line: why it misses (or why it is unknown); None for a hit.
        factor: the factor that differs, when one was found.
        there: its value in the nearest entry (or the bundle).
        here: its value for this host and target.
        entry: the nearest entry's name, when one was compared.
    """

    backend: str | None
    kernel: str
    key: str
    status: str
    reason: str | None = None
    factor: str | None = None
    there: str | None = None
    here: str | None = None
    entry: str | None = None

    def line(self) -> str:
        """``HIT|MISS|UNKNOWN kernel key[: reason]``."""
        tail = f": {self.reason}" if self.reason else ""
        return f"{self.status.upper()} {self.kernel} {self.key}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _rank(name: str, fingerprint: Sequence[str]) -> tuple[int, str]:
    if name in fingerprint:
        return (fingerprint.index(name), "")
    for i, prefix in enumerate(_KINDS):
        if name.startswith(prefix):
            return (len(fingerprint) + i, name)
    return (len(fingerprint) + len(_KINDS), name)


def nearest_difference(
    here: Mapping[str, str],
    entries: Mapping[str, Mapping[str, str]],
    fingerprint: Sequence[str] = (),
) -> tuple[str, str, str, str] | None:
    """``(entry, factor, there, here)`` for the entry of ``here``'s kernel that agrees on most factors.

    Only factors both sides have are compared. None when no entry has the kernel.
    """
    same = {n: f for n, f in entries.items() if f.get("kernel") == here.get("kernel")}
    if not same:
        return None

    def agreement(item: tuple[str, Mapping[str, str]]) -> tuple[int, str]:
        name, f = item
        return (sum(f.get(k) == v for k, v in here.items() if k in f), name)

    name, best = max(same.items(), key=agreement)
    differing = sorted(
        (k for k in here if k in best and best[k] != here[k]), key=lambda k: _rank(k, fingerprint)
    )
    if not differing:
        return name, "", "", ""
    k = differing[0]
    return name, k, best[k], here[k]


# -- where entries are: a bundle or a cache directory -----------------------------------------------


@attrs.frozen
class _Entries:
    label: str  # "bundle x.wkb" / "cache /dir"
    fingerprint: Mapping[str, str] | None  # a bundle's, per backend; None for a cache directory
    files: Mapping[str, Mapping[str, bytes]]  # entry name -> its small files


def _bundle_entries(path: Path, backend: str) -> _Entries:
    from .bundle import _open

    files: dict[str, dict[str, bytes]] = {}
    with _open(path) as (tar, meta, _p):
        info = meta["backends"].get(backend)
        if info is None:
            return _Entries(f"bundle {path}", None, {})
        prefix = f"backends/{backend}/"
        for member in tar:
            if not member.isfile() or not member.name.startswith(prefix):
                continue
            parts = member.name[len(prefix) :].split("/")
            entry = parts[0]
            files.setdefault(entry, {})
            if parts[-1].endswith(".json") and member.size < 1 << 20:
                f = tar.extractfile(member)
                if f is not None:
                    files[entry][parts[-1]] = f.read()
        return _Entries(f"bundle {path}", dict(info.get("fingerprint", {})), files)


def _cache_entries(root: Path) -> _Entries:
    from .integrity import iter_entries

    files: dict[str, dict[str, bytes]] = {}
    for d in iter_entries(root):
        files[d.name] = {
            p.name: p.read_bytes()
            for p in d.iterdir()
            if p.suffix == ".json" and p.is_file() and p.stat().st_size < 1 << 20
        }
    return _Entries(f"cache {root}", None, files)


# -- the manifest's keys ------------------------------------------------------------------------------


def _items(registry: Any) -> Iterator[tuple[str | None, Any, Any, str | None]]:
    """``(backend, kernel, key, error)`` of every key of ``registry``, declared then recorded."""
    from .._registry.recorded import resolve_recorded

    for inst, keys in registry.resolve().values():
        for k in keys:
            yield type(inst).backend, inst, k, None
    for item in resolve_recorded(registry.recorded()):
        if item.entry.replayable:
            err = None if item.error is None else str(item.error)
            yield item.entry.backend, item.kernel, item.key, err


def _name(kernel: Any) -> str:
    return str(getattr(type(kernel), "name", type(kernel).__qualname__))


def _shown(value: Any) -> str:
    """One line of a factor's value: a multi-line one (an assembler's banner) by its version line."""
    text = str(value)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1:
        versioned = [ln for ln in lines if "release" in ln or "version" in ln.lower()]
        text = (versioned or lines)[0]
    return text if len(text) <= 120 else text[:117] + "..."


def _fingerprint_order(fields: Sequence[str]) -> list[str]:
    """The target first, then versions, then the rest as the backend lists them."""

    def rank(item: tuple[int, str]) -> tuple[int, int]:
        i, f = item
        return (0 if f == "target" else 1 if "version" in f or f.isalpha() else 2, i)

    return [f for _, f in sorted(enumerate(fields), key=rank)]


def _fingerprint_miss(
    entries: _Entries, backend: Any, target: str | None
) -> tuple[str, str, str] | None:
    if entries.fingerprint is None:
        return None
    here = backend.cache_fingerprint(target)
    fields = list(entries.fingerprint) + [f for f in here if f not in entries.fingerprint]
    for field in _fingerprint_order(fields):
        there_v, here_v = entries.fingerprint.get(field), here.get(field)
        if there_v != here_v:
            return field, _shown(there_v), _shown(here_v)
    return None


def _one(
    backend_name: str | None,
    backend: Any,
    kernel: Any,
    key: Any,
    target: str | None,
    entries: _Entries,
    factors: dict[str, Mapping[str, str]],
) -> Explanation:
    name, text = _name(kernel), repr(key)
    if not isinstance(backend, FleetCapable):
        return Explanation(
            backend_name, name, text, "unknown",
            f"backend {backend_name!r} cannot name a key's entry without compiling it; only its "
            "fingerprint was checked",
        )  # fmt: skip
    try:
        ek = backend.entry_key(kernel, key, target)
    except Exception as exc:  # noqa: BLE001 -- e.g. a pinned identity this host cannot build
        return Explanation(backend_name, name, text, "miss", f"{type(exc).__name__}: {exc}")
    if ek is None:
        return Explanation(
            backend_name, name, text, "unknown",
            "its entry cannot be known without compiling (autotuned, in memory, or its "
            "function does not import here)",
        )  # fmt: skip
    entry = Path(backend.entry_dir(ek)).name
    if entry in entries.files:
        return Explanation(backend_name, name, text, "hit", entry=entry)
    if not isinstance(backend, ExplainsMisses):
        return Explanation(
            backend_name, name, text, "miss", f"no entry {entry} in the {entries.label}"
        )
    reason, near = _nearest_reason(backend, kernel, key, target, entries, factors, entry)
    if near is None or not near[1]:
        return Explanation(backend_name, name, text, "miss", reason, entry=near and near[0])
    ent, factor, there_v, here_v = near
    return Explanation(backend_name, name, text, "miss", reason, factor, there_v, here_v, ent)


def _nearest_reason(
    backend: Any,
    kernel: Any,
    key: Any,
    target: str | None,
    entries: _Entries,
    factors: Mapping[str, Mapping[str, str]],
    entry: str | None,
) -> tuple[str, tuple[str, str, str, str] | None]:
    """The one-line reason of a miss, and ``(entry, factor, there, here)`` when an entry was near."""
    if target is None:  # this host's device: its target is what the entries record
        target = backend.default_target()
    here = dict(backend.key_factors(kernel, key, target))
    fp = _fingerprint_order(list(entries.fingerprint or backend.cache_fingerprint(target)))
    near = nearest_difference(here, factors, fp)
    if near is None:
        return f"the {entries.label} has no entry of kernel {_name(kernel)}", None
    ent, factor, there_v, here_v = near
    if not factor:
        return f"no entry {entry}; nearest {ent} agrees on every factor warmkit sees", near
    near = (ent, factor, _shown(there_v), _shown(here_v))
    return f"nearest entry {ent} differs in {factor}: {near[2]} there, {near[3]} here", near


def miss_reason(backend: Any, kernel: Any, key: Any, target: str | None) -> str | None:
    """One line: why ``key`` has no entry in ``backend``'s cache, or None when it cannot say.

    What the monitor's warning and a read-only ``CacheMissError`` carry;
    computed only on a miss (it reads the cache's entry records). Never raises.
    """
    if not (isinstance(backend, ExplainsMisses) and isinstance(backend, BundleCapable)):
        return None
    try:
        entries = _cache_entries(Path(backend.cache_dir()))
        factors = _entry_factor_map(backend, entries)
        return _nearest_reason(backend, kernel, key, target, entries, factors, None)[0]
    except Exception as exc:  # noqa: BLE001 -- a reason is a courtesy; the miss is reported anyway
        logger.debug("no miss reason for %s %r: %s", _name(kernel), key, exc)
        return None


def _entry_factor_map(backend: Any, entries: _Entries) -> dict[str, Mapping[str, str]]:
    factors: dict[str, Mapping[str, str]] = {}
    for name, files in entries.files.items():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            factors[name] = dict(backend.entry_factors(files))
    return factors


def explain(
    manifest: str | os.PathLike[str] | None = None,
    *,
    bundle: str | os.PathLike[str] | None = None,
    cache_dirs: Mapping[str, str | os.PathLike[str]] | None = None,
    target: str | None = None,
    kernel: str | None = None,
    key: str | None = None,
) -> list[Explanation]:
    """Say, per key of ``manifest``, whether this host (or ``target``) finds its entry, and why not.

    Args:
        manifest: a manifest (declared and recorded keys); default: the
            manifest a ``bundle`` carries.
        bundle: a ``.wkb`` to check against; else each backend's cache
            directory (``cache_dirs`` overrides it per backend).
        target: the target the keys are for; default: the bundle's target,
            else this host's device.
        kernel: only this kernel's keys.
        key: only keys whose text contains this.

    Returns:
        One :class:`Explanation` per key.

    Raises:
        BundleError: not a readable bundle.
        ManifestError: an unreadable manifest.
    """
    from .._plugin.discovery import get_backend
    from .._registry.identity import pins_scope
    from .._warmup.config import WarmupConfig

    registry, target = _registry_and_target(manifest, bundle, target)
    out: list[Explanation] = []
    sources: dict[str | None, tuple[Any, _Entries, dict[str, Mapping[str, str]]] | None] = {}
    with pins_scope(registry, WarmupConfig(target=target)), target_scope(target):
        for backend_name, inst, k, error in _items(registry):
            name = _name(inst) if inst is not None else "?"
            if (kernel and name != kernel) or (key and key not in repr(k)):
                continue
            if error is not None or inst is None:
                out.append(Explanation(backend_name, name, repr(k), "miss", error))
                continue
            if backend_name not in sources:
                sources[backend_name] = _source(backend_name, get_backend, bundle, cache_dirs)
            src = sources[backend_name]
            if src is None:
                out.append(Explanation(backend_name, name, repr(k), "unknown", "no cache"))
                continue
            backend, entries, factors = src
            fp = _fingerprint_miss(entries, backend, target)
            if fp is not None:
                field, there_v, here_v = fp
                reason = f"the {entries.label} was built for {field} {there_v}, here {here_v}"
                out.append(
                    Explanation(backend_name, name, repr(k), "miss", reason, field, there_v, here_v)
                )
                continue
            out.append(_one(backend_name, backend, inst, k, target, entries, factors))
    return out


def _registry_and_target(manifest: Any, bundle: Any, target: str | None) -> tuple[Any, str | None]:
    from .._registry.registry import WarmupRegistry

    if bundle is not None and (manifest is None or target is None):
        from .bundle import _open

        with _open(bundle) as (_tar, meta, _p):
            embedded, bundle_target = meta.get("manifest"), meta.get("target")
        target = target if target is not None else bundle_target
        if manifest is None:
            if embedded is None:
                raise ValueError(f"bundle {bundle} carries no manifest; pass --manifest")
            return WarmupRegistry.from_dict(embedded, path=bundle), target
    if manifest is None:
        raise ValueError("explain needs a manifest, or a bundle that carries one")
    return WarmupRegistry.load(manifest), target


def _source(
    backend_name: str | None, get_backend: Any, bundle: Any, cache_dirs: Any
) -> tuple[Any, _Entries, dict[str, Mapping[str, str]]] | None:
    if backend_name is None:
        return None
    backend = get_backend(backend_name)
    if not isinstance(backend, BundleCapable):
        return None
    if bundle is not None:
        entries = _bundle_entries(Path(bundle), backend_name)
    else:
        root = (cache_dirs or {}).get(backend_name) or backend.cache_dir()
        entries = _cache_entries(Path(root))
    factors = _entry_factor_map(backend, entries) if isinstance(backend, ExplainsMisses) else {}
    return backend, entries, factors


def explanations_json(items: Sequence[Explanation]) -> str:
    """The ``--json`` form: ``{"keys": [...], "misses": n}``."""
    return json.dumps(
        {"keys": [e.to_dict() for e in items], "misses": sum(e.status == "miss" for e in items)},
        indent=2,
    )
