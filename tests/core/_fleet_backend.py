"""A plain-Python backend the fleet can drive: ``BundleBackend``'s entries, addressable by key.

An entry's key is the digest ``BundleBackend.compile`` names its directory with,
so ``entry_key`` knows it without compiling, as Triton's cache key does.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

import warmkit

from ._bundle_backend import BundleBackend

#: the files of a complete entry
FILES = ("payload.bin", "index.json")


class FleetBackend(BundleBackend):
    """Backend ``fakefleet``: a ``BundleBackend`` with the ``FleetCapable`` methods."""

    name = "fakefleet"
    root: ClassVar[Path | None] = None
    log: ClassVar[list[tuple[str, Any, str | None, bool]]] = []
    relocated: ClassVar[list[tuple[Path, Path]]] = []
    prepared: ClassVar[list[tuple[Path, list[str]]]] = []

    def entry_key(self, kernel: Any, key: Any, target: str | None) -> str | None:
        return hashlib.sha256(f"{kernel.name}|{key!r}|{target}".encode()).hexdigest()[:20]

    def entry_dir(self, entry_key: str) -> Path:
        return self._dir() / entry_key

    def entry_files(self, entry_key: str) -> Mapping[str, Path] | None:
        entry = self.entry_dir(entry_key)
        files = {name: entry / name for name in FILES}
        return files if all(p.is_file() for p in files.values()) else None

    def entry_key_of(self, directory: str | os.PathLike[str]) -> str | None:
        return Path(directory).name

    def entry_info(self, directory: str | os.PathLike[str]) -> Mapping[str, Any]:
        index = Path(directory) / "index.json"
        if not index.is_file():  # "?": the core's own name for an entry of unknown kernel
            return {"kernel": "?", "target": None, "stale": "no index.json"}
        return {"kernel": json.loads(index.read_text())["kernel"], "target": None, "stale": None}

    def entry_file_allowed(self, name: str) -> bool:
        return name in FILES


class FleetKernel(warmkit.JitKernel["FleetKernel.CompileKey"]):
    backend = "fakefleet"

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n: int):
        return self.CompileKey(n)


def warm_host(
    root: Path, ns: list[int], backend: type = FleetBackend, **config: Any
) -> warmkit.WarmupReport:
    """Warm ``ns`` of ``FleetKernel`` for ``fake:1`` as a fresh process on the host whose cache is
    ``root`` would, with ``backend()`` as ``fakefleet`` (``FleetBackend``, or one built on it)."""
    from warmkit.testing import backend_override

    reset()
    FleetBackend.root = root
    registry = warmkit.WarmupRegistry()
    registry.add(FleetKernel, n=ns)
    with backend_override("fakefleet", backend()):
        return warmkit.warmup(
            warmkit.WarmupConfig(progress="off", target="fake:1", **config), registry
        )


def reset() -> None:
    FleetBackend.root = None
    FleetBackend.log = []
    FleetBackend.relocated = []
    FleetBackend.prepared = []
    FleetKernel.clear_executors()
