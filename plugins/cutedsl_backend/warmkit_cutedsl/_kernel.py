"""``CuteDSLKernel``, the kernel contract for CuTe DSL, and what the backend returns.

A subclass names its ``@cute.jit`` function (``fn``, or ``"module:attr"`` so
that importing the kernel class does not import CuTe) and says, per compile
key, with which arguments ``cute.compile`` builds the key's variant
(``compile_args``): :class:`FakeTensor` descriptors in place of tensors,
plain ints for scalars. At runtime ``run(key, *args)`` calls the loaded
export (a TVM-FFI function taking torch tensors) directly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs

from warmkit import FunctionKernel

__all__ = ["CuteArtifact", "CuteDSLKernel", "CuteExecutor", "FakeTensor"]

logger = logging.getLogger(__name__)

K = TypeVar("K")


@attrs.frozen
class FakeTensor:
    """A tensor argument without storage: dtype name, shape, assumed pointer alignment in bytes."""

    dtype: str
    shape: tuple[int, ...]
    align: int = 16


@attrs.define(eq=False)
class CuteExecutor:
    """A variant loaded on this process's GPU from its export.

    Attributes: kernel, key, launch (the TVM-FFI function), entry (the export's
    directory), cache_hit (the export was already there), primed (launched once
    during warmup).
    """

    kernel: str
    key: Any
    launch: Any
    entry: Path
    cache_hit: bool
    primed: bool = False

    def __call__(self, *args: Any) -> Any:
        return self.launch(*args)


@attrs.frozen
class CuteArtifact:
    """A variant compiled ahead of time and exported (no GPU needed): kernel, key, target, arch, entry, cache_hit."""

    kernel: str
    key: Any
    target: str
    arch: str
    entry: Path
    cache_hit: bool


class CuteDSLKernel(FunctionKernel[K]):
    """A warmkit kernel wrapper around one ``@cute.jit`` function (a ``warmkit.FunctionKernel``).

    Besides ``CompileKey`` and ``dispatch``, a subclass provides ``fn`` (or
    ``"module:attr"``) and ``compile_args(key) -> tuple`` (positional
    arguments of ``fn`` with :class:`FakeTensor` for tensors). ``prime``
    (default True): launch once on zero-filled scratch tensors during device
    warmup, so the module is loaded. ``run(key, *args)`` is one dict lookup
    and the loaded TVM-FFI function.
    """

    backend: ClassVar[str | None] = "cutedsl"
    fn_kind: ClassVar[str] = "@cute.jit function"
