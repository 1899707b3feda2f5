"""``TileLangKernel``, the kernel contract for TileLang, and what the backend returns.

A subclass names its ``@tilelang.jit`` function (``fn``, the function or a
``"module:attr"`` path to it, so that importing the kernel class does not
import TileLang) and says, per compile key, with which arguments that
function elaborates the key's variant (``compile_args``). warmkit compiles
every key before serving; at runtime ``run(key, *tensors)`` calls the compiled
kernel's launcher directly.

Example::

    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M, block_N, block_K, dtype="float16"):
        @T.prim_func
        def gemm(A: T.Tensor((M, K), dtype), ...): ...
        return gemm

    class Gemm(TileLangKernel):
        fn = matmul

        @attrs.frozen
        class CompileKey:
            m: int
            n: int
            k: int

        def dispatch(self, *, m, n, k):
            return self.CompileKey(m, n, k)

        def compile_args(self, key):
            return (key.m, key.n, key.k, 128, 128, 32), {}

        def __call__(self, a, b):
            return self.run(self.dispatch(m=a.shape[0], n=b.shape[1], k=a.shape[1]), a, b)
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs

from warmkit import JitKernel, KernelDefinitionError

from . import _tilelang_api as api

__all__ = ["TensorSpec", "TileLangArtifact", "TileLangExecutor", "TileLangKernel"]

logger = logging.getLogger(__name__)

K = TypeVar("K")


@attrs.frozen
class TensorSpec:
    """A tensor described by dtype and shape, without storage: an input of the priming launch.

    Attributes:
        dtype: a torch dtype name, e.g. ``"float16"``.
        shape: the sizes.
    """

    dtype: str
    shape: tuple[int, ...]


@attrs.define(eq=False)
class TileLangExecutor:
    """A compiled, loaded TileLang variant on this process's GPU (what device warmup returns).

    Attributes:
        kernel: the kernel's name.
        key: its compile key.
        jit_kernel: TileLang's ``JITKernel``.
        launch: the launcher (``JITKernel.torch_function``): called with the
            kernel's input tensors, it returns the outputs (``out_idx``).
        target: the TileLang target it was compiled for (``{"kind": "cuda", "arch": "sm_90a"}``).
        cache_key: TileLang's disk-cache key, None with the cache disabled.
        cache_hit: True when it was loaded from TileLang's disk cache.
        primed: True when a launch during warmup loaded the module on the device.
    """

    kernel: str
    key: Any
    jit_kernel: Any
    launch: Any
    target: Mapping[str, str]
    cache_key: str | None
    cache_hit: bool
    primed: bool = False

    def __call__(self, *args: Any) -> Any:
        return self.launch(*args)


@attrs.frozen
class TileLangArtifact:
    """A variant compiled ahead of time into TileLang's disk cache (no GPU needed).

    Attributes:
        kernel: the kernel's name.
        key: its compile key.
        target: the warmkit target, e.g. ``"cuda:90"``.
        arch: TileLang's arch for it, e.g. ``"sm_90a"``.
        cache_key: TileLang's disk-cache key: the entry the device runtime looks up.
        entry: the entry's directory.
        cache_hit: True when the entry was already there.
    """

    kernel: str
    key: Any
    target: str
    arch: str
    cache_key: str
    entry: Path
    cache_hit: bool


class TileLangKernel(JitKernel[K]):
    """A warmkit kernel wrapper around one ``@tilelang.jit`` function.

    A subclass provides, besides ``CompileKey`` and ``dispatch``:

    * ``fn``: the ``@tilelang.jit`` function, or ``"module:attr"`` naming it
      (imported on first compile);
    * ``compile_args(key) -> (args, kwargs)``: the arguments of the ``fn``
      call that elaborates ``key``'s variant (plain values: sizes, block
      shapes, dtype names);
    * optionally ``prime_args(key)``: :class:`TensorSpec`\\ s of one launch's
      inputs, for kernels whose input shapes are not static; by default they
      are read from the compiled kernel's parameters.

    Device warmup compiles (or loads from TileLang's disk cache), fills
    ``fn``'s own in-process cache, so that raw ``fn(*args)`` calls hit too,
    and launches once on scratch inputs, so that the first real call loads
    nothing. ``__call__(*tensors, **inputs)`` runs ``dispatch(**inputs)``'s
    variant; subclasses usually override it to derive the inputs from the
    tensors.

    Class attributes:
        backend: ``"tilelang"``.
        fn: the ``@tilelang.jit`` function or its ``"module:attr"`` path.
        prime: launch once on scratch inputs during device warmup (default True).
    """

    backend: ClassVar[str | None] = "tilelang"
    fn: ClassVar[Any]
    prime: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.dispatch_info() is None or cls.compile is not JitKernel.compile:
            return
        fn = getattr(cls, "fn", None)
        if fn is None:
            raise KernelDefinitionError(
                cls, "is a TileLangKernel without fn: set fn = <your @tilelang.jit function>"
            )
        if isinstance(fn, str):
            if ":" not in fn:
                raise KernelDefinitionError(
                    cls, f"fn {fn!r} must be a @tilelang.jit function or a 'module:attr' path"
                )
        elif not api.is_jit_function(fn):
            raise KernelDefinitionError(
                cls, f"fn must be a @tilelang.jit function, got {type(fn).__name__} {fn!r}"
            )
        if cls.compile_args is TileLangKernel.compile_args:
            raise KernelDefinitionError(
                cls, "must define compile_args(self, key) -> (args, kwargs)"
            )

    @classmethod
    def jit_function(cls) -> Any:
        """``fn``, imported if it was given as ``"module:attr"``.

        Raises:
            LookupError: the path does not resolve; TypeError: it is not a ``@tilelang.jit`` function.
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
            if not api.is_jit_function(obj):
                raise TypeError(f"kernel {cls.name!r}: fn {fn!r} is not a @tilelang.jit function")
            cls.fn = fn = obj
        return fn

    def compile_args(self, key: K) -> tuple[Sequence[Any], Mapping[str, Any]]:
        """The arguments of the ``fn`` call that elaborates ``key``'s variant.

        Returns:
            ``(args, kwargs)`` for ``fn``; the same every time for one key.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must define compile_args(self, key)")

    def prime_args(self, key: K) -> Sequence[TensorSpec] | None:
        """Descriptors of one launch's inputs for the priming launch; None = from the compiled kernel."""
        return None

    def run(self, key: K, *args: Any) -> Any:
        """Launch ``key``'s variant on ``args`` and return its outputs.

        After warmup this is one dict lookup and the kernel's launcher.

        Raises:
            warmkit.RuntimeCompileError: the key was not warmed up and the
                monitor is in ``"error"`` mode.
        """
        try:  # the hot path: no call into get_or_compile
            executor = self.executors[key]
        except (KeyError, AttributeError):
            executor = self.get_or_compile(key)
        return executor.launch(*args)

    def __call__(self, *args: Any, **inputs: Any) -> Any:
        """Run ``dispatch(**inputs)``'s variant on the tensors ``args``."""
        return self.run(self.dispatch(**inputs), *args)
