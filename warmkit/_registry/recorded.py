"""Recording: what a real run compiled at runtime, kept in the manifest for the next start.

A :class:`Recorder` appends recorded entries (``RecordedEntry``, the manifest's
``recorded`` section: ``manifest/entries.py``) to one file. Writes are
deduplicated (by ``RecordedEntry.id``), serialised across processes with a
``filelock`` lock beside the file, and atomic (a temporary file, then
``os.replace``), so several ranks may record into one path, or into a
``{rank}`` pattern, and a reader never sees a half-written manifest.

``key_entry`` makes the entry of a wrapped kernel's key that warmup did not
cover; ``resolve_recorded`` turns entries back into (kernel, key) pairs for
warmup.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from .manifest.codec import decode_key, decode_value, encode_key, encode_value
from .manifest.document import read_recording, recording_file
from .manifest.entries import RecordedEntry, read_recorded

__all__ = [
    "RecordedEntry",
    "Recorder",
    "active_recorder",
    "decode_value",
    "encode_value",
    "read_recorded",
    "resolve_recorded",
    "start_recording",
    "stop_recording",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_active: Recorder | None = None


def expand_path(path: str | os.PathLike[str], rank: int | None = None) -> Path:
    """``path`` with ``{rank}`` replaced by this process's rank (``WARMKIT_RANK``, else ``RANK``)."""
    from .. import _envs

    text = os.fspath(path)
    if "{rank}" in text:
        text = text.replace("{rank}", str(_envs.rank() if rank is None else rank))
    return Path(text)


class Recorder:
    """Appends recorded entries to one manifest file, safely across threads and processes.

    Args:
        path: the manifest to write; ``{rank}`` is replaced by the rank.

    Raises:
        ManifestError: from ``add``, when the existing file is not a manifest
            (it is left untouched).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = expand_path(path).absolute()
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.added = 0

    def __repr__(self) -> str:
        return f"<Recorder {self.path}>"

    def add(self, entry: RecordedEntry) -> bool:
        """Record ``entry`` unless this process already did; returns True if it was new here.

        An unreplayable entry logs a warning naming the kernel and the reason
        (once per kernel).
        """
        ident = entry.id
        with self._lock:
            if ident in self._seen:
                return False
            self._seen.add(ident)
            if not entry.replayable and entry.name not in self._warned:
                self._warned.add(entry.name)
                logger.warning(
                    "kernel %s compiled at runtime cannot be replayed in another process: %s; "
                    "it is recorded in %s with this reason",
                    entry.name,
                    entry.reason,
                    self.path,
                )
            try:
                self._merge([entry])
            except BaseException:
                self._seen.discard(ident)  # nothing was written: a later event may retry
                raise
            self.added += 1
        return True

    def add_safely(self, make: Any) -> None:
        """Build an entry with ``make()`` and ``add`` it; never raises.

        Hooks call this from inside a compile: a recording failure must not
        break the user's launch, so it is logged as an error naming the file.
        """
        try:
            entry = make()
            if entry is not None:
                self.add(entry)
        except Exception:
            logger.exception("warmkit: could not record a runtime compile into %s", self.path)

    def add_many(self, entries: Iterable[RecordedEntry]) -> int:
        """Record several entries in one locked write; returns how many were new here."""
        with self._lock:
            new = [e for e in entries if e.id not in self._seen]
            if new:
                self._merge(new)
                self._seen.update(e.id for e in new)
                self.added += len(new)
        return len(new)

    def ensure_written(self) -> None:
        """Write a manifest with no entries unless the file exists (``record && coverage`` reads 0)."""
        with self._lock:
            self._merge([])

    def _merge(self, entries: list[RecordedEntry]) -> None:
        from filelock import FileLock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):
            data, existing = read_recording(self.path)  # (None, []): no file yet
            have = {e.id for e in existing}
            added = [e for e in entries if e.id not in have]
            if not added and data is not None:
                return
            recording_file(self.path, data, existing + added)


def start_recording(path: str | os.PathLike[str]) -> Recorder:
    """Record every runtime JIT event from now on into ``path`` (``{rank}`` allowed).

    Recording sees what the monitor sees: arm it (``warmkit.monitor.arm``, or
    ``WarmupConfig(record=PATH)``, which does both).

    Raises:
        ImportError: ``filelock`` is missing (a core dependency: reinstall warmkit).
    """
    global _active
    import filelock  # noqa: F401 - fail here, not inside a compile hook

    rec = Recorder(path)
    with _lock:
        _active = rec
    logger.info("warmkit: recording runtime compiles into %s", rec.path)
    return rec


def stop_recording() -> Recorder | None:
    """Stop recording; returns the recorder that was active, if any."""
    global _active
    with _lock:
        rec, _active = _active, None
    return rec


def active_recorder() -> Recorder | None:
    """The recorder in force, or None when nothing is being recorded."""
    return _active


def key_entry(cls: Any, key: Any, target: str | None = None) -> RecordedEntry:
    """The recorded entry for a wrapped kernel's key that warmup did not cover."""
    from .._plugin.discovery import kernel_ref

    reason = None
    ref = kernel_ref(cls)
    try:
        fields = encode_key(key)
    except TypeError as exc:
        fields, reason = {"repr": repr(key)}, f"its key cannot be saved: {exc}"
    if reason is None and (cls.__module__ == "__main__" or "<locals>" in cls.__qualname__):
        reason = (
            f"kernel class {cls.__qualname__} is defined in {cls.__module__!r}"
            + (" inside a function" if "<locals>" in cls.__qualname__ else "")
            + ": another process cannot import it; move it into a module"
        )
    spec: dict[str, Any] = {"key": fields}
    if reason is None:
        from .identity import kernel_pins

        pins = kernel_pins(cls)
        if pins is not None:  # the recording host's globals: an AOT build reproduces them
            spec["pins"] = pins
    return RecordedEntry.make(
        backend=cls.backend,
        kind="key",
        kernel=ref,
        name=cls.name,
        spec=spec,
        target=target,
        reason=reason,
    )


