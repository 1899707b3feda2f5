"""The synthetic workload of the startup benchmarks: a blocked matmul with a key space of 32 Triton keys.

    python benchmarks/synthetic_kernels.py [--out warmup.json] [--tiny]

writes the manifest (block_m x block_n x block_k x dtype x num_warps = 2 x 2 x
2 x 2 x 2 = 32 distinct Triton cache keys; ``--tiny``: 2 keys) and prints its
keys. Other scripts import :func:`write_manifest`. Each key is a real compile
of a ``tl.dot`` loop (~0.2-0.4 s on one core for sm_90), which is what makes
parallel cold warmup worth measuring.

The kernel is importable as ``synthetic_kernels:BlockedMatmul`` with
``benchmarks/`` on ``sys.path`` (manifests name it that way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep

import warmkit

#: The full key space: 32 keys.
SPACE = {
    "dtype": ["float16", "bfloat16"],
    "block_m": [64, 128],
    "block_n": [64, 128],
    "block_k": [32, 64],
    "num_warps": [4, 8],
}
#: ``--tiny``: two small keys.
TINY_SPACE = {
    "dtype": ["float16"],
    "block_m": [16],
    "block_n": [16],
    "block_k": [16],
    "num_warps": [1, 2],
}


@triton.jit
def blocked_matmul_kernel(
    a,
    b,
    c,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a_tile = tl.load(
            a + rm[:, None] * stride_am + kk[None, :] * stride_ak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b_tile = tl.load(
            b + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a_tile, b_tile, acc)
    tl.store(
        c + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


class BlockedMatmul(TritonKernel):
    """C = A @ B for row-major A (M x K), B (K x N), C (M x N); all dims multiples of 16.

    The key is the tiling, the dtype and the warps; the shapes are one
    specialization class (divisible by 16, unit inner strides).
    """

    fn = blocked_matmul_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        block_m: int
        block_n: int
        block_k: int
        num_warps: int

    def dispatch(self, *, dtype="float16", block_m=64, block_n=64, block_k=32, num_warps=4):
        return self.CompileKey(dtype, block_m, block_n, block_k, num_warps)

    def warmup_args(self, key):
        n = specialization_rep(1024)  # every size and outer stride: the divisible-by-16 class
        a = WarmupTensor(key.dtype, (n, n))
        b = WarmupTensor(key.dtype, (n, n))
        c = WarmupTensor(key.dtype, (n, n))
        args = (a, b, c, n, n, n, n, 1, n, 1, n, 1)
        return args, {"BLOCK_M": key.block_m, "BLOCK_N": key.block_n, "BLOCK_K": key.block_k}

    def launch_options(self, key):
        return {"num_warps": key.num_warps}


def registry(*, tiny: bool = False) -> warmkit.WarmupRegistry:
    reg = warmkit.WarmupRegistry()
    reg.add(BlockedMatmul, **(TINY_SPACE if tiny else SPACE))
    return reg


def write_manifest(path: str | Path, *, tiny: bool = False) -> Path:
    """Write the synthetic manifest (32 keys; 2 with ``tiny``) to ``path``; returns the path."""
    return registry(tiny=tiny).save(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="synthetic-warmup.json", help="the manifest to write")
    p.add_argument("--tiny", action="store_true", help="two keys instead of 32")
    args = p.parse_args()
    # Through the module, not __main__: the manifest must name synthetic_kernels:BlockedMatmul.
    from synthetic_kernels import registry as module_registry

    reg = module_registry(tiny=args.tiny)
    keys = reg.plan()
    path = reg.save(args.out)
    n = sum(len(v) for v in keys.values())
    for name, ks in keys.items():
        for k in ks:
            print(f"{name}: {k}")
    print(f"wrote {path}: {n} keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
