"""B11: autotuned kernels warmed on the device, shipped in a bundle, served with 0 compiles and 0 benchmarks.

    python benchmarks/autotune.py [--runs 5] [--iters 200] [--jobs N] [--out autotune.json] [--tiny]

Needs a CUDA GPU; without one it says so and exits 0. Every step is a fresh
process with its own ``TRITON_CACHE_DIR``:

* ``warm`` (jobs=1 and jobs=N, empty caches): ``warmkit.warmup`` in device
  mode, monitor ``"error"``, of an autotuned kernel of this file (4 configs,
  2 autotune keys) and, when ``fla-core`` is installed, of flash-linear-
  attention's ``l2norm_fwd_kernel_row`` (6 configs, ``key=["D"]``, 2 keys);
  then the first runtime call of each key (compiles counted with Triton's
  compile listener, benchmarks by counting warmkit's benchmark calls and
  monitor events) and the median of ``--iters`` steady calls;
* ``bundle-build``: the same warmup inside ``warmkit.build_bundle`` on the
  device (the tuned results go into the bundle);
* ``bundle-serve``: an empty cache, ``WarmupConfig(bundle=..., monitor="error")``,
  then first calls: 0 compiles, 0 benchmarks, every key ``tuning == "stored"``;
* ``cold``: the raw ``@triton.autotune`` kernel (not wrapped), first call in an
  empty cache: what a request would pay (compile every config + benchmark).

Exits 1 when a first call compiles or benchmarks anything.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor

HERE = Path(__file__).resolve().parent
MARK = "AUTOTUNE-CHILD "
NEEDS_GPU = "autotune.py: needs a CUDA GPU (B11 benchmarks configs on a device); nothing measured"

CONFIGS = [
    triton.Config({"BLOCK": 256}, num_warps=2),
    triton.Config({"BLOCK": 512}, num_warps=4),
    triton.Config({"BLOCK": 1024}, num_warps=4),
    triton.Config({"BLOCK": 2048}, num_warps=8),
]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def axpy_kernel(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = alpha * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)
    tl.store(out + offs, v, mask=mask)


class Axpy(TritonKernel):
    """out = alpha * x + y; autotuned on the exact n."""

    fn = axpy_kernel

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n: int) -> CompileKey:
        return self.CompileKey(n)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor("float32", (key.n,))
        return (t, t, t, key.n, 2.0), {}

    def warmup_grid(self, key: CompileKey):
        return lambda meta: (triton.cdiv(key.n, meta["BLOCK"]),)

    def __call__(self, x, y, out, alpha=2.0):
        n = x.numel()
        self.run(self.dispatch(n=n), lambda m: (triton.cdiv(n, m["BLOCK"]),), x, y, out, n, alpha)


def _fla_kernel() -> Any:
    """A TritonKernel around flash-linear-attention's ``l2norm_fwd_kernel_row``, or None without fla."""
    try:
        from fla.modules.norm.l2norm import l2norm_fwd_kernel_row
    except ImportError:
        return None

    class FlaL2NormRow(TritonKernel):
        """fla's row-wise L2 norm (D > 512), 6 num_warps configs, autotune key D."""

        fn = l2norm_fwd_kernel_row
        name = "fla.l2norm_fwd_kernel_row"

        @attrs.frozen
        class CompileKey:
            t: int
            d: int

        def dispatch(self, *, t: int, d: int):
            return self.CompileKey(t, d)

        def warmup_args(self, key):
            x = WarmupTensor("bfloat16", (key.t, key.d))
            rstd = WarmupTensor("float32", (key.t,))
            return (x, x, rstd, 1e-6, key.d), {"BD": triton.next_power_of_2(key.d)}

        def warmup_grid(self, key):
            return (key.t,)

        def __call__(self, x, y, rstd):
            t, d = x.shape
            key = self.dispatch(t=t, d=d)
            self.run(key, (t,), x, y, rstd, 1e-6, d, BD=triton.next_power_of_2(d))

    return FlaL2NormRow


# -- the child ---------------------------------------------------------------------------------


