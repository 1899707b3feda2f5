"""A "workload" that never imports warmkit: raw Triton compiles on a CPU host.

With no GPU, Triton cannot launch; it compiles through ``fn.warmup`` with a
minimal driver that reports sm_90, which fires the same ``jit_cache_hook`` a
real launch fires. Usage: ``python _record_child.py [variant ...]``; variants:
``aligned``, ``unaligned``, ``one``, ``fp16``, ``main`` (a kernel defined in
``__main__``), ``refuse`` (exit 3 if a compile raised).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _record_kernels as K
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver


class _Tensor:
    def __init__(self, dtype: str, aligned: bool = True) -> None:
        import torch

        self.dtype = getattr(torch, dtype)
        self._ptr = (1 << 40) + (0 if aligned else 4)

    def data_ptr(self) -> int:
        return self._ptr


class _Driver:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


@triton.jit
def main_kernel(x, n):
    tl.store(x, n)


def run(variant: str) -> None:
    f32 = _Tensor("float32")
    if variant == "aligned":
        K.axpy_kernel.warmup(f32, f32, f32, 64, 0.5, BLOCK=128, grid=(1,))
    elif variant == "unaligned":
        K.axpy_kernel.warmup(_Tensor("float32", False), f32, f32, 64, 0.5, BLOCK=128, grid=(1,))
    elif variant == "one":
        K.axpy_kernel.warmup(f32, f32, f32, 1, 0.5, BLOCK=128, grid=(1,))
    elif variant == "fp16":
        h = _Tensor("float16")
        K.axpy_kernel.warmup(h, h, h, 64, 0.5, BLOCK=128, grid=(1,))
    elif variant == "kinds":
        K.kinds_kernel.warmup(
            f32,
            8,
            True,
            None,
            (16, 2),
            "relu",
            tl.float16,
            -0.0,
            None,
            True,
            grid=(1,),
            num_warps=2,
        )
    elif variant == "tuned":  # an autotuned raw kernel: every config compiles
        K.tuned_copy_kernel.warmup(f32, f32, 64, grid=(1,))
    elif variant == "cuda":  # real launches on a GPU, varied shapes and dtypes
        import torch

        for dtype, n in ((torch.float32, 64), (torch.float16, 1000), (torch.float32, 1)):
            x = torch.randn(max(n, 16) + 4, device="cuda", dtype=dtype)
            out = torch.empty_like(x)
            K.axpy_kernel[(1,)](x, x, out, n, 0.5, BLOCK=128)
            K.axpy_kernel[(1,)](x[1:], x, out, n, 0.5, BLOCK=128, num_warps=2)  # unaligned view
        torch.cuda.synchronize()
    elif variant == "main":
        main_kernel.warmup(f32, 3, grid=(1,))
    else:
        raise SystemExit(f"unknown variant {variant!r}")


if __name__ == "__main__":
    if "cuda" not in sys.argv:
        driver.set_active(_Driver())
    refused = 0
    for v in sys.argv[1:]:
        if v == "refuse":
            continue
        try:
            run(v)
        except Exception as exc:  # noqa: BLE001 - the monitor in error mode refuses
            print(f"refused {v}: {type(exc).__name__}: {exc}", file=sys.stderr)
            refused += 1
    wk = sys.modules.get("warmkit")
    if wk is not None:  # imported by warmkit's startup hook, not by this script
        kinds = [e.kind for e in wk.monitor.events()]
        print("EVENTS " + ",".join(kinds), file=sys.stderr)
    # 3: refused as expected ("refuse"); 4: a compile failed that nobody expected to
    raise SystemExit((3 if "refuse" in sys.argv else 4) if refused else 0)
