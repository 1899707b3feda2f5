"""B4: first real launch after warmup vs the steady state, for each key of the demo (goal <= 1.5x).

    python benchmarks/first_launch.py [--runs 5] [--iters 200] [--out first.json] [--tiny]

Needs a CUDA GPU; without one it says so and exits 0 (``--tiny`` on a CPU box
does just that). Each run is a fresh process with an empty ``TRITON_CACHE_DIR``
that builds the demo's block tables on the GPU (``examples/serve.py``'s
``build_tables``), warms up, then for each key (in an order rotated by the run
index) times its first real launch and the median of ``--iters`` further
launches, each bracketed by ``torch.cuda.synchronize()``. Two warmups:

* ``warmkit``: ``warmkit.warmup`` in device mode (compile, module load,
  launcher, priming), then launches through the kernel (``BlockTable.
  compute_slot_mapping`` -> ``TritonKernel.run``);
* ``compile-only``: Triton's ``fn.warmup`` for each key with the kernel's own
  ``warmup_args``/``launch_options`` (the vLLM way), then bare ``fn[grid]``
  launches with the same options.

Besides the demo's keys, #14's held-out kernel: a ``scale_add`` with fp16 and
fp32 variants and ``n`` in {1, 4095, 4096, 2**20}, whose ``__call__`` derives
its key from ``x.dtype`` and ``x.numel()``. ``--modes warmkit-eager`` adds the
warmkit warmup with ``CUDA_MODULE_LOADING=EAGER`` (is lazy loading the cost?).

Triton's hook events (in-memory misses, compiles/disk hits, module loads)
during the timed launches are counted; after a warmkit warmup they must be 0.
Also reported: the CPU time until each call returned, and "after another
key": the same call timed right after a call of the previous key (another
kernel's code where the order switches kernels), median of 3. A first launch
costing what that costs is paying for cold CPU caches, not for anything a
warmup left undone. And "after cache flush": the same call right after a
write to every cache line of 64 MiB (the CPU's caches left cold, nothing
else changed), median of 3.

``warmkit-launched`` (a default mode) launches every case once for real
before the timing: its "first" is what no warmup can beat, since nothing is
left to do for the first time. Where ``warmkit`` equals it, the gap to the
steady state is the position in the order, not a first-launch cost.

``warmkit-profile`` (a default mode) is ``warmkit`` with each call split in
two: the C launch (the executor's direct launcher call: Triton's launcher
and the driver's ``cuLaunchKernelEx``, timed by a wrapper around it) and the
Python above it (the rest of the CPU time until the call returned), for the
first call, the steady calls and the calls after the cache flush; plus, for
the first call, the minor page faults, the context switches and the thread's
own CPU time (``getrusage``, ``time.thread_time``), which tell memory the
process touches for the first time and a thread taken off its CPU from cold
caches. Its second table is B4's profile.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MARK = "FIRST-LAUNCH-CHILD "
GOAL = 1.5
NEEDS_GPU = (
    "first_launch.py: needs a CUDA GPU (B4 times real launches on a device); nothing measured"
)


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# -- the child ---------------------------------------------------------------------------------


def _vector_kernel() -> Any:
    """The held-out kernel of #14's B4: fp16 and fp32, n in {1, 4095, 4096, 2**20}.

    Its ``__call__`` derives the key from the tensor (``x.dtype``, ``x.numel()``),
    as engine kernels do.
    """
    import attrs
    import torch
    import triton
    import triton.language as tl
    from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep

    @triton.jit
    def scale_add(x, y, out, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x + offs, mask=mask) * alpha + tl.load(y + offs, mask=mask)
        tl.store(out + offs, v, mask=mask)

    names = {torch.float16: "float16", torch.float32: "float32"}

    class ScaleAdd(TritonKernel):
        fn = scale_add
        name = "benchmarks.first_launch.ScaleAdd"

        @attrs.frozen
        class CompileKey:
            dtype: str
            n: int
            block: int

        def dispatch(self, *, dtype: Any, n: int, block: int = 1024) -> Any:
            name = dtype if isinstance(dtype, str) else names[dtype]
            return self.CompileKey(name, specialization_rep(n), block)

        def warmup_args(self, key: Any) -> Any:
            t = WarmupTensor(key.dtype, (max(key.n, 1),))
            return (t, t, t, key.n, 1.5), {"BLOCK": key.block}

        def __call__(self, x: Any, y: Any, out: Any) -> None:
            n = x.numel()
            key = self.dispatch(dtype=x.dtype, n=n)
            # -(-n // b), not triton.cdiv: on 3.6 that is a constexpr_function (1-2.5 us a call)
            self.run(key, (-(-n // key.block),), x, y, out, n, 1.5, BLOCK=key.block)

    return ScaleAdd


def _dry_run(calls: list[Any], kernels: list[Any]) -> None:
    """Each call once with every executor's CUfunction null: the driver rejects each launch."""
    executors = [e for k in kernels for e in k.executors.values()]
    saved = [e._function for e in executors]
    for e in executors:
        e._function = 0
    try:
        for call in calls:
            try:
                call()
            except RuntimeError:
                pass
    finally:
        for e, f in zip(executors, saved):
            e._function = f


