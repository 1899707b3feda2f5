"""Per-call CPU overhead of three ways to launch one small Triton kernel, in one process.

(a) a warmed ``warmkit_triton.TritonKernel`` call (``dispatch`` + ``run``: the
    cached compiled kernel's launcher, called directly);
(b) a bare ``fn[grid](...)`` launch;
(c) a "dispatch + dict lookup + ``fn[grid]``" wrapper, the way vLLM wraps kernels;
(d) a warmed ``TritonKernel`` whose ``__call__`` reads ``x.dtype`` and ``x.numel()``
    and passes the ``torch.dtype`` to ``dispatch``;
and, for information, (a') ``TritonKernel.run(key, ...)`` with the key already computed.
It also times, on the CPU alone, ``dispatch`` with and without its memo and
the executor lookup (``warmkit._kernel.memo``), the part of (a) that is warmkit's.

Each run times ``--iters`` back-to-back launches (no synchronisation between
them; one at the end), so the number is the CPU cost per launch. The table
shows the median over ``--runs`` runs (>= 5) and the ratios to (b); ``--out``
writes the same as JSON.

Usage::

    python benchmarks/launch_overhead.py --out launch.json          # on a GPU
    python benchmarks/launch_overhead.py --tiny --out smoke.json     # smoke test, GPU or not

Without a GPU the full benchmark exits with a message (status 2). ``--tiny``
runs a few iterations; without a GPU it re-executes itself under
``TRITON_INTERPRET=1``, so the numbers are meaningless but every code path of
the script (warmup, the three launch paths, the table, the JSON) runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import attrs


def _cdiv(n: int, d: int) -> int:
    # Not triton.cdiv: on Triton 3.6 it is a constexpr_function that costs ~2.5 us per call
    # on the H200 host (the "CPU only" table times it), which is the wrapper's cost, not warmkit's.
    return -(-n // d)


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the results as JSON to this path")
    p.add_argument(
        "--runs", type=int, default=7, help="timed runs per launch path (>= 5; default 7)"
    )
    p.add_argument("--iters", type=int, default=5000, help="launches per run (default 5000)")
    p.add_argument("--n", type=int, default=4096, help="elements of the vector add (default 4096)")
    p.add_argument("--tiny", action="store_true", help="a quick smoke run (works without a GPU)")
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5 (the table reports medians)")
    return args


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def main() -> int:
    args = _parse()
    if args.tiny:
        args.iters = min(args.iters, 20)
        if not _gpu_available() and os.environ.get("TRITON_INTERPRET") != "1":
            env = dict(os.environ, TRITON_INTERPRET="1")
            os.execve(sys.executable, [sys.executable, *sys.argv], env)
    elif not _gpu_available():
        print(
            "launch_overhead.py: no CUDA GPU is visible; this benchmark measures GPU launch overhead.\n"
            "Run it on a GPU machine, or pass --tiny for a smoke run of the script itself.",
            file=sys.stderr,
        )
        return 2
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    import torch
    import triton
    import triton.language as tl
    from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep

    import warmkit

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    device = "cpu" if interpreted else "cuda"

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    class Add(TritonKernel):
        fn = add_kernel
        name = "benchmarks.launch_overhead.Add"

        @attrs.frozen
        class CompileKey:
            n: int
            block: int

        def dispatch(self, *, n: int, block: int = 1024) -> Any:
            return self.CompileKey(specialization_rep(n), block)

        def warmup_args(self, key: Any) -> Any:
            t = WarmupTensor(torch.float32, (max(key.n, 1),))
            return (t, t, t, key.n), {"BLOCK": key.block}

        def __call__(self, x: Any, y: Any, out: Any) -> None:
            n = x.numel()
            key = self.dispatch(n=n)
            self.run(key, (_cdiv(n, key.block),), x, y, out, n, BLOCK=key.block)

    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}

    class AddTyped(TritonKernel):
        """(d): the key's dtype comes from the tensor, as most engine kernels do it."""

        fn = add_kernel
        name = "benchmarks.launch_overhead.AddTyped"

        @attrs.frozen
        class CompileKey:
            dtype: str
            n: int
            block: int

        def dispatch(self, *, dtype: Any, n: int, block: int = 1024) -> Any:
            name = dtype if isinstance(dtype, str) else names[dtype]  # plain at warmup
            return self.CompileKey(name, specialization_rep(n), block)

        def warmup_args(self, key: Any) -> Any:
            t = WarmupTensor(key.dtype, (max(key.n, 1),))
            return (t, t, t, key.n), {"BLOCK": key.block}

        def __call__(self, x: Any, y: Any, out: Any) -> None:
            n = x.numel()
            key = self.dispatch(dtype=x.dtype, n=n)
            self.run(key, (_cdiv(n, key.block),), x, y, out, n, BLOCK=key.block)

    # (c): the vLLM-style wrapper: dispatch to a key, look up the launch config, fn[grid]
    configs: dict[tuple[int, int], dict[str, int]] = {}

    def vllm_style(x: Any, y: Any, out: Any) -> None:
        n = x.numel()
        key = (specialization_rep(n), 1024)
        cfg = configs[key]
        add_kernel[(_cdiv(n, cfg["BLOCK"]),)](x, y, out, n, **cfg)

    n = args.n
    x = torch.randn(n, device=device)
    y = torch.randn(n, device=device)
    out = torch.empty_like(x)
    kernel = Add()
    typed = AddTyped()
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        kernel.register_warmup(n=n)
        typed.register_warmup(dtype="float32", n=n)  # registrations hold plain data
    report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="warn"), registry=reg)
    configs[(specialization_rep(n), 1024)] = {"BLOCK": 1024}
    grid = (_cdiv(n, 1024),)

    def sync() -> None:
        if not interpreted:
            torch.cuda.synchronize()

    key = kernel.dispatch(n=n)
    paths = {
        "a_tritonkernel": lambda: kernel(x, y, out),
        "a2_tritonkernel_run_precomputed_key": lambda: kernel.run(
            key, grid, x, y, out, n, BLOCK=1024
        ),
        "b_bare_fn_grid": lambda: add_kernel[grid](x, y, out, n, BLOCK=1024),
        "c_dispatch_dict_fn_grid": lambda: vllm_style(x, y, out),
        "d_tritonkernel_dtype_numel": lambda: typed(x, y, out),
    }
    # correctness and warm-up of every path (first calls are not timed)
    for fn in paths.values():
        out.zero_()
        fn()
        sync()
        assert torch.allclose(out, x + y), "wrong result"
    executor = kernel.get_or_compile(kernel.dispatch(n=n))
    samples: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(args.runs):
        for name, fn in paths.items():  # interleaved, so drift affects all paths alike
            sync()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                fn()
            t1 = time.perf_counter()
            sync()
            samples[name].append((t1 - t0) / args.iters * 1e6)
    med = {k: statistics.median(v) for k, v in samples.items()}
    cpu = _dispatch_cost(kernel, typed, x, n, args)
    cpu.update(_executor_pieces(executor, x, y, out, n, grid, args))
    base = med["b_bare_fn_grid"]
    ratios = {k: v / base for k, v in med.items()}

    gpu = "interpreter (CPU)" if interpreted else torch.cuda.get_device_name()
    print(
        f"Triton {triton.__version__}, torch {torch.__version__}, Python {platform.python_version()}, {gpu}"
    )
    print(f"vector add of {n} fp32, grid {grid}, {args.iters} launches x {args.runs} runs (median)")
    print(f"executor: {executor!r}; warmup: {report.entries[0].status}")
    print()
    print(f"{'launch path':<42} {'us/call':>9} {'vs bare':>8}")
    labels = {
        "a_tritonkernel": "(a) warmed TritonKernel call",
        "a2_tritonkernel_run_precomputed_key": "(a') kernel.run(key, ...), key precomputed",
        "b_bare_fn_grid": "(b) bare fn[grid](...)",
        "c_dispatch_dict_fn_grid": "(c) dispatch + dict lookup + fn[grid]",
        "d_tritonkernel_dtype_numel": "(d) warmed call reading x.dtype, x.numel()",
    }
    for k, label in labels.items():
        print(f"{label:<42} {med[k]:>9.2f} {ratios[k]:>7.2f}x")
    print()
    print(f"{'CPU only: warmkit on the hot path':<42} {'us/call':>9}")
    for k, v in cpu.items():
        print(f"  {k:<40} {v:>9.3f}")
    if args.tiny:
        print("\n(--tiny: a smoke run; these numbers are not a measurement)")
    result = {
        "triton": triton.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": gpu,
        "tiny": bool(args.tiny),
        "n": n,
        "iters": args.iters,
        "runs": args.runs,
        "fast_launch": bool(getattr(executor, "fast", False)),
        "us_per_call_median": med,
        "us_per_call_runs": samples,
        "ratio_to_bare": ratios,
        "cpu_us_per_call": cpu,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"\nwrote {args.out}")
    return 0


