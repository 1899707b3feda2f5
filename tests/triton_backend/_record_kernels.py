"""Raw ``@triton.jit`` kernels (no warmkit wrapper) for the record/replay tests.

They live in a real module so that their import path resolves in another process.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = alpha * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)
    tl.store(out + offs, v, mask=mask)


@triton.jit
def kinds_kernel(
    out,
    n,
    flag,
    maybe,
    SHAPE: tl.constexpr,
    MODE: tl.constexpr,
    DTYPE: tl.constexpr,
    SCALE: tl.constexpr,
    EMPTY: tl.constexpr,
    ON: tl.constexpr,
):
    v = tl.zeros((16,), dtype=DTYPE) + SCALE
    if SHAPE[1] == 2:
        v = v * 2
    if MODE == "relu":
        v = tl.maximum(v, 0.0)
    if ON:
        v = v + 1
    offs = tl.arange(0, 16)
    tl.store(out + offs, v.to(tl.float32), mask=offs < n)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
    key=["n"],
)
@triton.jit
def tuned_copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)
