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

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs

from warmkit import FunctionKernel

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


class TileLangKernel(FunctionKernel[K]):
    """A warmkit kernel wrapper around one ``@tilelang.jit`` function (a ``warmkit.FunctionKernel``).

    A subclass provides, besides ``CompileKey`` and ``dispatch``:

    * ``fn``: the ``@tilelang.jit`` function, or ``"module:attr"`` naming it
      (imported on first compile, ``jit_function()``);
    * ``compile_args(key) -> (args, kwargs)``: the arguments of the ``fn``
      call that elaborates ``key``'s variant (plain values: sizes, block
      shapes, dtype names); the same every time for one key;
    * optionally ``prime_args(key)``: :class:`TensorSpec`\\ s of one launch's
      inputs, for kernels whose input shapes are not static; by default they
      are read from the compiled kernel's parameters.

    Device warmup compiles (or loads from TileLang's disk cache), fills
    ``fn``'s own in-process cache, so that raw ``fn(*args)`` calls hit too,
    and launches once on scratch inputs, so that the first real call loads
    nothing. ``run(key, *tensors)`` is one dict lookup and the launcher;
    ``__call__(*tensors, **inputs)`` runs ``dispatch(**inputs)``'s variant;
    subclasses usually override it to derive the inputs from the tensors.

    Class attributes:
        backend: ``"tilelang"``.
        fn: the ``@tilelang.jit`` function or its ``"module:attr"`` path.
        prime: launch once on scratch inputs during device warmup (default True).
    """

    backend: ClassVar[str | None] = "tilelang"
    fn_kind: ClassVar[str] = "@tilelang.jit function"
    fn_check = staticmethod(api.is_jit_function)

    def prime_args(self, key: K) -> Sequence[TensorSpec] | None:
        """Descriptors of one launch's inputs for the priming launch; None = from the compiled kernel."""
        return None
