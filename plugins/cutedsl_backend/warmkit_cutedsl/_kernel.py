"""``CuteDSLKernel``, the kernel contract for CuTe DSL, and what the backend returns.

A subclass names its ``@cute.jit`` function (``fn``, or ``"module:attr"`` so
that importing the kernel class does not import CuTe) and says, per compile
key, with which arguments ``cute.compile`` builds the key's variant
(``compile_args``): :class:`FakeTensor` descriptors in place of tensors,
plain ints for scalars. At runtime ``run(key, *args)`` calls the loaded
export (a TVM-FFI function taking torch tensors) directly.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs

from warmkit import JitKernel, KernelDefinitionError

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


class CuteDSLKernel(JitKernel[K]):
    """A warmkit kernel wrapper around one ``@cute.jit`` function.

    Besides ``CompileKey`` and ``dispatch``, a subclass provides ``fn`` and
    ``compile_args(key) -> tuple`` (positional arguments of ``fn`` with
    :class:`FakeTensor` for tensors). ``prime`` (default True): launch once on
    zero-filled scratch tensors during device warmup, so the module is loaded.
    """

    backend: ClassVar[str | None] = "cutedsl"
    fn: ClassVar[Any]
    prime: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.dispatch_info() is None or cls.compile is not JitKernel.compile:
            return
        fn = getattr(cls, "fn", None)
        if fn is None:
            raise KernelDefinitionError(
                cls, "is a CuteDSLKernel without fn: set fn = <@cute.jit function>"
            )
        if isinstance(fn, str) and ":" not in fn:
            raise KernelDefinitionError(
                cls, f"fn {fn!r} must be a @cute.jit function or 'module:attr'"
            )
        if cls.compile_args is CuteDSLKernel.compile_args:
            raise KernelDefinitionError(cls, "must define compile_args(self, key) -> tuple")

    @classmethod
    def jit_function(cls) -> Any:
        """``fn``, imported if it was given as ``"module:attr"``.

        Raises:
            LookupError: the path does not resolve.
        """
        fn = cls.fn
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            try:
                obj: Any = importlib.import_module(module)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as exc:
                raise LookupError(
                    f"kernel {cls.name!r}: fn {fn!r} does not resolve ({exc})"
                ) from exc
            cls.fn = fn = obj
        return fn

    def compile_args(self, key: K) -> Sequence[Any]:
        """Positional arguments of ``fn`` for ``key``'s variant (``FakeTensor`` for tensors)."""
        raise NotImplementedError(f"{type(self).__qualname__} must define compile_args(self, key)")

    def run(self, key: K, *args: Any) -> Any:
        """Launch ``key``'s variant (one dict lookup, then the loaded TVM-FFI function).

        Raises:
            warmkit.RuntimeCompileError: not warmed up, monitor in ``"error"`` mode.
        """
        try:
            executor = self.executors[key]
        except KeyError:
            executor = self.get_or_compile(key)
        return executor.launch(*args)

    def __call__(self, *args: Any, **inputs: Any) -> Any:
        """Run ``dispatch(**inputs)``'s variant on ``args``."""
        return self.run(self.dispatch(**inputs), *args)