class _LaunchClock:
    """Times each executor's C launch (``ns``) and each kernel's ``run`` (``run_ns``) since reset.

    ``run`` is warmkit's launch path (``TritonKernel.run``: the identity lookup, the
    executor's ``launch``, the C launch); what a call takes outside it is the caller's
    own Python (the kernel's ``__call__``, the block table's checks), which a warmup
    cannot run without the caller's arguments.
    """

    def __init__(self, kernels: list[Any]) -> None:
        self.ns = 0
        self.run_ns = 0
        for kernel in kernels:
            # an instance attribute: the kernel's own `self.run(...)` finds it first
            kernel.run = self._wrap(kernel.run, "run_ns")
            for executor in kernel.executors.values():
                if hasattr(executor, "_go"):  # a direct launch (else fn[grid]: all "Python")
                    executor._go = self._wrap(executor._go, "ns")

    def _wrap(self, go: Any, total: str) -> Any:
        clock = time.perf_counter_ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            s = clock()
            try:
                return go(*args, **kwargs)
            finally:
                setattr(self, total, getattr(self, total) + clock() - s)

        return timed


def child(mode: str, rotate: int, iters: int) -> int:
    import resource

    import torch
    from triton import knobs
    from warmkit_blocktable._jit import compute_slot_mapping_kernel as fn
    from warmkit_blocktable._kernel import get_kernel, launch_arguments

    import warmkit

    sys.path.insert(0, str(ROOT / "examples"))
    import serve

    device = torch.device("cuda", torch.cuda.current_device())
    engine = serve.load_engine(serve.DEFAULT_CONFIG)
    registry = warmkit.WarmupRegistry()
    tables, _ = serve.build_tables(engine, device, registry)
    kernel = get_kernel()
    by_key: dict[Any, Any] = {}
    for mg in tables.values():
        for t in mg:
            if t.slot_mapping is not None and t.implementation == "triton":
                by_key.setdefault(kernel.dispatch(**t.warmup_space()), t)
    keys = list(by_key)
    vector = _vector_kernel()()
    vectors = []
    for dtype in (torch.float16, torch.float32):
        for n in (1, 4095, 4096, 2**20):
            xs = [torch.randn(n, device=device).to(dtype) for _ in range(3)]
            vectors.append((f"vector {str(dtype)[6:]} n={n}", xs))
            with registry.activate():
                vector.register_warmup(dtype=str(dtype)[6:], n=n)

    t0 = time.perf_counter()
    if mode.startswith("warmkit"):
        report = warmkit.warmup(
            warmkit.WarmupConfig(progress="off", monitor="off", target=None), registry
        )
        assert report.ok, report.table()
    else:
        for key in keys:
            args, kwargs = kernel.warmup_args(key)
            fn.warmup(*args, grid=(1,), **kwargs, **kernel.launch_options(key))
        for plan_key in {vector.dispatch(dtype=xs[0].dtype, n=xs[0].numel()) for _, xs in vectors}:
            args, kwargs = vector.warmup_args(plan_key)
            vector.fn.warmup(*args, grid=(1,), **kwargs)
    warmup_s = time.perf_counter() - t0

    # inputs: 4 requests of 16 tokens at positions 0..15, request i in allocation block i + 1
    num_reqs = 4
    qsl = torch.arange(0, 16 * (num_reqs + 1), 16, dtype=torch.int32, device=device)
    pos = torch.arange(16, dtype=torch.int64, device=device).repeat(num_reqs)
    for t in by_key.values():
        for row in range(num_reqs):
            t.add_row([row + 1], row)
        t.commit(num_reqs)
    torch.cuda.synchronize()

    def launcher(key: Any) -> Any:
        t = by_key[key]
        if mode.startswith("warmkit"):
            return lambda: t.compute_slot_mapping(num_reqs, qsl, pos, validate=False)
        args, kwargs = launch_arguments(
            t.warmup_space(),
            num_tokens=pos.shape[0],
            max_num_tokens=t.max_num_batched_tokens,
            query_start_loc=qsl,
            positions=pos,
            block_table=t.block_table,
            slot_mapping=t.slot_mapping,
        )
        opts = kernel.launch_options(key)
        grid = (num_reqs + 1,)
        return lambda: fn[grid](*args, **kwargs, **opts)

    def vector_launcher(xs: list[Any]) -> Any:
        x, y, out = xs
        if mode.startswith("warmkit"):
            return lambda: vector(x, y, out)
        grid = ((x.numel() + 1023) // 1024,)
        return lambda: vector.fn[grid](x, y, out, x.numel(), 1.5, BLOCK=1024)

    events: list[str] = []
    knobs.runtime.jit_cache_hook = lambda **kw: events.append("miss") and None
    knobs.compilation.listener = lambda **kw: events.append(
        "disk_hit" if kw.get("cache_hit") else "compile"
    )
    knobs.runtime.kernel_load_start_hook.add(lambda *a, **k: events.append("load"))

    def timed(call: Any) -> tuple[float, float]:
        """(us until the call returned, us until the GPU finished it)."""
        torch.cuda.synchronize()
        s = time.perf_counter()
        call()
        r = time.perf_counter()
        torch.cuda.synchronize()
        return (r - s) * 1e6, (time.perf_counter() - s) * 1e6

    clock = _LaunchClock([kernel, vector]) if mode == "warmkit-profile" else None
    split: list[dict[str, float]] = []  # per timed call, in profile mode

    if clock is not None:

        def timed(call: Any) -> tuple[float, float]:  # type: ignore[no-redef]
            """``timed``, and the call's C launch, faults, switches and thread CPU time."""
            torch.cuda.synchronize()
            clock.ns = clock.run_ns = 0
            before = resource.getrusage(resource.RUSAGE_THREAD)
            thread0 = time.thread_time_ns()
            s = time.perf_counter()
            call()
            r = time.perf_counter()
            thread = (time.thread_time_ns() - thread0) / 1e3  # the call alone, no synchronize
            torch.cuda.synchronize()
            gpu = (time.perf_counter() - s) * 1e6
            after = resource.getrusage(resource.RUSAGE_THREAD)  # the synchronizes too
            cpu, launch, run = (r - s) * 1e6, clock.ns / 1e3, clock.run_ns / 1e3
            split.append(
                {
                    "launch_us": launch,
                    "python_us": cpu - launch,
                    "caller_us": cpu - run,  # the kernel's __call__, the block table's checks
                    "run_python_us": run - launch,  # warmkit's launch path above the C launch
                    "faults": after.ru_minflt - before.ru_minflt,
                    "switches": (after.ru_nvcsw - before.ru_nvcsw)
                    + (after.ru_nivcsw - before.ru_nivcsw),
                    "thread_cpu_us": thread,
                }
            )
            return cpu, gpu

    cases = [(repr(key), launcher(key)) for key in keys]
    cases += [(label, vector_launcher(xs)) for label, xs in vectors]
    if mode == "warmkit-dry":  # every case's whole path once, each launch rejected by the driver
        _dry_run([call for _, call in cases], [kernel, vector])
    if mode == "warmkit-launched":  # the bound no warmup can beat: every case once, for real
        for _, call in cases:
            call()
        torch.cuda.synchronize()
    del events[:]
    rotate %= len(cases)
    order = cases[rotate:] + cases[:rotate]
    out = []
    for i, (label, call) in enumerate(order):
        before = len(events)
        del split[:]
        first_cpu, first = timed(call)
        first_events = events[before:]
        steady_runs = [timed(call) for _ in range(iters)]
        steady = statistics.median(t for _, t in steady_runs)
        out.append(
            {
                "key": label,
                "position": i,
                "first_us": first,
                "first_cpu_us": first_cpu,
                "steady_us": steady,
                "steady_cpu_us": statistics.median(c for c, _ in steady_runs),
                "ratio": first / steady,
                "events": first_events,
            }
        )
        if split:  # profile mode: the first call's split, and the steady calls' medians
            out[-1]["profile"] = {
                "first": split[0],
                "steady": {k: statistics.median(c[k] for c in split[1:]) for k in split[0]},
            }
    # The same call once more, right after another key's call (the other kernel's code, where
    # there is one): what a first launch costs that any launch after other work costs too.
    for i, (_label, call) in enumerate(order):
        timed(order[i - 1][1])
        switch = [timed(call)[1]]
        for _ in range(2):
            timed(order[i - 1][1])
            switch.append(timed(call)[1])
        out[i]["after_other_us"] = statistics.median(switch)
    # And right after a pass over 64 MiB, which leaves the CPU's caches cold (and nothing
    # else): if a first launch costs what this costs, its gap is cold caches.
    flush = bytearray(64 << 20)
    line = b"\x01" * (len(flush) // 64)
    for i, (_label, call) in enumerate(order):
        cold = []
        flushed = []
        for _ in range(3):
            timed(call)
            flush[::64] = line  # one write per 64-byte cache line
            del split[:]
            cold.append(timed(call))
            flushed += split
        if flushed:
            out[i]["profile"]["after_flush"] = {
                k: statistics.median(c[k] for c in flushed) for k in flushed[0]
            }
        out[i]["after_flush_us"] = statistics.median(t for _, t in cold)
        out[i]["after_flush_cpu_us"] = statistics.median(c for c, _ in cold)
    print(MARK + json.dumps({"mode": mode, "warmup_s": warmup_s, "keys": out}), flush=True)
    return 0


# -- the parent --------------------------------------------------------------------------------


def _profile(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of each part of the first, steady and after-flush calls."""
    prof: dict[str, Any] = {}
    for when in ("first", "steady", "after_flush"):
        parts = [s["profile"][when] for s in samples]
        prof[when] = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    prof["first"]["faults_max"] = max(s["profile"]["first"]["faults"] for s in samples)
    prof["first"]["switches_max"] = max(s["profile"]["first"]["switches"] for s in samples)
    prof["first"]["cpu_us"] = statistics.median(s["first_cpu_us"] for s in samples)
    return prof


def _profile_cells(prof: dict[str, Any]) -> tuple[str, ...]:
    first = prof["first"]

    def three(part: str) -> str:  # first / steady / after flush
        return " / ".join(f"{prof[when][part]:.1f}" for when in ("first", "steady", "after_flush"))

    return (
        three("python_us"),
        three("caller_us"),
        three("run_python_us"),
        three("launch_us"),
        f"{first['faults']:.0f} (max {first['faults_max']})",
        f"{first['switches']:.0f} (max {first['switches_max']})",
        f"{first['thread_cpu_us']:.1f} / {first['cpu_us']:.1f}",
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    sys.path.insert(0, str(HERE))
    from _common import emit, parser, stats, table

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200, help="steady-state launches per key")
    p.add_argument(
        "--modes",
        default="warmkit,warmkit-launched,warmkit-profile,compile-only",
        help="comma-separated: warmkit, compile-only, warmkit-eager (CUDA_MODULE_LOADING=EAGER), "
        "warmkit-dry (each call's whole path once before the timing, launches rejected by the "
        "driver), warmkit-launched (each call once for real before the timing: the bound), "
        "warmkit-profile (warmkit, each call split into its C launch and the Python above it)",
    )
    args = p.parse_args()
    if not _gpu():
        emit("B4-first-launch", {"skipped": NEEDS_GPU, "goal_ratio": GOAL}, args.out, NEEDS_GPU)
        return 0
    runs = 1 if args.tiny else max(args.runs, 5)
    iters = 20 if args.tiny else args.iters
    per: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in args.modes.split(",")}
    warmups: dict[str, list[float]] = {m: [] for m in per}
    for r in range(runs):
        for mode, samples_by_key in per.items():
            with tempfile.TemporaryDirectory(prefix="warmkit-b4-") as cache:
                env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")} | {
                    "TRITON_CACHE_DIR": cache
                }
                if mode.endswith("-eager"):
                    env["CUDA_MODULE_LOADING"] = "EAGER"
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", mode, str(r), str(iters)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"first_launch.py: child failed:\n{proc.stdout}\n{proc.stderr}")
            res = json.loads(lines[-1][len(MARK) :])
            warmups[mode].append(res["warmup_s"])
            for k in res["keys"]:
                samples_by_key.setdefault(k["key"], []).append(k)
            print(f"  run {r + 1}/{runs} {mode}: warmup {res['warmup_s']:.2f} s", flush=True)
    results: dict[str, Any] = {"goal_ratio": GOAL, "runs": runs, "iters": iters, "modes": {}}
    rows, profile_rows, per_run_rows = [], [], []
    for mode, keys in per.items():
        results["modes"][mode] = {"warmup_s": stats(warmups[mode]), "keys": {}}
        for i, (key, samples) in enumerate(keys.items()):
            ratio = stats([s["ratio"] for s in samples])
            first = stats([s["first_us"] for s in samples])
            steady = stats([s["steady_us"] for s in samples])
            after_other = stats([s["after_other_us"] for s in samples])
            after_flush = stats([s["after_flush_us"] for s in samples])
            first_cpu = stats([s["first_cpu_us"] for s in samples])
            steady_cpu = stats([s["steady_cpu_us"] for s in samples])
            events = sorted({e for s in samples for e in s["events"]})
            results["modes"][mode]["keys"][key] = {
                "first_us": first,
                "steady_us": steady,
                "ratio": ratio,
                "first_cpu_us": first_cpu,
                "steady_cpu_us": steady_cpu,
                "after_other_us": after_other,
                "after_flush_us": after_flush,
                "after_flush_cpu_us": stats([s["after_flush_cpu_us"] for s in samples]),
                "first_vs_after_flush": stats(
                    [s["first_us"] / s["after_flush_us"] for s in samples]
                ),
                "first_vs_after_other": stats(
                    [s["first_us"] / s["after_other_us"] for s in samples]
                ),
                "events_at_first_launch": events,
                "first_in_process_ratio": [s["ratio"] for s in samples if s["position"] == 0],
            }
            if "profile" in samples[0]:
                prof = _profile(samples)
                results["modes"][mode]["keys"][key]["profile"] = prof
                profile_rows.append((f"key {i}", *_profile_cells(prof)))
                # run by run: is the gap the process's first call (position 0) or every run's?
                runs_cells = []
                for s in samples:
                    f, a = s["profile"]["first"], s["profile"]["after_flush"]
                    runs_cells.append(
                        f"@{s['position']} {f['caller_us']:.0f}+{f['run_python_us']:.0f}"
                        f"/{a['caller_us']:.0f}+{a['run_python_us']:.0f}"
                    )
                per_run_rows.append((f"key {i}", "  ".join(runs_cells)))
            rows.append(
                (
                    f"{mode} key {i}",
                    f"{first['median']:.1f} ({first['min']:.1f}-{first['max']:.1f})",
                    f"{steady['median']:.1f}",
                    f"{first_cpu['median']:.1f} / {steady_cpu['median']:.1f}",
                    f"{after_other['median']:.1f}",
                    f"{after_flush['median']:.1f}",
                    f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})",
                    ",".join(events) or "none",
                    "yes" if ratio["median"] <= GOAL else "NO",
                )
            )
    text = table(
        rows,
        (
            "B4 warmup / key",
            "first us",
            "steady us",
            "CPU first/steady us",
            "after another key us",
            "after cache flush us",
            "first/steady",
            "Triton events",
            "<= 1.5x",
        ),
    )
    first_mode = next(iter(per))
    text += "\nkeys: " + "; ".join(f"{i}: {k}" for i, k in enumerate(per[first_mode]))
    if profile_rows:
        text += "\n\nB4 profile (warmkit-profile), CPU us until the call returned, medians:\n"
        text += table(
            profile_rows,
            (
                "key",
                "Python first / steady / after flush",
                "of it the caller's",
                "of it warmkit's run",
                "C launch first / steady / after flush",
                "first: faults",
                "first: switches",
                "first: thread CPU / CPU us",
            ),
        )
        text += (
            "\nrun by run (@position in the order: caller's + run's Python, first / after flush):\n"
        )
        text += table(per_run_rows, ("key", "runs"))
    emit("B4-first-launch", results, args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
