"""Kernels whose module picks a constexpr from the environment at import, as real libraries do.

``PREC`` stands for flash-linear-attention's
``SOLVE_TRIL_DOT_PRECISION = tl.constexpr('tf32' if IS_TF32_SUPPORTED else 'ieee')``:
``PINNED_TEST_TF32=1`` plays the GPU host, unset the CPU build host.
"""

from __future__ import annotations

import os

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor

PREC = tl.constexpr("tf32" if os.environ.get("PINNED_TEST_TF32") == "1" else "ieee")
SCALE = tl.constexpr(2.0)


@triton.jit
def _scaled(x):
    return x * SCALE


@triton.jit
def dot_kernel(a, b, c, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    idx = offs[:, None] * BLOCK + offs[None, :]
    z = tl.dot(tl.load(a + idx), tl.load(b + idx), input_precision=PREC)
    tl.store(c + idx, _scaled(z))


class PinnedDot(TritonKernel):
    """c = SCALE * (a @ b), in the precision ``PREC`` the module picked at import."""

    fn = dot_kernel

    @attrs.frozen
    class CompileKey:
        block: int

    def dispatch(self, *, block: int = 16) -> CompileKey:
        return self.CompileKey(block)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor("float32", (key.block * key.block,))
        return (t, t, t), {"BLOCK": key.block}


# The configs depend on the host too, as flash-linear-attention's do on the visible GPU.
_CONFIGS = [triton.Config({}, num_warps=1)] + [
    triton.Config({}, num_warps=2 if os.environ.get("PINNED_TEST_TF32") == "1" else 4)
]


@triton.autotune(configs=_CONFIGS, key=["BLOCK"])
@triton.jit
def tuned_dot_kernel(a, b, c, BLOCK: tl.constexpr):
    """``dot_kernel`` autotuned, as most of flash-linear-attention's kernels are."""
    offs = tl.arange(0, BLOCK)
    idx = offs[:, None] * BLOCK + offs[None, :]
    z = tl.dot(tl.load(a + idx), tl.load(b + idx), input_precision=PREC)
    tl.store(c + idx, z)
