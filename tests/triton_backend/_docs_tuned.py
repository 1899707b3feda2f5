"""The autotuned and heuristic kernels of docs/kernel-contract.md, verbatim (a test checks it).

They live in a real module so that a manifest names them and ``warmkit
coverage`` in another process imports them.
"""

from __future__ import annotations

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 4), (512, 4), (1024, 8))],
    key=["n"],
)
@triton.jit
def tuned_scale_kernel(x, out, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * factor, mask=mask)


class TunedScale(TritonKernel):
    fn = tuned_scale_kernel

    @attrs.frozen
    class CompileKey:
        n: int  # exact: the autotuner keys on the value of n

    def dispatch(self, *, n):
        return self.CompileKey(n)

    def warmup_args(self, key):  # no BLOCK, no num_warps: the configs set them
        t = WarmupTensor("float32", (key.n,))
        return (t, t, key.n, 2.0), {}

    def warmup_grid(self, key):  # the grid to benchmark the configs with
        return lambda meta: (triton.cdiv(key.n, meta["BLOCK"]),)

    def __call__(self, x, out, factor=2.0):
        n = x.numel()
        self.run(self.dispatch(n=n), lambda m: (triton.cdiv(n, m["BLOCK"]),), x, out, n, factor)


@triton.heuristics({"BLOCK": lambda a: triton.next_power_of_2(a["n"])})
@triton.jit
def heur_copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


class HeurCopy(TritonKernel):
    fn = heur_copy_kernel

    @attrs.frozen
    class CompileKey:
        n: int  # the heuristic reads n, so the key holds what it needs

    def dispatch(self, *, n):
        return self.CompileKey(n)

    def warmup_args(self, key):  # no BLOCK: the heuristic derives it from these arguments
        t = WarmupTensor("float32", (key.n,))
        return (t, t, key.n), {}

    def __call__(self, x, out):
        self.run(self.dispatch(n=x.numel()), (1,), x, out, x.numel())
