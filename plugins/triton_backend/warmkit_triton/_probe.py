"""``TritonCache.entry_key``'s probe (the backend's ``cache`` component): a warm key's cache identity computed, and its entry loaded, once.

The fleet asks for a key's entry (``entry_key``) before compiling it. The probe
runs the kernel's own launch path up to Triton's cache key
(``_triton_api.probe_or_load``); when that entry is complete on disk it lets
Triton load it right there, and the backend's next ``compile()`` of that key in
the same thread returns the result (``Loaded``) instead of walking the launch
path again (``docs/performance.md``).
"""

from __future__ import annotations

import contextvars
import threading
from pathlib import Path
from typing import Any

from ._aot import cache_dir
from ._entry import complete_entry, entry_dir

__all__ = ["Loaded", "Probed", "entry_on_disk", "probing"]

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
