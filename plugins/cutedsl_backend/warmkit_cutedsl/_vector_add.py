"""``VectorAdd``: a real CuTe DSL kernel (elementwise ``a + b``), registered as ``cutedsl.vector_add``."""

from __future__ import annotations

from typing import Any

import attrs

from ._kernel import CuteDSLKernel, FakeTensor

__all__ = ["VectorAdd"]

DTYPES = ("float16", "bfloat16", "float32")


class VectorAdd(CuteDSLKernel):
    """``out = a + b`` for 1-D CUDA tensors of ``n`` elements; one variant per (n, dtype)."""

    name = "cutedsl.vector_add"
    fn = "warmkit_cutedsl._vector_add_program:vector_add"

    @attrs.frozen
    class CompileKey:
        n: int
        dtype: str

    def dispatch(self, *, n: int, dtype: str = "float32") -> Any:
        if dtype not in DTYPES:
            raise ValueError(f"VectorAdd: dtype must be one of {DTYPES}, got {dtype!r}")
        if n < 1:
            raise ValueError(f"VectorAdd: n must be positive, got {n}")
        return self.CompileKey(n, dtype)

    def compile_args(self, key: Any) -> tuple[Any, ...]:
        t = FakeTensor(key.dtype, (key.n,))
        return (t, t, t, key.n)

    def __call__(self, a: Any, b: Any) -> Any:
        import torch

        out = torch.empty_like(a)
        key = self.dispatch(n=a.numel(), dtype=str(a.dtype).removeprefix("torch."))
        self.run(key, a, b, out, a.numel())
        return out
