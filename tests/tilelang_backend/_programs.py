"""Small raw ``@tilelang.jit`` programs for the hook tests (never wrapped by warmkit)."""

import tilelang
import tilelang.language as T


# An explicit target: this also runs (compiles) on a host without a GPU.
@tilelang.jit(out_idx=[-1], target={"kind": "cuda", "arch": "sm_90a"})
def scale(N: int, factor: float, block: int = 128, dtype: str = "float32"):
    @T.prim_func
    def scale_kernel(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * factor

    return scale_kernel
