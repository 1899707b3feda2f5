"""A declared TritonKernel over ``_record_kernels.axpy_kernel``, for the coverage tests.

Kept apart from ``_record_kernels`` so that the recorded workload never imports warmkit.
"""

from __future__ import annotations

import attrs
from _record_kernels import axpy_kernel
from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep


class Axpy(TritonKernel):
    """out = alpha * x + y; the space declares dtypes and n, always aligned tensors."""

    fn = axpy_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        n: int
        block: int

    def dispatch(self, *, dtype: str = "float32", n: int = 64, block: int = 128) -> CompileKey:
        return self.CompileKey(dtype, specialization_rep(n), block)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor(key.dtype, (max(key.n, 1),))
        return (t, t, t, key.n, 0.5), {"BLOCK": key.block}
