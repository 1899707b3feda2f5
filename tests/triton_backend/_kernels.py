"""Small Triton kernels and TritonKernel wrappers shared by the backend's tests.

They live in a real file because Triton reads a kernel's source (and its
starting line number, which is part of the cache hash).
"""

from __future__ import annotations

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def scale_rows_kernel(x, out, n_cols, stride_xm, stride_om, scale, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    v = tl.load(x + row * stride_xm + cols, mask=mask)
    tl.store(out + row * stride_om + cols, v * scale, mask=mask)


@triton.jit(do_not_specialize=["b"], do_not_specialize_on_alignment=["c"])
def flags_kernel(out, a, b, c):
    tl.store(out, a + b + c)


class Add(TritonKernel):
    """out = x + y over n elements."""

    fn = add_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        n: int
        block: int

    def dispatch(self, *, dtype: str = "float32", n: int = 1024, block: int = 128) -> CompileKey:
        return self.CompileKey(dtype, specialization_rep(n), block)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor(key.dtype, (max(key.n, 1),))
        return (t, t, t, key.n), {"BLOCK": key.block}

    def launch_options(self, key: CompileKey):
        return {"num_warps": 4}

    def __call__(self, x, y, out):
        n = x.numel()
        dtype = str(x.dtype).removeprefix("torch.")
        key = self.dispatch(dtype=dtype, n=n)
        return self.run(key, (triton.cdiv(n, key.block),), x, y, out, n, BLOCK=key.block)


class ScaleRows(TritonKernel):
    """out[r, :] = x[r, :] * scale; the wrapper reads shapes and strides."""

    fn = scale_rows_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        n_cols: int
        stride: int
        block_n: int

    def dispatch(self, *, dtype: str = "float16", n_cols: int = 64, stride: int = 64) -> CompileKey:
        return self.CompileKey(
            dtype,
            specialization_rep(n_cols),
            specialization_rep(stride),
            triton.next_power_of_2(n_cols),
        )

    def warmup_args(self, key: CompileKey):
        x = WarmupTensor(key.dtype, (4, key.n_cols), strides=(key.stride, 1))
        out = WarmupTensor(key.dtype, (4, key.n_cols), strides=(key.stride, 1))
        return self._args(x, out, 2.0), {"BLOCK_N": key.block_n}

    @staticmethod
    def _args(x, out, scale):
        # the wrapper's own argument code reads the descriptor API
        assert x.ndim == 2 and x.dim() == 2 and x.size(1) == x.shape[1]
        assert x.numel() == x.shape[0] * x.shape[1] and x.element_size() in (2, 4)
        assert x.device.type == "cuda" or str(x.device).startswith("cpu")
        assert x.is_contiguous() == (x.stride(0) == x.shape[1])
        return (x, out, x.shape[1], x.stride(0), out.stride(0), scale)

    def __call__(self, x, out, scale):
        key = self.dispatch(
            dtype=str(x.dtype).removeprefix("torch."), n_cols=x.shape[1], stride=x.stride(0)
        )
        n_cols, stride = x.shape[1], x.stride(0)
        return self.run(
            key, (x.shape[0],), x, out, n_cols, stride, out.stride(0), scale, BLOCK_N=key.block_n
        )


ALL = (Add, ScaleRows)


def forget_all() -> None:
    for cls in ALL:
        cls.clear_executors()


@triton.jit
def raw_mul_kernel(x, out, n, factor, BLOCK: tl.constexpr):
    """A raw kernel that warmkit never wraps: only the runtime hooks see it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * factor, mask=mask)


class WorkerAdd(Add):
    """Add, for the compile-worker tests: records which process built the launch, and the
    key with ``block=13 * 16`` kills a worker process (never the parent)."""

    name = "tests.WorkerAdd"
    #: where warmup_args appends "<pid>" (set through the environment, so workers see it)
    PIDS_ENV = "TEST_WORKER_PIDS_FILE"

    def warmup_args(self, key):
        import multiprocessing
        import os

        path = os.environ.get(self.PIDS_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
        if key.block == 13 * 16 and multiprocessing.parent_process() is not None:
            os._exit(9)  # a crash inside the compiler, in a worker
        return super().warmup_args(key)
