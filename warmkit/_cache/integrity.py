"""Cache-entry integrity: a per-file sha256 and size record, verification, quarantine.

A *cache entry* is one directory of a backend's persistent cache (Triton's
``<cache>/<base32 hash>/``). When warmkit writes or installs an entry it
records every file's sha256 and size in ``<entry>/warmkit-integrity.json``.
Before warmkit trusts an entry (reports it ``cached``, packs it into a bundle,
publishes it, or ``warmkit cache verify`` passes it) the record is checked;
an entry without a record (the DSL wrote it on its own) gets the backend's
structural check only (for Triton: parseable metadata, non-empty binaries).

A bad entry is *quarantined*: moved with one rename into
``<cache>/.warmkit-quarantine/`` (the runtime never looks there) and named in
a WARNING; the next compile then writes a fresh one. Quarantine keeps the
evidence instead of deleting it; ``warmkit cache verify --quarantine`` does the
same for a whole cache.

The API (also for stores that hold entries elsewhere, e.g. a shared store):

``file_record(entry)``        {relative path: {"sha256", "size"}} of an entry's own files
``write_record(entry)``       write ``warmkit-integrity.json`` (atomically) and return it
``read_record(entry)``        the recorded files, or None when there is no record
``update_record(entry, names)`` re-record files warmkit itself rewrote (relocated paths)
``compare(recorded, actual)`` problems between two file records (missing, size, sha256)
``verify_entry(entry, check)`` problems of one entry; ``[]`` = trustworthy
``verify_entry_stamped(entry, check)`` the same, skipping the hashes while the entry's
                              files are unchanged since a full check passed (lookups)
``quarantine(entry, problems)`` move it aside, warn, return where it went
``verify_cache(root, check)`` ``{entry name: problems}`` for every bad entry under ``root``
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "QUARANTINE_DIR",
    "RECORD",
    "compare",
    "file_record",
    "identity",
    "iter_entries",
    "quarantine",
    "read_record",
    "sha256_file",
    "update_record",
    "verify_cache",
    "verify_entry",
    "verify_entry_stamped",
    "write_record",
]

logger = logging.getLogger(__name__)

#: The record warmkit writes into every entry it writes or installs.
RECORD = "warmkit-integrity.json"
#: The stamp of the last full check that passed (``verify_entry_stamped``).
STAMP = "warmkit-verified.json"
#: A file changed less than this before a check is not stamped ("racy" timestamps, as in git).
_RACY_NS = 2_000_000_000
#: Where bad entries are moved, inside the cache directory.
QUARANTINE_DIR = ".warmkit-quarantine"
_FORMAT = 1

#: A backend's structural check of one entry: a list of problems, empty when sound.
Check = Callable[[Path], Sequence[str]]


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _own_files(entry: Path) -> list[tuple[str, Path]]:
    """``(relative posix path, path)`` of the entry's content, sorted by path components.

    Every regular file (a link to one too) but warmkit's records and writers'
    temporaries; links to directories are not followed. ``os.scandir`` and
    string joins, not ``Path.rglob`` and ``relative_to``: ~0.1 ms less of
    each cached entry's check in a warm restart (9 files, CPU box).
    """
    return [(rel, Path(d.path)) for rel, d in _scan(os.fspath(entry))[0]]


def _scan(
    entry: str,
) -> tuple[list[tuple[str, os.DirEntry[str]]], os.DirEntry[str] | None]:
    """:func:`_own_files` as ``os.DirEntry`` objects, and the integrity record's (None if absent).

    One walk gives both, and :func:`_stat_entry` stats the ``DirEntry`` objects:
    no ``Path`` per file and no second look-up of the record (~0.05 ms of each
    warm key's stamp check, CPU box).
    """
    found: list[tuple[tuple[str, ...], os.DirEntry[str]]] = []
    record: list[os.DirEntry[str]] = []

    def walk(directory: str, parts: tuple[str, ...]) -> None:
        with os.scandir(directory) as it:
            for d in it:
                name, is_dir = d.name, d.is_dir(follow_symlinks=False)
                if not parts and name == RECORD:
                    record.append(d)
                if not parts and (
                    name.startswith(("tmp.", "."))  # Triton's in-progress writes, dot-temporaries
                    or (name.startswith("warmkit-") and not is_dir)
                ):
                    continue  # (warmkit's own metadata is rewritten freely)
                if is_dir:
                    walk(d.path, (*parts, name))
                elif name != "lock" and _is_file(d):  # lock files are not content
                    found.append(((*parts, name), d))

    walk(entry, ())
    found.sort(key=lambda item: item[0])
    return [("/".join(parts), d) for parts, d in found], (record[0] if record else None)


def _is_file(d: os.DirEntry[str]) -> bool:
    try:
        return d.is_file()
    except OSError:  # a link in a loop, as Path.is_file() answers it
        return False


def file_record(entry: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """``{relative posix path: {"sha256": hex, "size": bytes}}`` for the entry's own files.

    warmkit's ``warmkit-*`` files and in-progress temporaries are not part of it.
    """
    return {
        rel: {"sha256": sha256_file(path), "size": path.stat().st_size}
        for rel, path in _own_files(Path(entry))
    }


def identity(entry: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """What makes two copies of an entry the same: its file record (no paths, no times)."""
    return file_record(entry)


def write_record(entry: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Record the entry's files in ``<entry>/warmkit-integrity.json``, atomically.

    Returns:
        The file record written.

    Raises:
        OSError: the record cannot be written; the message names its path.
    """
    root = Path(entry)
    files = file_record(root)
    _write(root, files)
    return files


def _write(root: Path, files: dict[str, dict[str, Any]]) -> None:
    text = json.dumps({"format": _FORMAT, "files": files}, indent=1, sort_keys=True)
    path = root / RECORD
    tmp = root / f".{RECORD}.{uuid.uuid4().hex}.tmp"
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write integrity record {path}: {exc.strerror}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def update_record(entry: str | os.PathLike[str], names: Sequence[str]) -> None:
    """Re-record only ``names`` after warmkit itself rewrote them (e.g. relocated paths).

    The other files keep their recorded digests, so corruption elsewhere is
    not blessed. No record, nothing to update.
    """
    root = Path(entry)
    recorded = read_record(root)
    if recorded is None:
        return
    for name in names:
        p = root / name
        recorded[name] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    _write(root, recorded)


def read_record(entry: str | os.PathLike[str]) -> dict[str, dict[str, Any]] | None:
    """The file record of ``<entry>/warmkit-integrity.json``; None when the entry has none.

    Raises:
        ValueError: the record exists but is unreadable or malformed.
    """
    path = Path(entry) / RECORD
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreadable integrity record {path.name} ({exc})") from exc
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and {"sha256", "size"} <= set(v) for v in files.values()
    ):
        raise ValueError(f"malformed integrity record {path.name}")
    return files


