"""Autotuned and heuristic Triton kernels and their TritonKernel wrappers (CPU tests, the interpreter, the GPU).

In a real file because Triton reads a kernel's source. Importing it under
``TRITON_INTERPRET=1`` gives interpreted kernels (the CPU end-to-end script).
"""

from __future__ import annotations

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor, _tuned

#: Four configs: two block sizes x two warp counts.
CONFIGS = [
    triton.Config({"BLOCK": 64}, num_warps=2),
    triton.Config({"BLOCK": 128}, num_warps=4),
    triton.Config({"BLOCK": 256}, num_warps=4),
    triton.Config({"BLOCK": 512}, num_warps=8),
]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tuned_scale_kernel(x, out, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * factor, mask=mask)


class TunedScale(TritonKernel):
    """out = x * factor; BLOCK and num_warps come from the autotuner, keyed on the exact n."""

    fn = tuned_scale_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        n: int  # exact: the autotune key is the exact value of n

    def dispatch(self, *, dtype: str = "float32", n: int = 4096) -> CompileKey:
        return self.CompileKey(dtype, n)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor(key.dtype, (key.n,))
        return (t, t, key.n, 2.0), {}

    def warmup_grid(self, key: CompileKey):
        return lambda meta: (triton.cdiv(key.n, meta["BLOCK"]),)

    def __call__(self, x, out, factor: float = 2.0):
        n = x.numel()
        key = self.dispatch(dtype=str(x.dtype).removeprefix("torch."), n=n)
        return self.run(key, lambda meta: (triton.cdiv(n, meta["BLOCK"]),), x, out, n, factor)


class DriftingScale(TunedScale):
    """Its key rounds n to a multiple of 1024: the warmup's autotune key drifts from the launch's."""

    def dispatch(self, *, dtype: str = "float32", n: int = 4096) -> TunedScale.CompileKey:
        return self.CompileKey(dtype, -(-n // 1024) * 1024)


@triton.heuristics(
    {
        "BLOCK": lambda a: triton.next_power_of_2(a["n"]),
        "EVEN": lambda a: a["n"] % a["BLOCK"] == 0,  # reads the heuristic above
    }
)
@triton.jit
def heur_copy_kernel(x, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out + offs, tl.load(x + offs))
    else:
        tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


class HeurCopy(TritonKernel):
    """out = x for n <= 4096 in one program; BLOCK and EVEN are heuristics of n."""

    fn = heur_copy_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        n: int

    def dispatch(self, *, dtype: str = "float32", n: int = 100) -> CompileKey:
        return self.CompileKey(dtype, n)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor(key.dtype, (key.n,))
        return (t, t, key.n), {}

    def launch_options(self, key: CompileKey):
        return {"num_warps": 4}

    def __call__(self, x, out):
        n = x.numel()
        key = self.dispatch(dtype=str(x.dtype).removeprefix("torch."), n=n)
        return self.run(key, (1,), x, out, n)


#: What the benchmark saw, for tests: the restore_value tensor and its contents at the first call.
SEEN: dict[str, object] = {}


def _capture(nargs) -> None:
    if "x" not in SEEN:
        SEEN["x"] = nargs["x"]
        SEEN["x0"] = nargs["x"].clone()
    SEEN["acc"] = nargs["acc"]
    SEEN["calls"] = int(SEEN.get("calls", 0)) + 1


def _drop_big(configs, named_args, **kwargs):
    """early_config_prune: blocks larger than the (warmup) tensor are pointless."""
    n = named_args["x"].numel()
    return [c for c in configs if c.kwargs["BLOCK"] <= max(64, triton.next_power_of_2(n))]


@triton.autotune(
    configs=[
        triton.Config(dict(c.kwargs), num_warps=c.num_warps, pre_hook=_capture) for c in CONFIGS
    ],
    key=["n"],
    reset_to_zero=["acc"],
    restore_value=["x"],
    prune_configs_by={"early_config_prune": _drop_big},
)
@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@triton.jit
def sum_inplace_kernel(x, acc, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        v = tl.load(x + offs)
        tl.store(x + offs, v * 3.0)  # clobbers x: restore_value must put it back between runs
    else:
        v = tl.load(x + offs, mask=offs < n, other=0.0)
        tl.store(x + offs, v * 3.0, mask=offs < n)
    tl.atomic_add(acc, tl.sum(v, axis=0))  # accumulates: reset_to_zero must zero it between runs


class SumInplace(TritonKernel):
    """acc = sum(x), x *= 3: autotune + heuristics + reset_to_zero + restore_value + pruning + pre_hook."""

    fn = sum_inplace_kernel

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n: int = 200) -> CompileKey:
        return self.CompileKey(n)

    def warmup_args(self, key: CompileKey):
        return (WarmupTensor("float32", (key.n,)), WarmupTensor("float32", (1,)), key.n), {}

    def warmup_grid(self, key: CompileKey):
        return lambda meta: (triton.cdiv(key.n, meta["BLOCK"]),)

    def __call__(self, x, acc):
        n = x.numel()
        return self.run(self.dispatch(n=n), lambda m: (triton.cdiv(n, m["BLOCK"]),), x, acc, n)


ALL = (TunedScale, DriftingScale, HeurCopy, SumInplace)


def forget_all() -> None:
    for cls in ALL:
        cls._warmkit_forget()


# A raw autotuned kernel (no TritonKernel wrapper), for recording its winner. The interpreter
# has no GPU driver for Triton's do_bench, so a CPU timer stands in.
@triton.autotune(configs=CONFIGS[:2], key=["n"], do_bench=_tuned._wall_clock_bench)
@triton.jit
def raw_tuned_add(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)