def _dispatch_cost(kernel: Any, typed: Any, x: Any, n: int, args: argparse.Namespace) -> dict:
    """Median us per call of dispatch (memoized and not) and of the executor lookup, no launch."""
    from warmkit._kernel import memo as _memo

    raw, raw_typed = _memo.raw_dispatch(type(kernel)), _memo.raw_dispatch(type(typed))
    key = kernel.dispatch(n=n)
    lookup, executors = type(kernel).launch_lookup, type(kernel).executors

    def lookup_by_id() -> None:
        seen = lookup(id(key))
        assert seen is not None and seen[0] is key

    cases = {
        "dispatch(n=), memoized": lambda: kernel.dispatch(n=n),
        "dispatch(n=), unmemoized": lambda: raw(kernel, n=n),
        "dispatch(dtype=x.dtype, n=x.numel()), memoized": lambda: typed.dispatch(
            dtype=x.dtype, n=x.numel()
        ),
        "dispatch(dtype=x.dtype, n=x.numel()), unmemoized": lambda: raw_typed(
            typed, dtype=x.dtype, n=x.numel()
        ),
        "executor lookup by key identity": lookup_by_id,
        "executor lookup by key hash": lambda: executors[key],
    }
    return _time_each(cases, args)


def _executor_pieces(
    executor: Any, x: Any, y: Any, out: Any, n: int, grid: Any, args: argparse.Namespace
) -> dict:
    """Median us per call of each piece of the executor's launch path (the C launch included)."""
    import triton

    if not getattr(executor, "fast", False):
        return {}
    device = executor._get_device()
    stream = executor._get_stream(device)
    bound = (x, y, out, n, 1024)
    go, function = executor._go, executor._function
    cases = {
        "x.numel()": x.numel,
        "triton.cdiv(n, 1024) (not used by (a)-(d))": lambda: triton.cdiv(n, 1024),
        "-(-n // 1024)": lambda: _cdiv(n, 1024),
        "executor bind (4 positional + BLOCK=)": lambda: executor._bind(
            (x, y, out, n), {"BLOCK": 1024}
        ),
        "current device getter": executor._get_device,
        "current stream getter": lambda: executor._get_stream(device),
        "go(grid, stream, fn, args): C launch": lambda: go(grid, stream, function, bound),
        "executor(grid, *5 args)": lambda: executor(grid, x, y, out, n, 1024),
        "executor(grid, *4 args, BLOCK=)": lambda: executor(grid, x, y, out, n, BLOCK=1024),
        "executor.launch(grid, args, {BLOCK:})": lambda: executor.launch(
            grid, (x, y, out, n), {"BLOCK": 1024}
        ),
    }
    return _time_each(cases, args)


def _time_each(cases: dict[str, Any], args: argparse.Namespace) -> dict[str, float]:
    """Median us per call of each case, over ``--runs`` runs of ``max(--iters, 2000)`` calls."""
    iters = max(args.iters, 2000)
    out = {}
    for name, fn in cases.items():
        runs = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            runs.append((time.perf_counter() - t0) / iters * 1e6)
        out[name] = statistics.median(runs)
    return out


if __name__ == "__main__":
    sys.exit(main())
