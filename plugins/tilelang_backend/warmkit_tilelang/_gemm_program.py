"""The TileLang program of :class:`warmkit_tilelang.TiledGemm` (imports TileLang; loaded on first compile).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""

import tilelang
import tilelang.language as T

__all__ = ["tiled_gemm"]


@tilelang.jit(out_idx=[-1])
def tiled_gemm(
    M: int,
    N: int,
    K: int,
    block_M: int,
    block_N: int,
    block_K: int,
    num_stages: int,
    threads: int,
    dtype: str = "float16",
    accum_dtype: str = "float32",
):
    """``C = A @ B`` for ``A: (M, K)``, ``B: (K, N)``, tiled over ``(block_M, block_N)``, fp32 accumulation."""

    @T.prim_func
    def gemm(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[ko * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm
