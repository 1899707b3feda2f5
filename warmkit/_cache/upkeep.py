"""Cache upkeep: ``warmkit cache info|prune|push|pull`` (``verify`` is ``warmkit._cache.integrity``'s).

Nothing caps Triton's cache today; these keep a backend's persistent cache in
shape and move entries between it and a shared store (``docs/fleet.md``):

* ``cache_info``: entries and bytes, per kernel, and which entries are stale
  for the installed DSL (the backend says, from the entry's validity record);
* ``prune_cache``: remove the stale, those older than an age, or the least
  recently used until the cache fits a size; each entry disappears with one
  rename, so a reader never sees half of one; the entries a manifest needs
  (``--keep``: ``warmkit._warmup.explain.manifest_entries``) are never removed;
* ``push_cache`` / ``pull_cache``: copy complete entries to / from a store,
  verified on the way in exactly as a warmup's fetch is.

Push and pull need a ``warmkit.FleetCapable`` backend; ``info`` and
``prune`` take kernels and staleness from its ``entry_info(directory)``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._plugin.components import capability
from .._plugin.contract import FleetCapable
from .fleet import Fleet
from .integrity import iter_entries

__all__ = [
    "cache_info",
    "parse_age",
    "parse_size",
    "prune_cache",
    "pull_cache",
    "push_cache",
]

logger = logging.getLogger(__name__)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _match(pattern: re.Pattern[str], text: str, what: str, such_as: str) -> re.Match[str]:
    m = pattern.match(text)
    if m is None:
        raise ValueError(f"{what} {text!r} is not {such_as}")
    return m


def parse_size(text: str) -> int:
    """``"500M"``, ``"2G"``, ``"1.5GiB"``, ``"4096"`` -> bytes (powers of 1024).

    Raises:
        ValueError: anything else, naming the text.
    """
    m = _match(_SIZE, text, "size", "a size such as 4096, 500M, 2G or 1.5GiB")
    unit = (m.group(2) or "b").lower().rstrip("b").rstrip("i")
    return int(float(m.group(1)) * 1024 ** "_kmgt".index(unit or "_"))


def parse_age(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` -> seconds.

    Raises:
        ValueError: anything else, naming the text.
    """
    m = _match(_AGE, text, "age", "an age such as 90s, 30m, 12h, 7d or 2w")
    return float(m.group(1)) * _AGE_UNITS[m.group(2).lower()]


def _entry(entries: FleetCapable | None, directory: Path) -> dict[str, Any]:
    files = [p for p in directory.rglob("*") if p.is_file()]
    info = {"kernel": "?", "target": None, "stale": None}
    if entries is not None:
        info |= entries.entry_info(directory)
    return info | {
        "name": directory.name,
        "bytes": sum(p.stat().st_size for p in files),
        # the newest file: a disk hit reads, and a compile or install writes, the entry
        "used": max((p.stat().st_mtime for p in files), default=directory.stat().st_mtime),
    }


def cache_info(backend: Any, root: str | os.PathLike[str]) -> dict[str, Any]:
    """Entries, bytes, per kernel, and the stale entries of one backend's cache directory."""
    fleet = capability(backend, FleetCapable)
    entries = [_entry(fleet, e) for e in iter_entries(root)]
    kernels: dict[str, dict[str, int]] = {}
    for e in entries:
        k = kernels.setdefault(e["kernel"], {"entries": 0, "bytes": 0, "stale": 0})
        k["entries"] += 1
        k["bytes"] += e["bytes"]
        k["stale"] += e["stale"] is not None
    return {
        "directory": str(root),
        "entries": len(entries),
        "bytes": sum(e["bytes"] for e in entries),
        "kernels": dict(sorted(kernels.items())),
        "stale": {e["name"]: e["stale"] for e in entries if e["stale"] is not None},
    }


