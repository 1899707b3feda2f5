"""``TritonCache.entry_key``'s probe (the backend's ``cache`` component): a warm key's cache identity computed, and its entry loaded, once.

The fleet asks for a key's entry (``entry_key``) before compiling it. The probe
runs the kernel's own launch path up to Triton's cache key
(``_triton_api.probe_or_load``); when that entry is complete on disk it lets
Triton load it right there, and the backend's next ``compile()`` of that key in
the same thread returns the result (``Loaded``) instead of walking the launch
path again (``docs/performance.md``). For an ahead-of-time target the entry is
not even read into memory: ``aot_hit`` stands in for Triton's ``CompiledKernel``.
"""

from __future__ import annotations

import contextvars
import json
import threading
from pathlib import Path
from typing import Any

import attrs

from ._aot import cache_dir
from ._entry import complete_entry, entry_dir, is_metadata, sound_entry

__all__ = ["AotHit", "Loaded", "Probed", "aot_hit", "entry_on_disk", "probing"]

# Set by entry_key(): the compile path runs up to Triton's cache key and stops there, or loads
# the entry when it is on disk; the list receives the hash the probe computed.
probing: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "warmkit_triton_probing", default=None
)


class Probed(Exception):
    """Carries an entry key (or None: nothing to compile) out of ``compile()``."""

    def __init__(self, digest: str | None) -> None:
        self.digest = digest


class Loaded:
    """What ``entry_key()``'s probe loaded (a complete entry on disk), for the next ``compile()``.

    One slot per thread: the fleet calls ``compile(kernel, key, target)`` right
    after ``entry_key`` in the same thread, and any ``compile()`` empties it, so
    a result is never served to a later, unrelated call.
    """

    _local = threading.local()

    @classmethod
    def put(cls, kernel: Any, key: Any, target: str | None, result: Any) -> None:
        cls._local.slot = (kernel, key, target, result)

    @classmethod
    def take(cls, kernel: Any, key: Any, target: str | None) -> Any:
        slot = getattr(cls._local, "slot", None)
        cls._local.slot = None
        if slot is not None and slot[0] is kernel and slot[2] == target and slot[1] == key:
            return slot[3]
        return None

    @classmethod
    def put_files(cls, digest: str, files: dict[str, Path] | None) -> None:
        cls._local.files = (digest, files)

    @classmethod
    def peek_files(cls, digest: str) -> dict[str, Path] | None:
        """What ``take_files(digest)`` would return, left in place for it."""
        found = getattr(cls._local, "files", None)
        return found[1] if found is not None and found[0] == digest else None

    @classmethod
    def take_files(cls, digest: str) -> dict[str, Path] | None:
        """The complete entry ``digest`` the probe just found in this thread, once; else None."""
        found = getattr(cls._local, "files", None)
        cls._local.files = None
        return found[1] if found is not None and found[0] == digest else None


def entry_on_disk(digest: str) -> bool:
    """Whether the probe may load entry ``digest``: complete on disk (``_entry.complete_entry``).

    The files found are kept for the fleet's ``entry_files(digest)`` that follows in this
    thread (one read of the group file per warm key, not two).
    """
    files = complete_entry(Path(entry_dir(cache_dir(), digest)))
    Loaded.put_files(digest, files)
    return files is not None


@attrs.frozen
class AotHit:
    """An ahead-of-time disk hit in the place of Triton's ``CompiledKernel``: what an AOT warmup reads of one.

    An AOT warmup loads and launches nothing: of the compiled kernel it reads
    the cache hash and kernel name (``compiled_identity``) and the source's
    signature (``launcher_recipe``), and Triton's in-memory cache of the AOT
    target's device holds it until that device is dropped. Triton's own hit
    would read every file of the entry (the cubin and four IRs) and build a
    metadata class: about half of a warm AOT key's cost.

    Attributes:
        hash: the cache hash (hex sha256), the entry's directory.
        name: the kernel's name, from the entry's metadata.
        src: Triton's ``ASTSource`` the hash was computed from.
    """

    hash: str
    name: str
    src: Any


def aot_hit(digest: str, src: Any) -> AotHit | None:
    """``probe_or_load``'s stand-in for an AOT target: the entry ``entry_on_disk`` just accepted, checked.

    The entry is checked as Triton's lookup checks it under ``verifying()``
    (``_entry.sound_entry``: unchanged since a full check, or checked again;
    a bad one is quarantined); its metadata must parse and name this hash.
    None when any of that fails: Triton's ``compile`` then runs, as without a
    stand-in (a quarantined entry is compiled again).
    """
    files = Loaded.peek_files(digest)
    directory = Path(entry_dir(cache_dir(), digest))
    if files is None or not sound_entry(str(directory)):
        return None
    metadata = [name for name in files if is_metadata(name)]
    if len(metadata) != 1:
        return None
    try:
        # the file in the entry, which sound_entry checked: not the path the group file names
        meta = json.loads((directory / metadata[0]).read_text())
    except (OSError, ValueError):
        return None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name or meta.get("hash") != digest:
        return None
    return AotHit(hash=digest, name=name, src=src)