def _workload(tiny: bool) -> list[tuple[Any, dict[str, Any], Any]]:
    """(kernel class, registration, make-call) per key."""
    import torch

    out: list[tuple[Any, dict[str, Any], Any]] = []
    for n in (1 << 16, (1 << 16) + 8) if tiny else (1 << 24, (1 << 24) + 8):

        def make(n: int = n) -> Any:
            x, y, o = (torch.randn(n, device="cuda") for _ in range(3))
            return lambda: Axpy()(x, y, o)

        out.append((Axpy, {"n": n}, make))
    fla = _fla_kernel()
    if fla is not None:
        for d in (1024, 4096):

            def make_fla(d: int = d, fla: Any = fla) -> Any:
                t = 4096
                x = torch.randn(t, d, device="cuda", dtype=torch.bfloat16)
                y = torch.empty_like(x)
                rstd = torch.empty(t, device="cuda", dtype=torch.float32)
                return lambda: fla()(x, y, rstd)

            out.append((fla, {"t": 4096, "d": d}, make_fla))
    return out


def child(mode: str, jobs: int, iters: int, tiny: bool, bundle: str) -> int:
    import torch
    from triton import knobs
    from warmkit_triton import _autotune

    import warmkit

    facts: dict[str, Any] = {"mode": mode}
    work = _workload(tiny)
    if mode == "cold":
        n = work[0][1]["n"]
        x, y, o = (torch.randn(n, device="cuda") for _ in range(3))
        grid = lambda m: (triton.cdiv(n, m["BLOCK"]),)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        axpy_kernel[grid](x, y, o, n, 2.0)
        torch.cuda.synchronize()
        facts["cold_first_ms"] = (time.perf_counter() - t0) * 1e3
        facts["bench_s"] = getattr(axpy_kernel, "bench_time", None)
        steady = []
        for _ in range(iters):
            t0 = time.perf_counter()
            axpy_kernel[grid](x, y, o, n, 2.0)
            torch.cuda.synchronize()
            steady.append((time.perf_counter() - t0) * 1e3)
        facts["steady_ms"] = statistics.median(steady)
        print(MARK + json.dumps(facts))
        return 0

    benches: list[str] = []
    real = _autotune.benchmark

    def counting(stack: Any, *args: Any, **kwargs: Any) -> Any:
        benches.append(stack.name)
        return real(stack, *args, **kwargs)

    _autotune.benchmark = counting
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        for cls, space, _make in work:
            cls().register_warmup(**space)
    t0 = time.perf_counter()
    if mode == "bundle-build":
        meta = warmkit.build_bundle(reg, bundle, jobs=jobs, progress="off")
        facts["build_s"] = time.perf_counter() - t0
        facts["tuned_in_bundle"] = len(meta["backends"]["triton"].get("tuned", []))
        facts["benchmarks"] = len(benches)
        print(MARK + json.dumps(facts))
        return 0
    config = warmkit.WarmupConfig(
        monitor="error",
        jobs=jobs,
        progress="off",
        bundle=bundle if mode == "bundle-serve" else None,
    )
    report = warmkit.warmup(config, reg)
    torch.cuda.synchronize()
    facts["warmup_s"] = time.perf_counter() - t0
    facts["tuning"] = [e.tuning for e in report.entries]
    facts["benchmarks_at_warmup"] = len(benches)
    compiles: list[bool] = []
    knobs.compilation.listener = lambda **kw: compiles.append(bool(kw["cache_hit"]))
    del benches[:]
    keys = []
    for cls, space, make in work:
        call = make()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        first = (time.perf_counter() - t0) * 1e3
        steady = []
        for _ in range(iters):
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            steady.append((time.perf_counter() - t0) * 1e3)
        keys.append(
            {
                "kernel": cls.name,
                "space": space,
                "first_ms": first,
                "steady_ms": statistics.median(steady),
            }
        )
    facts["keys"] = keys
    facts["first_call_compiles"] = len(compiles)
    facts["first_call_benchmarks"] = len(benches)
    facts["monitor_events"] = [(e.kind, e.kernel) for e in warmkit.monitor.events()]
    print(MARK + json.dumps(facts))
    return 0