def compare(recorded: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]]) -> list[str]:
    """The differences between a recorded and an actual file record, one line each."""
    problems = []
    for name, want in sorted(recorded.items()):
        got = actual.get(name)
        if got is None:
            problems.append(f"{name} is missing")
        elif got["size"] != want["size"]:
            problems.append(f"{name} has {got['size']} bytes, recorded {want['size']}")
        elif got["sha256"] != want["sha256"]:
            problems.append(
                f"{name} sha256 {got['sha256'][:12]}… differs from the recorded {want['sha256'][:12]}…"
            )
    return problems


def verify_entry(entry: str | os.PathLike[str], check: Check | None = None) -> list[str]:
    """Everything wrong with one entry; empty when it can be trusted.

    The recorded sha256s and sizes when the entry has a record (files added
    since are allowed: a DSL may add an entry's launcher later), then
    ``check`` (the backend's structural check) in any case.

    Args:
        entry: the entry's directory.
        check: the backend's structural check, e.g. the Triton backend's
            ``verify_cache_entry``.
    """
    root = Path(entry)
    if not root.is_dir():
        return [f"{root} is not a directory"]
    try:
        recorded = read_record(root)
        problems = [] if recorded is None else compare(recorded, file_record(root))
        if check is not None:
            problems.extend(check(root))
    except (OSError, ValueError) as exc:
        problems = [str(exc)]
    return problems


