"""The CuTe DSL program of :class:`warmkit_cutedsl.VectorAdd` (imports CuTe; loaded on first compile).

No ``from __future__ import annotations``: CuTe reads the annotations.
"""

from . import _cute_api as api

api.require_cute()

import cutlass
from cutlass import cute

__all__ = ["vector_add"]


@cute.kernel
def _add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    if i < n:
        gC[i] = gA[i] + gB[i]


@cute.jit
def vector_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, n: cutlass.Int32):
    """``C = A + B`` elementwise over ``n`` elements, 256 threads a block."""
    threads = 256
    _add_kernel(mA, mB, mC, n).launch(
        grid=((n + threads - 1) // threads, 1, 1), block=(threads, 1, 1)
    )
