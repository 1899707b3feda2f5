"""GPU measurements run by test_gpu.py, each in a fresh process (fresh in-memory caches).

Usage: python _gpu_child.py MODE [TARGET]; prints one JSON object on the last line.

Modes:
  latency-device [R]    warmkit device warmup, then first vs steady latency of TritonKernel calls
                        (variants in an order rotated by R)
  latency-device-raw    warmkit device warmup, then the same for bare fn[grid] launches
  latency-compile-only  Triton's compile-only fn.warmup (the vLLM way), then bare fn[grid] launches
  aot-fill              (CUDA hidden) ahead-of-time warmup for TARGET into TRITON_CACHE_DIR
  aot-use               (GPU visible) raw launches of the same variants with the monitor armed
  bundle-build T OUT    (CUDA hidden) build a bundle of the same variants for target T at OUT
  bundle-install PATH   (GPU visible) install it into TRITON_CACHE_DIR (launchers built there)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import triton

import warmkit
from triton_backend._kernels import Add, ScaleRows, add_kernel, scale_rows_kernel
from warmkit import monitor

ADD_SIZES = [4096, 4100, 1 << 16]  # i32 div16, i32, i32 div16 with another grid
ROW_COLS = [64, 100]
STEADY_ITERS = 200


def registry() -> warmkit.WarmupRegistry:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(dtype="float32", n=ADD_SIZES)
        for c in ROW_COLS:
            ScaleRows().register_warmup(dtype="float16", n_cols=c, stride=c)
    return reg


def add_tensors(n):
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    return x, y, torch.empty_like(x)


def row_tensors(c):
    x = torch.randn((8, c), device="cuda", dtype=torch.float16)
    return x, torch.empty_like(x)


def launches(raw: bool):
    """(name, callable) per variant; each callable launches once."""
    out = []
    for n in ADD_SIZES:
        x, y, o = add_tensors(n)
        if raw:
            grid = (triton.cdiv(n, 128),)
            out.append(
                (
                    f"add n={n}",
                    lambda x=x, y=y, o=o, n=n, g=grid: add_kernel[g](
                        x, y, o, n, BLOCK=128, num_warps=4
                    ),
                )
            )
        else:
            out.append((f"add n={n}", lambda x=x, y=y, o=o: Add()(x, y, o)))
    for c in ROW_COLS:
        x, o = row_tensors(c)
        block = triton.next_power_of_2(c)
        if raw:
            out.append(
                (
                    f"rows c={c}",
                    lambda x=x, o=o, c=c, b=block: scale_rows_kernel[(8,)](
                        x, o, c, c, c, 2.0, BLOCK_N=b
                    ),
                )
            )
        else:
            out.append((f"rows c={c}", lambda x=x, o=o: ScaleRows()(x, o, 2.0)))
    return out


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6


def measure(raw: bool, rotate: int = 0) -> list[dict]:
    calls = launches(raw)
    rotate %= len(calls)
    calls = calls[rotate:] + calls[:rotate]
    torch.cuda.synchronize()
    results = []
    for name, fn in calls:
        first = timed(fn)
        steady = statistics.median(timed(fn) for _ in range(STEADY_ITERS))
        results.append(
            {
                "variant": name,
                "first_us": round(first, 1),
                "steady_us": round(steady, 1),
                "ratio": round(first / steady, 2),
            }
        )
    return results


class Counter:
    """Counts every Triton hook event: in-memory misses, compiles/disk hits, module loads."""

    def __init__(self):
        from triton import knobs

        self.events = []
        prev_hook, prev_listener = knobs.runtime.jit_cache_hook, knobs.compilation.listener

        def hook(**kw):
            self.events.append("jit_cache_hook")
            return prev_hook(**kw) if prev_hook else None

        def listener(**kw):
            self.events.append("listener")
            if prev_listener:
                prev_listener(**kw)

        def load(*args):
            self.events.append("kernel_load")

        knobs.runtime.jit_cache_hook = hook
        knobs.compilation.listener = listener
        knobs.runtime.kernel_load_start_hook.add(load)


def main() -> None:
    mode = sys.argv[1]
    result: dict = {"mode": mode, "triton": triton.__version__, "torch": torch.__version__}
    if mode in ("latency-device", "latency-device-raw"):
        t0 = time.perf_counter()
        report = warmkit.warmup(
            warmkit.WarmupConfig(progress="off", monitor="error"), registry=registry()
        )
        result["warmup_s"] = round(time.perf_counter() - t0, 3)
        result["statuses"] = sorted(e.status for e in report.entries)
        result["executors"] = sorted(
            {
                f"{ex.launch_path} primed={ex.primed}"
                for cls in (Add, ScaleRows)
                for ex in cls.executors.values()
            }
        )
        counter = Counter()
        rotate = int(sys.argv[2]) if len(sys.argv) > 2 else 0
        result["latency"] = measure(raw=mode.endswith("raw"), rotate=rotate)
        # the fast launch path computes the right thing
        checks = []
        for n in ADD_SIZES:
            x, y, o = add_tensors(n)
            Add()(x, y, o)
            checks.append(bool(torch.allclose(o, x + y)))
        for c in ROW_COLS:
            x, o = row_tensors(c)
            ScaleRows()(x, o, 0.5)
            checks.append(bool(torch.allclose(o, x * 0.5)))
        torch.cuda.synchronize()
        result["correct"] = checks
        result["hook_events"] = counter.events
        result["monitor_events"] = [(e.kernel, e.kind) for e in monitor.events()]
    elif mode == "latency-compile-only":
        t0 = time.perf_counter()
        for n in ADD_SIZES:
            x, y, o = add_tensors(n)
            add_kernel.warmup(x, y, o, n, BLOCK=128, num_warps=4, grid=(1,))
        for c in ROW_COLS:
            x, o = row_tensors(c)
            scale_rows_kernel.warmup(
                x, o, c, c, c, 2.0, BLOCK_N=triton.next_power_of_2(c), grid=(1,)
            )
        result["warmup_s"] = round(time.perf_counter() - t0, 3)
        result["latency"] = measure(raw=True)
    elif mode == "aot-fill":
        assert not torch.cuda.is_available(), "aot-fill must run with CUDA hidden"
        report = warmkit.warmup(
            warmkit.WarmupConfig(target=sys.argv[2], progress="off", monitor="off", jobs=2),
            registry=registry(),
        )
        result["statuses"] = sorted(e.status for e in report.entries)
        import warmkit_triton

        result["check"] = warmkit_triton.check_aot_cache()
    elif mode == "aot-use":
        assert torch.cuda.is_available()
        from warmkit._plugin.discovery import get_backend

        get_backend("triton")
        monitor.arm("warn")
        import warmkit_triton

        result["check"] = warmkit_triton.check_aot_cache()
        result["device_target"] = get_backend("triton").default_target()
        for name, fn in launches(raw=True):
            fn()
        torch.cuda.synchronize()
        result["monitor_events"] = [(e.kernel, e.kind, e.key) for e in monitor.events()]
        # results are right
        x, y, o = add_tensors(4096)
        add_kernel[(32,)](x, y, o, 4096, BLOCK=128, num_warps=4)
        result["correct"] = bool(torch.allclose(o, x + y))
    elif mode == "bundle-build":
        assert not torch.cuda.is_available(), "bundle-build must run with CUDA hidden"
        info = warmkit.build_bundle(registry(), sys.argv[3], target=sys.argv[2], progress="off")
        result["built"] = str(info)
    elif mode == "bundle-install":
        assert torch.cuda.is_available()
        res = warmkit.install_bundle(sys.argv[2])
        result["installed"] = len(res.installed)
        result["prepared"] = res.prepared
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