def _run(mode: str, cache: Path, jobs: int, iters: int, tiny: bool, bundle: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(cache)
    argv = [
        sys.executable,
        __file__,
        "--child",
        mode,
        str(jobs),
        str(iters),
        str(int(tiny)),
        bundle,
    ]
    t0 = time.perf_counter()
    # One line per child on stderr: a session step killed by its time limit still shows how far
    # it got (the H200 session of 2026-12-01 saw an empty log after 420 s of 22 slow children).
    print(f"[b11] child {mode} jobs={jobs} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    print(
        f"[b11] child {mode} jobs={jobs}: rc={proc.returncode} in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {mode} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith(MARK))
    return json.loads(line[len(MARK) :])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, jobs, iters, tiny, bundle = sys.argv[2:7]
        return child(mode, int(jobs), int(iters), tiny == "1", bundle)
    sys.path.insert(0, str(HERE))
    from _common import emit, parser, stats, table

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200, help="steady-state calls per key")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="N of jobs=1 vs jobs=N")
    args = p.parse_args()
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        emit("B11-autotune", {"skipped": NEEDS_GPU}, args.out, NEEDS_GPU)
        return 0
    runs = 1 if args.tiny else max(args.runs, 5)
    iters = 20 if args.tiny else args.iters
    problems: list[str] = []
    res: dict[str, Any] = {"fla": _fla_kernel() is not None, "jobs_n": args.jobs}
    with tempfile.TemporaryDirectory(prefix="warmkit-b11-") as tmp:
        root = Path(tmp)
        warm: dict[int, list[dict]] = {1: [], args.jobs: []}
        for r in range(runs):
            for jobs, docs in warm.items():
                docs.append(_run("warm", root / f"w{jobs}-{r}", jobs, iters, args.tiny))
        bundle = str(root / "tuned.wkb")
        res["bundle_build"] = _run("bundle-build", root / "b", args.jobs, iters, args.tiny, bundle)
        serve = [
            _run("bundle-serve", root / f"s{r}", args.jobs, iters, args.tiny, bundle)
            for r in range(runs)
        ]
        cold = [_run("cold", root / f"c{r}", 1, iters, args.tiny) for r in range(runs)]
    for label, docs in [("warm", warm[args.jobs] + warm[1]), ("bundle-serve", serve)]:
        for d in docs:
            if d["first_call_compiles"] or d["first_call_benchmarks"] or d["monitor_events"]:
                problems.append(f"{label}: first calls compiled/benchmarked: {d}")
    for d in serve:
        if any(t != "stored" for t in d["tuning"]) or d["benchmarks_at_warmup"]:
            problems.append(f"bundle-serve re-tuned: {d['tuning']}")
    rows = []
    for i, key in enumerate(warm[args.jobs][0]["keys"]):
        first = stats([d["keys"][i]["first_ms"] for d in warm[args.jobs]])
        steady = stats([d["keys"][i]["steady_ms"] for d in warm[args.jobs]])
        served = stats([d["keys"][i]["first_ms"] for d in serve])
        rows.append(
            [key["kernel"].rsplit(".", 1)[-1], json.dumps(key["space"]), f"{first['median']:.3f}",
             f"{served['median']:.3f}", f"{steady['median']:.3f}",
             f"{first['median'] / steady['median']:.2f}"]
        )  # fmt: skip
    res["keys"] = rows
    res["warmup_s"] = {j: stats([d["warmup_s"] for d in docs]) for j, docs in warm.items()}
    res["serve_warmup_s"] = stats([d["warmup_s"] for d in serve])
    res["cold_first_ms"] = stats([d["cold_first_ms"] for d in cold])
    res["cold_steady_ms"] = stats([d["steady_ms"] for d in cold])
    res["problems"] = problems
    text = table(rows, ["kernel", "key", "first ms", "first ms (bundle)", "steady ms", "ratio"])
    w1, wn = res["warmup_s"][1]["median"], res["warmup_s"][args.jobs]["median"]
    text += (
        f"\nwarmup jobs=1 {w1:.2f}s vs jobs={args.jobs} {wn:.2f}s ({w1 / wn:.2f}x); "
        f"bundle-served warmup {res['serve_warmup_s']['median']:.2f}s\n"
        f"cold runtime autotune (raw kernel, first call): {res['cold_first_ms']['median']:.1f} ms "
        f"vs steady {res['cold_steady_ms']['median']:.3f} ms\n"
        + ("\n".join(problems) if problems else "first calls: 0 compiles, 0 benchmarks")
    )
    emit("B11-autotune", res, args.out, text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
