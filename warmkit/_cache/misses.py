"""Why a key misses: the factor that differs from the nearest entry that exists, with both values.

Per key, against a bundle's or a cache directory's entries: whether this host
(or a target) will find its entry there, and if not, why (``explain_key``);
``miss_reason`` is the one line a runtime miss carries. Nothing compiles and
no GPU is needed. Going over a manifest's keys is ``warmkit._warmup.explain``'s
(``warmkit explain``, ``warmkit bundle check``), a layer above: it loads the
manifest.

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
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from .._plugin.components import capability, component
from .._plugin.contract import BundleCapable, FleetCapable, _Capability

__all__ = [
    "Entries",
    "ExplainsMisses",
    "Explanation",
    "bundle_entries",
    "cache_entries",
    "entry_factor_map",
    "explain_key",
    "fingerprint_miss",
    "kernel_name",
    "miss_reason",
    "nearest_difference",
]

logger = logging.getLogger(__name__)

# The order factors are reported in, after the backend's fingerprint fields: what a key
# names last (its options) is the least surprising difference.
_KINDS = ("kernel", "source ", "global ", "key", "option ")


@component("identity")
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
class Entries:
    label: str  # "bundle x.wkb" / "cache /dir"
    fingerprint: Mapping[str, str] | None  # a bundle's, per backend; None for a cache directory
    files: Mapping[str, Mapping[str, bytes]]  # entry name -> its small files


def bundle_entries(path: Path, backend: str) -> Entries:
    from .bundle import _open

    files: dict[str, dict[str, bytes]] = {}
    with _open(path) as (tar, meta, _p):
        info = meta["backends"].get(backend)
        if info is None:
            return Entries(f"bundle {path}", None, {})
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
        return Entries(f"bundle {path}", dict(info.get("fingerprint", {})), files)


def cache_entries(root: Path) -> Entries:
    from .integrity import iter_entries

    files: dict[str, dict[str, bytes]] = {}
    for d in iter_entries(root):
        files[d.name] = {
            p.name: p.read_bytes()
            for p in d.iterdir()
            if p.suffix == ".json" and p.is_file() and p.stat().st_size < 1 << 20
        }
    return Entries(f"cache {root}", None, files)


def kernel_name(kernel: Any) -> str:
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


def fingerprint_miss(
    entries: Entries, backend: Any, target: str | None
) -> tuple[str, str, str] | None:
    cache = capability(backend, BundleCapable)
    if entries.fingerprint is None or cache is None:
        return None
    here = cache.cache_fingerprint(target)
    fields = list(entries.fingerprint) + [f for f in here if f not in entries.fingerprint]
    for field in _fingerprint_order(fields):
        there_v, here_v = entries.fingerprint.get(field), here.get(field)
        if there_v != here_v:
            return field, _shown(there_v), _shown(here_v)
    return None


def explain_key(
    backend_name: str | None,
    backend: Any,
    kernel: Any,
    key: Any,
    target: str | None,
    entries: Entries,
    factors: dict[str, Mapping[str, str]],
) -> Explanation:
    name, text = kernel_name(kernel), repr(key)
    fleet = capability(backend, FleetCapable)
    if fleet is None:
        return Explanation(
            backend_name, name, text, "unknown",
            f"backend {backend_name!r} cannot name a key's entry without compiling it; only its "
            "fingerprint was checked",
        )  # fmt: skip
    try:
        ek = fleet.entry_key(kernel, key, target)
    except Exception as exc:  # noqa: BLE001 -- e.g. a pinned identity this host cannot build
        return Explanation(backend_name, name, text, "miss", f"{type(exc).__name__}: {exc}")
    if ek is None:
        return Explanation(
            backend_name, name, text, "unknown",
            "its entry cannot be known without compiling (autotuned, in memory, or its "
            "function does not import here)",
        )  # fmt: skip
    entry = Path(fleet.entry_dir(ek)).name
    if entry in entries.files:
        return Explanation(backend_name, name, text, "hit", entry=entry)
    explains = capability(backend, ExplainsMisses)
    if explains is None:
        return Explanation(
            backend_name, name, text, "miss", f"no entry {entry} in the {entries.label}"
        )
    here = target if target is not None else backend.default_target()
    reason, near = _nearest_reason(explains, fleet, kernel, key, here, entries, factors, entry)
    if near is None or not near[1]:
        return Explanation(backend_name, name, text, "miss", reason, entry=near and near[0])
    ent, factor, there_v, here_v = near
    return Explanation(backend_name, name, text, "miss", reason, factor, there_v, here_v, ent)


def _nearest_reason(
    explains: ExplainsMisses,
    cache: BundleCapable,
    kernel: Any,
    key: Any,
    target: str | None,
    entries: Entries,
    factors: Mapping[str, Mapping[str, str]],
    entry: str | None,
) -> tuple[str, tuple[str, str, str, str] | None]:
    """The one-line reason of a miss, and ``(entry, factor, there, here)`` when an entry was near.

    ``target``: for this host's device, its ``default_target()`` (what the entries record).
    """
    here = dict(explains.key_factors(kernel, key, target))
    fp = _fingerprint_order(list(entries.fingerprint or cache.cache_fingerprint(target)))
    near = nearest_difference(here, factors, fp)
    if near is None:
        return f"the {entries.label} has no entry of kernel {kernel_name(kernel)}", None
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
    explains, cache = capability(backend, ExplainsMisses), capability(backend, BundleCapable)
    if explains is None or cache is None:
        return None
    try:
        entries = cache_entries(Path(cache.cache_dir()))
        factors = entry_factor_map(explains, entries)
        here = target if target is not None else backend.default_target()
        return _nearest_reason(explains, cache, kernel, key, here, entries, factors, None)[0]
    except Exception as exc:  # noqa: BLE001 -- a reason is a courtesy; the miss is reported anyway
        logger.debug("no miss reason for %s %r: %s", kernel_name(kernel), key, exc)
        return None


def entry_factor_map(explains: ExplainsMisses, entries: Entries) -> dict[str, Mapping[str, str]]:
    """Each entry's factors (``ExplainsMisses.entry_factors``); an entry not of the backend's is left out."""
    factors: dict[str, Mapping[str, str]] = {}
    for name, files in entries.files.items():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            factors[name] = dict(explains.entry_factors(files))
    return factors
