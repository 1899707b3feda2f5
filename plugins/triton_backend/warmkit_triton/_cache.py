"""Triton cache entries warmkit can trust: the structural check, verified lookups, records.

Triton trusts whatever its cache holds: a truncated ``.cubin`` is a disk hit
that fails (or computes garbage) only when the GPU loads it, and a truncated
metadata ``.json`` fails every later compile of that kernel with a bare
``JSONDecodeError``. So while warmkit compiles, Triton's cache manager is
:class:`VerifyingCacheManager`: before Triton reads an entry as a hit, the
entry is checked (its ``warmkit-integrity.json`` when warmkit wrote it, and
:func:`verify_cache_entry` always); a bad entry is quarantined with a warning
naming it (``warmkit._integrity``), and Triton compiles a fresh one.

A user's own ``TRITON_CACHE_MANAGER`` (e.g. a remote cache) is left alone:
warmkit then verifies nothing at lookup and says so at DEBUG level.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from warmkit._integrity import quarantine, verify_entry, write_record

__all__ = ["entry_dir", "record_entry", "verify_cache_entry", "verifying"]

logger = logging.getLogger(__name__)


def entry_dir(cache: str | os.PathLike[str], hash_hex: str) -> str:
    """The directory of the entry with Triton cache hash ``hash_hex`` (Triton names it in base32)."""
    name = base64.b32encode(bytes.fromhex(hash_hex)).decode().rstrip("=")
    return os.path.join(cache, name)


def verify_cache_entry(entry: str | os.PathLike[str]) -> list[str]:
    """Structural problems of one Triton cache entry; empty when it is sound.

    Every group file (``__grp__<name>.json``) must parse and list its files;
    each listed file must exist in the entry and be non-empty, and each
    ``.json`` among them must parse as an object. An entry without a group
    file (Triton's launcher and utility caches) needs non-empty files.
    """
    root = Path(entry)
    problems: list[str] = []
    groups = sorted(root.glob("__grp__*.json"))
    listed: set[str] = set()
    for grp in groups:
        try:
            data = json.loads(grp.read_text())
            children = data["child_paths"]
            if not isinstance(children, dict):
                raise TypeError("child_paths is not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"group file {grp.name} is unreadable ({type(exc).__name__}: {exc})")
            continue
        listed.update(Path(p).name for p in children.values())
    for path in sorted(root.iterdir()):
        if not path.is_file() or path.name.startswith(("warmkit-", ".")):
            continue
        if groups and path.name not in listed and not path.name.startswith("__grp__"):
            continue  # not part of the kernel (Triton never reads it)
        if path.stat().st_size == 0:
            problems.append(f"{path.name} is empty")
        elif path.suffix == ".json" and not path.name.startswith("__grp__"):
            try:
                if not isinstance(json.loads(path.read_text()), dict):
                    problems.append(f"metadata {path.name} is not a JSON object")
            except (OSError, ValueError) as exc:
                problems.append(f"metadata {path.name} does not parse ({exc})")
    for name in sorted(listed):
        if not (root / name).is_file():
            problems.append(f"{name} is listed by the group file but missing")
    return problems


def record_entry(entry: str | os.PathLike[str]) -> None:
    """Record a freshly compiled entry's sha256s and sizes (``warmkit-integrity.json``).

    A failure to write is logged, not raised: the compile itself succeeded,
    and an entry without a record still gets the structural check.
    """
    root = Path(entry)
    if not root.is_dir():
        return  # a remote cache manager: nothing local to record
    try:
        write_record(root)
    except OSError as exc:
        logger.warning("%s", exc)


def _manager_class() -> type:
    from triton.runtime.cache import FileCacheManager

    class VerifyingCacheManager(FileCacheManager):  # type: ignore[misc, valid-type]
        """Triton's file cache, checking an entry before Triton reads it as a hit."""

        def get_group(self, filename: str) -> Any:
            if not os.path.exists(self._make_path(f"__grp__{filename}")):
                return None  # a miss, or an entry still being written
            problems = verify_entry(self.cache_dir, verify_cache_entry)
            if problems:
                quarantine(self.cache_dir, problems)
                os.makedirs(self.cache_dir, exist_ok=True)  # Triton writes the new entry here
                return None
            return super().get_group(filename)

    return VerifyingCacheManager


_lock = threading.Lock()
_users = 0
_cls: type | None = None


@contextlib.contextmanager
def verifying() -> Iterator[None]:
    """Make Triton's cache verify entries before each hit, for the block (refcounted, process-wide)."""
    global _users, _cls
    from triton import knobs

    with _lock:
        if _users == 0:
            if knobs.cache.manager_class is None:
                _cls = _cls or _manager_class()
                knobs.cache.manager_class = _cls
            else:
                logger.debug(
                    "TRITON_CACHE_MANAGER=%s is set: cache entries are not verified at lookup",
                    knobs.cache.manager_class,
                )
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _cls is not None and knobs.cache.manager_class is _cls:
                del knobs.cache.manager_class