def verify_entry_stamped(entry: str | os.PathLike[str], check: Check | None = None) -> list[str]:
    """:func:`verify_entry`, skipped while the entry is provably unchanged since one passed.

    After a full check passes, ``<entry>/warmkit-verified.json`` stamps every
    file's (device, inode, size, mtime_ns, ctime_ns), the integrity record's
    included. A later call whose stat of the entry's files (the same names,
    no more, no fewer) equals the stamp returns ``[]`` without reading them;
    any difference, a missing or unreadable stamp runs the full check (and
    stamps again if it passes). Sound against every change made through the
    file system: ``ctime`` is set by the kernel on every write, truncation,
    rename, link or ``chmod``, and no user process can set it back; a file
    replaced by another has another inode. It does not see bytes that change
    under the file system (bit rot, a raw write to the block device): that is
    what ``warmkit cache verify`` (always the full check) is for. A file
    changed within ``_RACY_NS`` of the check, or while it ran, is not stamped
    (its ctime may not move within the clock's tick), so it is checked in full
    next time. ``docs/reliability.md`` says the same.

    Args:
        entry: the entry's directory.
        check: the backend's structural check (as for :func:`verify_entry`).
    """
    root = Path(entry)
    try:
        before = _stat_entry(root)
    except OSError:
        return verify_entry(root, check)  # reports what is wrong (e.g. not a directory)
    if before == _read_stamp(root):
        return []
    problems = verify_entry(root, check)
    if not problems:
        _stamp(root, before)
    return problems


def _stat_entry(root: Path) -> dict[str, list[int]]:
    """``{relative path: [dev, ino, size, mtime_ns, ctime_ns]}`` of the entry's own files and record.

    Each stat follows links, as ``os.stat`` does (``DirEntry.stat()`` is that call). A
    dangling link in the record's place is left out, as ``Path.exists`` left it out; any
    other error stating it raises (the caller then checks the entry in full).
    """
    files, record = _scan(os.fspath(root))
    if record is not None:
        try:
            record.stat()  # cached on the DirEntry: the loop below reads it again for free
        except FileNotFoundError:
            pass
        else:
            files.append((RECORD, record))
    out = {}
    for rel, d in files:
        st = d.stat()
        out[rel] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return out


def _read_stamp(root: Path) -> dict[str, list[int]] | None:
    """The stamped stats, or None (no stamp, or one that does not parse: the stamp is data)."""
    try:
        data = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get("format") == _FORMAT else None
    return files if isinstance(files, dict) else None


def _stamp(root: Path, before: dict[str, list[int]]) -> None:
    """Stamp ``before`` if the files did not change while they were checked, nor just before."""
    try:
        after = _stat_entry(root)
    except OSError:
        return
    newest = max((s[4] for s in after.values()), default=0)
    if after != before or not after or newest > time.time_ns() - _RACY_NS:
        return
    path = root / STAMP
    tmp = root / f".{STAMP}.{uuid.uuid4().hex}.tmp"
    try:
        tmp.write_text(json.dumps({"format": _FORMAT, "files": after}, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError as exc:  # e.g. a read-only cache: every start checks it in full instead
        logger.debug("cannot stamp verified cache entry %s: %s", root, exc)
    finally:
        tmp.unlink(missing_ok=True)


def quarantine(entry: str | os.PathLike[str], problems: Sequence[str]) -> Path | None:
    """Move a bad entry into ``<cache>/.warmkit-quarantine/`` with one rename, and warn.

    Returns:
        Where it went, or None when it was already gone (another process
        quarantined or replaced it first).
    """
    root = Path(entry)
    qdir = root.parent / QUARANTINE_DIR
    dest = qdir / f"{root.name}.{uuid.uuid4().hex[:8]}"
    try:
        qdir.mkdir(exist_ok=True)
        os.rename(root, dest)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning(
            "cache entry %s is corrupt (%s) and cannot be moved aside (%s); delete it",
            root,
            "; ".join(problems),
            exc,
        )
        raise
    logger.warning(
        "cache entry %s is corrupt (%s): moved it to %s; it will be recompiled",
        root,
        "; ".join(problems),
        dest,
    )
    return dest


def iter_entries(root: str | os.PathLike[str]) -> Iterator[Path]:
    """The entry directories of a cache (not its quarantine or anyone's temporaries)."""
    base = Path(root)
    if not base.is_dir():
        return
    for path in sorted(base.iterdir()):
        if path.is_dir() and not path.name.startswith((".", "tmp.")):
            yield path


def verify_cache(
    root: str | os.PathLike[str], check: Check | None = None, *, move: bool = False
) -> dict[str, list[str]]:
    """``{entry directory: problems}`` for every bad entry under ``root``.

    Args:
        root: the cache directory.
        check: the backend's structural check of one entry.
        move: quarantine each bad entry as well.
    """
    bad: dict[str, list[str]] = {}
    for entry in iter_entries(root):
        problems = verify_entry(entry, check)
        if problems:
            bad[str(entry)] = problems
            if move:
                quarantine(entry, problems)
    return bad
