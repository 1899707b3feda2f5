"""Kernels and a backend for the core's tests: ``compile()`` is plain Python (no torch, no triton).

Module-level, so that manifests can name them by ``module:QualName`` and
another process can import them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import attrs

import warmkit

#: Every compile of a test kernel or the fake backend: (kernel name, key, target).
COMPILES: list[tuple[str, Any, str | None]] = []
_lock = threading.Lock()


@attrs.define
class Executor:
    """What a test compile returns: it remembers what it was compiled for."""

    kernel: str
    key: Any
    target: str | None = None
    cache_hit: bool = False

    def __call__(self, *args: Any) -> tuple[str, Any]:
        return (self.kernel, self.key)


def _record(kernel: str, key: Any, target: str | None) -> None:
    with _lock:
        COMPILES.append((kernel, key, target))


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


class FakeBackend:
    """Backend ``fake``: configurable through class attributes, reset by ``reset()``."""

    name = "fake"
    status = warmkit.BackendStatus(ok=True, reason="fake backend", version="9.9")
    device: str | None = "cpu"
    par = 1
    fail_keys: frozenset[Any] = frozenset()
    #: called with (kernel, key, target) before a compile returns; a test's hook.
    hook: Callable[[Any, Any, str | None], None] | None = None
    cache_hit_keys: frozenset[Any] = frozenset()
    scopes: ClassVar[list[tuple[str | None, int]]] = []
    monitor_calls: ClassVar[list[str]] = []
    instances = 0

    def __init__(self) -> None:
        type(self).instances += 1

    def available(self) -> warmkit.BackendStatus:
        return self.status

    def default_target(self) -> str | None:
        return self.device

    def parallelism(self, target: str | None) -> int:
        return self.par

    @contextlib.contextmanager
    def compile_scope(self, target: str | None, jobs: int) -> Iterator[None]:
        self.scopes.append((target, jobs))
        yield

    def compile(self, kernel: Any, key: Any, target: str | None) -> Executor:
        if self.hook is not None:
            type(self).hook(kernel, key, target)
        if key in self.fail_keys:
            raise ValueError(f"fake compile error for {key!r}")
        _record(kernel.name, key, target)
        return Executor(kernel.name, key, target, cache_hit=key in self.cache_hit_keys)

    def install_monitor(self) -> None:
        self.monitor_calls.append("install")

    def uninstall_monitor(self) -> None:
        self.monitor_calls.append("uninstall")


class ScaleKernel(warmkit.JitKernel["ScaleKernel.CompileKey"]):
    """Compiled by backend ``fake``; ``scale`` is accepted but never read."""

    backend = "fake"

    @attrs.frozen
    class CompileKey:
        block: int
        dtype: str

    def dispatch(self, *, n, dtype="float16", scale=1.0):
        return self.CompileKey(block=min(1024, next_pow2(n)), dtype=dtype)


class PyKernel(warmkit.JitKernel["PyKernel.CompileKey"]):
    """Compiles itself in plain Python; ``fail_on`` keys raise, ``hook`` runs inside compile."""

    fail_on: frozenset[Any] = frozenset()
    hook: Callable[[Any], None] | None = None

    @attrs.frozen
    class CompileKey:
        n: int
        flag: bool

    def dispatch(self, *, n, flag=False):
        return self.CompileKey(n=n, flag=flag)

    def compile(self, key):
        if type(self).hook is not None:
            type(self).hook(key)
        if key in self.fail_on:
            raise ValueError(f"cannot compile {key!r}")
        _record(self.name, key, warmkit.current_target())
        return Executor(self.name, key, warmkit.current_target())


class OtherKernel(warmkit.JitKernel["OtherKernel.CompileKey"]):
    """A second self-compiling kernel, with an explicit stable name."""

    name = "tests.other"

    @attrs.frozen
    class CompileKey:
        m: int

    def dispatch(self, *, m):
        return self.CompileKey(m=m)

    def compile(self, key):
        _record(self.name, key, warmkit.current_target())
        return Executor(self.name, key, warmkit.current_target())


ALL_KERNELS = (ScaleKernel, PyKernel, OtherKernel)


def reset() -> None:
    COMPILES.clear()
    for k in ALL_KERNELS:
        k.clear_executors()
    PyKernel.fail_on = frozenset()
    PyKernel.hook = None
    FakeBackend.status = warmkit.BackendStatus(ok=True, reason="fake backend", version="9.9")
    FakeBackend.device = "cpu"
    FakeBackend.par = 1
    FakeBackend.fail_keys = frozenset()
    FakeBackend.hook = None
    FakeBackend.cache_hit_keys = frozenset()
    FakeBackend.scopes = []
    FakeBackend.monitor_calls = []
    FakeBackend.instances = 0


def compiled_keys(kernel: str | None = None) -> list[Any]:
    return [k for (name, k, _t) in COMPILES if kernel is None or name == kernel]