def _remove(directory: Path) -> None:
    trash = directory.with_name(f".warmkit-trash-{uuid.uuid4().hex}")
    try:
        os.rename(directory, trash)  # gone for readers at once
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def prune_cache(
    backend: Any,
    root: str | os.PathLike[str],
    *,
    max_size: int | None = None,
    older_than: float | None = None,
    stale: bool = False,
    dry_run: bool = False,
    keep: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Remove entries: the stale ones, those unused for ``older_than`` seconds, then the least
    recently used until the cache holds at most ``max_size`` bytes.

    Args:
        keep: entry directory names never to remove (``explain.manifest_entries``), each
            with what needs it.

    Returns:
        ``{"removed": {name: why}, "freed": bytes, "kept": n, "bytes": bytes left}``.

    Raises:
        ValueError: no criterion given, or the entries to keep alone exceed ``max_size``.
    """
    if max_size is None and older_than is None and not stale:
        raise ValueError("prune needs --max-size, --older-than or --stale")
    keep = keep or {}
    fleet = capability(backend, FleetCapable)
    entries = sorted((_entry(fleet, e) for e in iter_entries(root)), key=lambda e: e["used"])
    kept_bytes = sum(e["bytes"] for e in entries if e["name"] in keep)
    if max_size is not None and kept_bytes > max_size:
        raise ValueError(
            f"{root}: the {sum(e['name'] in keep for e in entries)} entr(ies) the --keep "
            f"manifest needs take {kept_bytes} bytes, over --max-size {max_size} bytes; raise "
            "--max-size or keep a smaller manifest"
        )
    now = time.time()
    removed: dict[str, str] = {}
    for e in entries:
        if e["name"] in keep:
            continue
        if stale and e["stale"] is not None:
            removed[e["name"]] = f"stale: {e['stale']}"
        elif older_than is not None and now - e["used"] > older_than:
            removed[e["name"]] = f"unused for {(now - e['used']) / 86400:.1f} days"
    left = [e for e in entries if e["name"] not in removed]
    total = sum(e["bytes"] for e in left)
    evictable = [e for e in left if e["name"] not in keep]  # least recently used first
    while max_size is not None and evictable and total > max_size:
        e = evictable.pop(0)
        removed[e["name"]] = f"over --max-size {max_size} bytes"
        total -= e["bytes"]
    left = [e for e in left if e["name"] not in removed]
    if not dry_run:
        for name in removed:
            _remove(Path(root) / name)
    by_name = {e["name"]: e["bytes"] for e in entries}
    logger.info("pruned %d entr(ies) from %s", len(removed), root)
    return {
        "directory": str(root),
        "removed": removed,
        "freed": sum(by_name[n] for n in removed),
        "kept": len(left),
        "bytes": total,
    }


def push_cache(
    backend: Any, url: str, root: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Publish every complete local entry to the store at ``url`` (the first publisher wins).

    Raises:
        StoreUnavailableError: the store cannot be reached.
    """
    entries = _fleet_entries(backend)
    with _scope(entries, root):
        return _push(backend.name, entries, url)


def _fleet_entries(backend: Any) -> FleetCapable:
    """What provides ``backend``'s ``FleetCapable`` (push and pull need it).

    Raises:
        TypeError: the backend has none.
    """
    entries = capability(backend, FleetCapable)
    if entries is None:
        raise TypeError(f"backend {backend.name!r} cannot address its entries in a store")
    return entries


def _scope(entries: FleetCapable, root: str | os.PathLike[str] | None) -> Any:
    """The backend's cache pointed at ``root`` (``--cache-dir``), so that its entry
    lookups (``entry_files``, ``entry_dir``) name ``root``'s entries, not the default's."""
    if root is None or Path(root).resolve() == Path(entries.cache_dir()).resolve():
        return contextlib.nullcontext()
    return entries.cache_scope(root)


def _push(name: str, entries: FleetCapable, url: str) -> dict[str, Any]:
    fleet = Fleet(url, store_required=True)
    pushed: list[str] = []
    present: list[str] = []
    skipped: dict[str, str] = {}
    try:
        for directory in iter_entries(entries.cache_dir()):
            ek = entries.entry_key_of(directory)
            files = entries.entry_files(ek) if ek is not None else None
            if ek is None or files is None:
                skipped[directory.name] = "not a complete entry"
                continue
            info = _entry(entries, directory)
            if info["stale"] is not None:
                skipped[directory.name] = f"stale: {info['stale']}"
                continue
            published = fleet.publish(
                f"{name}/{ek}",
                {n: Path(p).read_bytes() for n, p in files.items()},
                kernel=info["kernel"],
                target=info["target"],
                fingerprint=entries.cache_fingerprint(info["target"]),
            )
            (pushed if published else present).append(ek)
    finally:
        fleet.close()
    return {"store": fleet.url, "pushed": pushed, "present": present, "skipped": skipped}


def pull_cache(
    backend: Any, url: str, root: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Install every entry of the store at ``url`` for this backend into its local cache (or ``root``).

    Each entry is verified (sha256 of every file), checked against this host's
    fingerprint for its target, relocated and renamed into place; a bad one is
    refused, deleted from the store, and listed.

    Raises:
        StoreUnavailableError: the store cannot be reached.
    """
    entries = _fleet_entries(backend)
    with _scope(entries, root):
        return _pull(backend, entries, url)


def _pull(backend: Any, entries: FleetCapable, url: str) -> dict[str, Any]:
    fleet = Fleet(url, store_required=True)
    pulled: list[str] = []
    present: list[str] = []
    refused: list[str] = []
    prefix = f"{backend.name}/"
    try:
        keys = fleet.store.keys()  # type: ignore[union-attr]
        for key in sorted(k for k in keys if k.startswith(prefix)):
            ek = key[len(prefix) :]
            if entries.entry_files(ek) is not None:
                present.append(ek)
                continue
            # verified (names, signature, sha256s); a bad one is deleted from the store
            entry = fleet._fetch_entry(key, entries.entry_file_allowed)
            ok = entry is not None and fleet._install(
                backend, ek, key, entry.meta.get("target"), entry
            )
            (pulled if ok else refused).append(ek)
    finally:
        fleet.close()
    return {"store": fleet.url, "pulled": pulled, "present": present, "refused": refused}


def clear_store(url: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Delete every entry of the store at ``url`` (``warmkit cache clear-store``).

    For a fresh start, e.g. a measurement that needs an empty store. Leases
    expire on their own and are left alone.

    Raises:
        StoreUnavailableError: the store cannot be reached.
    """
    from .stores.base import open_store

    store = open_store(url)
    try:
        keys = list(store.keys())
        if not dry_run:
            for key in keys:
                store.delete(key)
    finally:
        store.close()
    return {"store": _store_url(url), "deleted": [] if dry_run else keys, "found": keys}


def _store_url(url: str) -> str:
    from .stores.base import _redact

    return _redact(str(url))
