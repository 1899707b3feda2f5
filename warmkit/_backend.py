"""The backend interface, the compile target, and the stub backends.

A backend compiles kernels of one DSL (Triton, TileLang, CuTe DSL ...). It is
published as an entry point in the group ``warmkit.backends``; see
``docs/plugins.md`` and ``docs/architecture.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

import attrs

from ._exceptions import BackendNotImplementedError

__all__ = [
    "Backend",
    "BackendStatus",
    "CuteDSLStubBackend",
    "TileLangStubBackend",
    "current_target",
    "target_scope",
]

_target: ContextVar[str | None] = ContextVar("warmkit_target", default=None)


def current_target() -> str | None:
    """The target the compile in progress is for: ``None`` means this process's device.

    ``JitKernel.compile`` implementations that do not go through a backend
    read it to honour ``WarmupConfig.target``.
    """
    return _target.get()


@contextlib.contextmanager
def target_scope(target: str | None) -> Iterator[None]:
    """Set ``current_target()`` for the duration of a block (in this thread or task)."""
    token = _target.set(target)
    try:
        yield
    finally:
        _target.reset(token)


@attrs.frozen
class BackendStatus:
    """Whether a backend can compile in this process.

    Attributes:
        ok: True when the backend can be used.
        reason: why not (or a short description when ok).
        install_hint: the command that makes it available, if any.
        version: the version of the DSL the backend drives, if installed.
    """

    ok: bool
    reason: str = ""
    install_hint: str | None = None
    version: str | None = None


@runtime_checkable
class Backend(Protocol):
    """What a ``warmkit.backends`` entry point provides. See ``docs/architecture.md``."""

    name: str

    def available(self) -> BackendStatus:
        """Whether this backend can compile here, and how to fix it if not."""
        ...

    def default_target(self) -> str | None:
        """The current device's target (e.g. ``"cuda:90"``), or None when there is no device."""
        ...

    def parallelism(self, target: str | None) -> int:
        """How many compiles are worth running at once (1 = serial)."""
        ...

    def compile_scope(self, target: str | None, jobs: int) -> ContextManager[Any]:
        """A context entered around one warmup's compiles on this backend."""
        ...

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        """Compile ``key`` of ``kernel`` for ``target`` and return its executor."""
        ...

    def install_monitor(self) -> None:
        """Install runtime-compile hooks that report to ``warmkit.monitor`` (idempotent)."""
        ...

    def uninstall_monitor(self) -> None:
        """Remove them, restoring whatever was installed before (idempotent)."""
        ...


class _StubBackend:
    """A placeholder for a DSL that warmkit will support; it says so at runtime."""

    name: str
    module: str
    distribution: str

    def available(self) -> BackendStatus:
        import importlib.metadata
        import importlib.util

        if importlib.util.find_spec(self.module) is None:
            return BackendStatus(
                ok=False,
                reason=f"{self.distribution} is not installed (module {self.module!r} not found)",
                install_hint=f"pip install {self.distribution}",
            )
        try:
            version = importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            version = None
        return BackendStatus(
            ok=True,
            reason=f"stub: warmkit cannot compile {self.name} kernels yet",
            version=version,
        )

    def default_target(self) -> str | None:
        return None

    def parallelism(self, target: str | None) -> int:
        return 1

    def compile_scope(self, target: str | None, jobs: int) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        raise BackendNotImplementedError(
            self.name,
            f"the {self.name!r} backend is a stub: warmkit cannot compile kernel "
            f"{getattr(kernel, 'name', kernel)!r} key {key!r} yet. Override compile() in the "
            "kernel wrapper, or publish a real backend under this entry-point name.",
        )

    def install_monitor(self) -> None:
        pass

    def uninstall_monitor(self) -> None:
        pass


class TileLangStubBackend(_StubBackend):
    """Stub backend ``tilelang``: reports availability, cannot compile yet."""

    name = "tilelang"
    module = "tilelang"
    distribution = "tilelang"


class CuteDSLStubBackend(_StubBackend):
    """Stub backend ``cutedsl`` (NVIDIA CUTLASS CuTe DSL): reports availability, cannot compile yet."""

    name = "cutedsl"
    module = "cutlass"
    distribution = "nvidia-cutlass-dsl"
