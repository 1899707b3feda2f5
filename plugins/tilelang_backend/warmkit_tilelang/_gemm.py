"""``TiledGemm``: a real TileLang kernel (tiled fp16 GEMM, fp32 accumulation) on the warmkit contract.

Registered as ``tilelang.gemm`` in ``warmkit.kernels``. The tile shape is a
function of the problem shape (``dispatch``), so warmup and runtime pick the
same variant.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._kernel import TileLangKernel

__all__ = ["TiledGemm"]

DTYPES = ("float16", "bfloat16")


class TiledGemm(TileLangKernel):
    """``C = A @ B`` with ``A: (m, k)``, ``B: (k, n)``, fp16 or bf16; returns a new ``C``.

    Register the shapes an engine will run, e.g.
    ``TiledGemm().register_warmup(m=[64, 128], n=4096, k=4096)``.
    """

    name = "tilelang.gemm"
    fn = "warmkit_tilelang._gemm_program:tiled_gemm"

    @attrs.frozen
    class CompileKey:
        m: int
        n: int
        k: int
        dtype: str
        block_m: int
        block_n: int
        block_k: int
        num_stages: int

    def dispatch(self, *, m: int, n: int, k: int, dtype: str = "float16") -> Any:
        if dtype not in DTYPES:
            raise ValueError(f"TiledGemm: dtype must be one of {DTYPES}, got {dtype!r}")
        if min(m, n, k) < 1:
            raise ValueError(f"TiledGemm: sizes must be positive, got m={m}, n={n}, k={k}")
        # Small m (decode): a short tile in m; otherwise the 128x128 Hopper tile.
        block_m = 64 if m <= 64 else 128
        return self.CompileKey(m, n, k, dtype, block_m, 128, 32, 3)

    def compile_args(self, key: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = (key.m, key.n, key.k, key.block_m, key.block_n, key.block_k, key.num_stages, 128)
        return args, {"dtype": key.dtype}

    def __call__(self, a: Any, b: Any) -> Any:
        """``a @ b`` for CUDA tensors ``a: (m, k)`` and ``b: (k, n)`` of one dtype."""
        m, k = a.shape
        n = b.shape[1]
        key = self.dispatch(m=m, n=n, k=k, dtype=str(a.dtype).removeprefix("torch."))
        return self.run(key, a, b)
