"""Triton cache entries warmkit can trust: the structural check, verified lookups, records.

Triton trusts whatever its cache holds: a truncated ``.cubin`` is a disk hit
that fails (or computes garbage) only when the GPU loads it, and a truncated
metadata ``.json`` fails every later compile of that kernel with a bare
``JSONDecodeError``. So while warmkit compiles, Triton's cache manager is
a checked subclass of its file cache (``_triton_api.checked_cache_manager``): before Triton reads an entry as a hit, the
entry is checked (its ``warmkit-integrity.json`` when warmkit wrote it, and
:func:`verify_cache_entry` always); a bad entry is quarantined with a warning
naming it (``warmkit._cache.integrity``), and Triton compiles a fresh one.

A user's own ``TRITON_CACHE_MANAGER`` (e.g. a remote cache) is left alone:
warmkit then verifies nothing at lookup and says so at DEBUG level.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from warmkit._cache.integrity import quarantine, verify_entry_stamped, write_record

from . import _triton_api as api
from ._aot import AOT_RECORD

__all__ = [
    "ENTRY_FILE",
    "complete_entry",
    "entry_dir",
    "entry_file_allowed",
    "entry_hash",
    "record_entry",
    "verify_cache_entry",
    "verifying",
]

logger = logging.getLogger(__name__)


entry_dir = api.cache_entry_dir


def complete_entry(directory: Path) -> dict[str, Path] | None:
    """The files of the complete entry in ``directory`` (as Triton's ``get_group`` decides), or None.

    Complete means a ``__grp__*.json`` whose every listed file exists; the
    warmkit AOT record is included when present.
    """
    for grp in sorted(directory.glob(api.GROUP_FILE_GLOB)):
        try:
            children = api.group_children(grp)
        except (OSError, ValueError):
            continue
        paths = {Path(p).name: Path(p) for p in children.values()}
        if paths and all(p.is_file() for p in paths.values()):
            files = {grp.name: grp, **paths}
            record = directory / AOT_RECORD
            if record.is_file():
                files[AOT_RECORD] = record
            return files
    return None


#: The names a Triton cache entry's files have: the group file, one file per compile stage
#: of the kernel (``<name>.<stage>``; CUDA and ROCm stages), and warmkit's AOT record. A
#: store entry holding any other name is refused (``FleetCapable.entry_file_allowed``).
ENTRY_FILE = re.compile(
    rf"^(?:{re.escape(api.GROUP_FILE_PREFIX)}[A-Za-z_][A-Za-z0-9_]*\.json"
    r"|[A-Za-z_][A-Za-z0-9_]*\.(?:json|source|ttir|ttgir|llir|ptx|cubin|amdgcn|hsaco|spv|ttgir_tlx)"
    rf"|{re.escape(AOT_RECORD)})$"
)


def entry_file_allowed(name: str) -> bool:
    """Whether ``name`` is a file name a Triton cache entry holds (``ENTRY_FILE``)."""
    return ENTRY_FILE.match(name) is not None


def entry_hash(directory: str | os.PathLike[str]) -> str | None:
    """The cache hash (hex sha256) an entry directory is named by (base32); None if not one."""
    name = Path(directory).name
    try:
        digest = base64.b32decode(name + "=" * (-len(name) % 8)).hex()
    except ValueError:
        return None
    return digest if len(digest) == 64 else None


def verify_cache_entry(entry: str | os.PathLike[str]) -> list[str]:
    """Structural problems of one Triton cache entry; empty when it is sound.

    Every group file (``__grp__<name>.json``) must parse and list its files;
    each listed file must exist in the entry and be non-empty, and each
    ``.json`` among them must parse as an object. An entry without a group
    file (Triton's launcher and utility caches) needs non-empty files.
    """
    root = Path(entry)
    problems: list[str] = []
    groups = sorted(root.glob(api.GROUP_FILE_GLOB))
    listed: set[str] = set()
    for grp in groups:
        try:
            children = api.group_children(grp)
        except (OSError, ValueError) as exc:
            problems.append(f"group file {grp.name} is unreadable ({type(exc).__name__}: {exc})")
            continue
        listed.update(Path(p).name for p in children.values())
    for path in sorted(root.iterdir()):
        if not path.is_file() or path.name.startswith(("warmkit-", ".")):
            continue
        if groups and path.name not in listed and not path.name.startswith(api.GROUP_FILE_PREFIX):
            continue  # not part of the kernel (Triton never reads it)
        if path.stat().st_size == 0:
            problems.append(f"{path.name} is empty")
        elif path.suffix == ".json" and not path.name.startswith(api.GROUP_FILE_PREFIX):
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


def _sound(entry: str) -> bool:
    """Whether an entry may be read as a hit; a bad one is quarantined (with a warning naming it).

    An entry unchanged since a full check passed is not hashed again (``verify_entry_stamped``).
    """
    problems = verify_entry_stamped(entry, verify_cache_entry)
    if problems:
        quarantine(entry, problems)
        return False
    return True


_lock = threading.Lock()
_users = 0
_cls: type | None = None


def custom_cache_manager() -> bool:
    """Whether a cache manager other than warmkit's verifying one is in effect (``TRITON_CACHE_MANAGER``)."""
    cls = api.cache_manager_class()
    return cls is not None and cls is not _cls


@contextlib.contextmanager
def verifying() -> Iterator[None]:
    """Make Triton's cache verify entries before each hit, for the block (refcounted, process-wide)."""
    global _users, _cls
    with _lock:
        if _users == 0:
            if api.cache_manager_class() is None:
                _cls = _cls or api.checked_cache_manager(_sound)
                api.set_cache_manager_class(_cls)
            else:
                logger.debug(
                    "TRITON_CACHE_MANAGER=%s is set: cache entries are not verified at lookup",
                    api.cache_manager_class(),
                )
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _cls is not None and api.cache_manager_class() is _cls:
                api.set_cache_manager_class(None)