class RecordedItem(NamedTuple):
    """A recorded entry resolved for warmup: its kernel and key, or why it cannot be warmed.

    A named tuple: one is made per recorded key, in one step (B10, performance.md).

    Attributes:
        entry: the recorded entry.
        kernel: a kernel instance (None when ``error`` is set or not replayable).
        key: the key to compile.
        error: why the entry could not even be planned (its module does not
            import, its backend is missing ...).
    """

    entry: RecordedEntry
    kernel: Any = None
    key: Any = None
    error: BaseException | None = None


def resolve_recorded(entries: Iterable[RecordedEntry]) -> list[RecordedItem]:
    """Turn recorded entries into (kernel, key) pairs for warmup, one failure per entry.

    A ``"key"`` entry loads its kernel class; a ``"raw"`` one asks its backend
    (``Backend.recorded_kernel(entry)``), which defers importing the function
    to the compile, so a stale entry fails as that entry's key.
    """
    from .._exceptions import BackendNotImplementedError
    from .._plugin.components import capability
    from .._plugin.contract import RecordReplay
    from .._plugin.discovery import get_backend, load_kernel
    from .manifest.modules import check_kernel_ref

    items = []
    # One lookup and one instance per kernel, not per entry: resolving a ref scans every
    # installed distribution's entry points (~50 ms), and a recording has an entry per key.
    kernels: dict[str, Any] = {}
    replayers: dict[str | None, RecordReplay] = {}  # each backend's, looked up once
    make = RecordedItem._make
    for entry in entries:
        if not entry.replayable:
            items.append(RecordedItem(entry))
            continue
        try:
            if entry.kind == "key":
                kernel = kernels.get(entry.kernel)
                if kernel is None:
                    check_kernel_ref(entry.kernel)  # a manifest names code (_manifest_modules)
                    kernel = kernels[entry.kernel] = load_kernel(entry.kernel)()
                spec = entry._parsed if entry._parsed is not None else entry.spec
                key = decode_key(type(kernel), spec["key"])
            else:
                replay = replayers.get(entry.backend)
                if replay is None:  # the first entry of its backend (a failure: every entry)
                    if entry.backend is None:
                        raise ValueError("a raw recorded entry must name its backend")
                    backend = get_backend(entry.backend, kernel=entry.name)
                    replay = capability(backend, RecordReplay)
                    if replay is None:
                        raise BackendNotImplementedError(
                            entry.backend,
                            f"backend {entry.backend!r} cannot replay recorded kernels",
                        )
                    replayers[entry.backend] = replay
                kernel, key = replay.recorded_kernel(entry)
        except Exception as exc:  # noqa: BLE001 - reported as this entry's failure
            items.append(RecordedItem(entry, error=exc))
            continue
        items.append(make((entry, kernel, key, None)))  # RecordedItem(entry, kernel, key)
    return items
