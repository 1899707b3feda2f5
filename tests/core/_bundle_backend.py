"""A plain-Python backend with the four bundle capabilities, and kernels it compiles.

``compile()`` writes one cache entry per key: ``<root>/<digest>/payload.bin``
and ``index.json``, which (like Triton's group files) records the entry's
absolute path. An entry is a cache hit only when its index points at itself,
so a copied entry misses until ``relocate_cache_entry`` rewrote it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import attrs

import warmkit

from ._kernels import Executor, FakeBackend


class BundleBackend(FakeBackend):
    """Backend ``fakebundle``: a ``FakeBackend`` plus a persistent cache and the bundle capabilities."""

    name = "fakebundle"
    #: the runtime cache directory (``cache_dir()``); set by the tests
    root: ClassVar[Path | None] = None
    #: part of the fingerprint: change it between build and install to simulate another host
    version: ClassVar[str] = "1.0"
    write_nothing: ClassVar[bool] = False
    #: (kernel, key, target, cache_hit) per compile
    log: ClassVar[list[tuple[str, Any, str | None, bool]]] = []
    relocated: ClassVar[list[tuple[Path, Path]]] = []
    #: (directory, entries) per prepare_entries call; prepare_error makes it raise
    prepared: ClassVar[list[tuple[Path, list[str]]]] = []
    prepare_error: ClassVar[Exception | None] = None

    def __init__(self) -> None:
        super().__init__()
        self._redirect: list[Path] = []
        self._lock = threading.Lock()

    # -- the bundle capabilities --------------------------------------------------------------

    def cache_fingerprint(self, target: str | None) -> dict[str, str]:
        target = target if target is not None else self.default_target()
        if target is not None and not str(target).startswith(("fake:", "cpu")):
            raise ValueError(f"unknown fake target {target!r}; accepted: 'fake:<n>'")
        return {"target": str(target), "version": type(self).version, "abi": "fake-abi-1"}

    def cache_dir(self) -> Path:
        assert type(self).root is not None, "test forgot to set BundleBackend.root"
        return Path(type(self).root)

    @contextlib.contextmanager
    def cache_scope(self, directory: Any) -> Iterator[Path]:
        path = Path(directory).resolve()
        self._redirect.append(path)
        try:
            yield path
        finally:
            self._redirect.pop()

    def relocate_cache_entry(self, staged: Path, final: Path) -> None:
        type(self).relocated.append((Path(staged), Path(final)))
        index = Path(staged) / "index.json"
        data = json.loads(index.read_text())
        data["self"] = str(final)
        index.write_text(json.dumps(data))

    def prepare_entries(self, directory: Path, entries: Any) -> str:
        if type(self).prepare_error is not None:
            raise type(self).prepare_error
        missing = [e for e in entries if not (Path(directory) / e / "index.json").is_file()]
        assert not missing, f"prepare_entries before the entries were published: {missing}"
        type(self).prepared.append((Path(directory), list(entries)))
        return f"{len(entries)} entr(ies) prepared"

    # -- compiling ---------------------------------------------------------------------------

    def _dir(self) -> Path:
        return self._redirect[-1] if self._redirect else self.cache_dir()

    def compile(self, kernel: Any, key: Any, target: str | None) -> Executor:
        if key in self.fail_keys:
            raise ValueError(f"fake compile error for {key!r}")
        digest = hashlib.sha256(f"{kernel.name}|{key!r}|{target}".encode()).hexdigest()[:20]
        entry = self._dir() / digest
        payload = f"{kernel.name} {key!r} for {target}\n".encode() * 50
        index = entry / "index.json"
        hit = (
            index.is_file()
            and json.loads(index.read_text()).get("self") == str(entry)
            and (entry / "payload.bin").read_bytes() == payload
        )
        if not hit and not type(self).write_nothing:
            entry.mkdir(parents=True, exist_ok=True)
            (entry / "payload.bin").write_bytes(payload)
            index.write_text(json.dumps({"self": str(entry), "kernel": kernel.name}))
        with self._lock:
            type(self).log.append((kernel.name, key, target, hit))
        return Executor(kernel.name, key, target, cache_hit=hit)


class OtherBundleBackend(BundleBackend):
    """Backend ``fakebundle2``: a second bundle-capable backend with its own root and version."""

    name = "fakebundle2"
    root: ClassVar[Path | None] = None
    version: ClassVar[str] = "2.0"


class BundledKernel(warmkit.JitKernel["BundledKernel.CompileKey"]):
    backend = "fakebundle"

    @attrs.frozen
    class CompileKey:
        block: int
        dtype: str

    def dispatch(self, *, block: int, dtype: str = "float16"):
        return self.CompileKey(block, dtype)


class OtherBundledKernel(warmkit.JitKernel["OtherBundledKernel.CompileKey"]):
    backend = "fakebundle2"

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n: int):
        return self.CompileKey(n)


def reset() -> None:
    for cls in (BundleBackend, OtherBundleBackend):
        cls.root = None
        cls.write_nothing = False
        cls.log = []
        cls.relocated = []
        cls.prepared = []
        cls.prepare_error = None
    BundleBackend.version = "1.0"
    OtherBundleBackend.version = "2.0"
    for k in (BundledKernel, OtherBundledKernel):
        k.clear_executors()
