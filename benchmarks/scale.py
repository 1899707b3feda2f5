"""B10: warmkit's own cost as the number of keys grows (a guard; goal <= 20 us/key, <= 2 KB/key).

    python benchmarks/scale.py [--keys 10,1000,10000,100000] [--plan-only 1000000] [--out r.json]
    python benchmarks/plot_scale.py r.json docs/img/scale.png        # the curve (matplotlib)

The backend is a no-op (the kernel's own ``compile`` returns its key) and the
monitor is off, so everything measured is warmkit: registering, saving and
loading the manifest, planning (``dispatch`` per point), the warmup's
orchestration per key (the worker pool, the per-key report entry, the progress
bar), and the report (``table()`` and ``to_json()``).

The shapes of manifest, for N keys:

* ``declared``: one registration per 100 keys (an ``IntRange`` axis), the way
  engine objects declare spaces;
* ``recorded``: one registration per key, each a single point, the shape of a
  manifest written by recording a run (one entry per specialization);
* ``replayed``: the manifest's ``recorded`` section, one ``"key"`` entry per
  key (a wrapped kernel's ``CompileKey``, as ``warmkit record`` writes it);
* ``tuned``: as ``declared``, for an autotuned kernel: each key's executor
  reports its tuning (``warmkit.ReportsTuning``, as the Triton backend's
  autotuned executors do), which the warmup checks and the report carries;
* ``raw``: the ``recorded`` section with one ``"raw"`` entry per key (a raw
  function's specialization, as the Triton backend records a ``@triton.jit``
  kernel), replayed by the no-op backend ``scale`` (``ScaleBackend``, put in
  place with ``warmkit.testing.backend_override``): its ``recorded_kernel``
  reads the entry's ``spec`` as a plugin does.

Two columns say where time goes that is not instructions: ``gc``, the time the
cyclic collector ran (``gc.callbacks``) over load + warmup + report, and
``faults``, the minor page faults per key (``getrusage``; memory the process
touched for the first time, or again after giving it back: each costs ~2 us
on the H200 host and ~8 us on the CPU box).

Per phase, the median over ``--runs`` runs (>= 5) in one process, the rows
taking turns run by run (a slower minute of the host lands on every row); the memory
per key is the peak traced by ``tracemalloc`` over load + warmup + report,
divided by N, in a run of its own (tracing slows everything down). Planning
alone is also timed at 1,000,000 keys (``--plan-only``).

``--instructions 2000,4000`` counts instead of timing: the instructions that
load + warmup + report execute per key, under valgrind's callgrind (the
difference between the two sizes, each one pipeline in a fresh process with
the hash seed fixed and the progress bar off, over the difference in keys).
The count barely moves from run to run, so it compares two versions on a
shared box whose timings move by 20 % from one minute to the next. ``--jobs
1`` keeps it to one thread (with threads the count depends on valgrind's
scheduling); the bar is off because it redraws by the clock.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import attrs
from _common import emit, parser, stats, table

import warmkit
from warmkit._registry.recorded import resolve_recorded
from warmkit.testing import backend_override

GOAL_US_PER_KEY = 20.0
GOAL_BYTES_PER_KEY = 2048
GOAL_RECORDED_LOAD_S = 2.0  # a 100k-entry recorded manifest
PER_REGISTRATION = 100


class ScaleKernel(warmkit.JitKernel):
    """A kernel whose compile is a no-op: the benchmark measures warmkit, not a compiler."""

    name = "benchmarks.scale.ScaleKernel"

    @attrs.frozen
    class CompileKey:
        index: int
        block: int
        dtype: str

    def dispatch(self, *, index, block=128, dtype="float16"):
        return self.CompileKey(index, max(block, 64), dtype)

    def compile(self, key):
        return key


@attrs.frozen
class TunedExecutor:
    """What an autotuned key compiles to, as far as warmkit reads it (``ReportsTuning``)."""

    key: Any
    tuning: str = "stored"  # a stored tuning result was used: nothing benchmarked
    tuning_key: Any = None
    autotune_seconds: float = 0.0


class TunedKernel(ScaleKernel):
    """An autotuned kernel whose compile is a no-op: its executors report their tuning."""

    name = "benchmarks.scale.TunedKernel"

    def compile(self, key):
        return TunedExecutor(key, tuning_key=key.block)


class RawKernel(warmkit.JitKernel):
    """What ``ScaleBackend`` replays a raw entry as: a kernel of backend ``scale``."""

    name = "benchmarks.scale.RawKernel"
    backend = "scale"

    @attrs.frozen
    class CompileKey:
        fn: str
        index: int
        dtype: str
        num_warps: int

    def dispatch(self, *, fn, index, dtype="float16", num_warps=4):
        return self.CompileKey(fn, index, dtype, num_warps)


class ScaleBackend:
    """Backend ``scale``: compiles nothing, replays raw entries (``RecordReplay``)."""

    name = "scale"

    def __init__(self) -> None:
        self._kernel = RawKernel()

    def available(self) -> warmkit.BackendStatus:
        return warmkit.BackendStatus(ok=True, reason="benchmarks/scale.py: a no-op backend")

    def default_target(self) -> str | None:
        return None

    def parallelism(self, target: str | None) -> int:
        return os.cpu_count() or 1

    def compile_scope(self, target: str | None, jobs: int) -> Any:
        return contextlib.nullcontext()

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        return key

    def recorded_kernel(self, entry: Any) -> tuple[Any, Any]:
        spec = entry.spec  # a fresh copy, the entry's public view (the Triton backend's too)
        args = spec["args"]
        key = RawKernel.CompileKey(
            entry.kernel, args["index"], args["dtype"], spec["options"]["num_warps"]
        )
        return self._kernel, key


def clear_executors() -> None:
    ScaleKernel.clear_executors()
    TunedKernel.clear_executors()
    RawKernel.clear_executors()


def build(n: int, shape: str) -> warmkit.WarmupRegistry:
    registry = warmkit.WarmupRegistry()
    kernel = TunedKernel() if shape == "tuned" else ScaleKernel()
    if shape in ("declared", "tuned"):
        for start in range(0, n, PER_REGISTRATION):
            registry.add(kernel, index=warmkit.IntRange(start, min(n, start + PER_REGISTRATION)))
    elif shape == "recorded":
        for i in range(n):
            registry.add(kernel, index=i, block=128, dtype="float16")
    elif shape == "raw":  # raw functions' specializations, as the Triton backend records them
        from warmkit._registry.recorded import RecordedEntry

        for i in range(n):
            registry.add_recorded(
                RecordedEntry.make(
                    backend="scale",
                    kind="raw",
                    kernel="benchmarks.scale:raw_fn",
                    name="raw_fn",
                    spec={"args": {"index": i, "dtype": "float16"}, "options": {"num_warps": 4}},
                )
            )
    else:  # "replayed": the manifest's `recorded` section, as `warmkit record` writes it
        from warmkit._plugin.discovery import kernel_ref
        from warmkit._registry.recorded import RecordedEntry, encode_key

        ref = kernel_ref(ScaleKernel)
        for i in range(n):
            key = ScaleKernel.CompileKey(i, 128, "float16")
            registry.add_recorded(
                RecordedEntry.make(
                    backend=None,
                    kind="key",
                    kernel=ref,
                    name=ScaleKernel.name,
                    spec={"key": encode_key(key)},
                )
            )
    return registry


_collecting = [0.0, 0.0]  # [seconds the collector ran, when the running collection started]


def _gc_clock(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _collecting[1] = time.perf_counter()
    else:
        _collecting[0] += time.perf_counter() - _collecting[1]


def pipeline(path: Path, config: warmkit.WarmupConfig) -> tuple[dict[str, float], int]:
    """load -> warmup (plans inside) -> report; seconds per phase (and the collector's seconds,
    the minor page faults) and the number of keys."""
    clear_executors()
    _collecting[0] = 0.0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    gc.callbacks.append(_gc_clock)
    c0 = time.process_time()
    t0 = time.perf_counter()
    registry = warmkit.WarmupRegistry.load(path)
    t1 = time.perf_counter()
    with (
        open(os.devnull, "w") as sink,
        contextlib.redirect_stderr(sink),
        backend_override("scale", ScaleBackend()),
    ):
        report = warmkit.warmup(config, registry)
    t2 = time.perf_counter()
    report.table()
    report.to_json()
    t3 = time.perf_counter()
    cpu = time.process_time() - c0  # all threads: on a loaded shared box, wall time is not ours
    gc.callbacks.remove(_gc_clock)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    phases = {"load": t1 - t0, "warmup": t2 - t1, "report": t3 - t2, "cpu": cpu}
    phases |= {"gc": _collecting[0], "faults": faults}
    # every key compiled, and a tuned kernel's keys report their tuning (the path measured)
    tuned = (e.tuning == "stored" for e in report.entries if e.kernel == TunedKernel.name)
    assert report.ok and all(tuned), report.table()
    return phases, len(report.entries)


PHASES = ("register", "save", "load", "plan", "warmup", "report", "total", "cpu", "gc")


def sample(n: int, shape: str, path: Path, config: warmkit.WarmupConfig) -> dict[str, float]:
    """One run of one row: each phase's seconds, and the minor page faults per key."""
    gc.collect()
    t0 = time.perf_counter()
    registry = build(n, shape)
    t1 = time.perf_counter()
    registry.save(path)
    t2 = time.perf_counter()
    keys = sum(len(k) for k in registry.plan().values())
    with backend_override("scale", ScaleBackend()):  # planning a recorded section
        keys += len(resolve_recorded(registry.recorded()))
    t3 = time.perf_counter()
    assert keys == n, f"{shape}: planned {keys} keys, expected {n}"
    del registry
    gc.collect()
    phases, entries = pipeline(path, config)
    assert entries == n
    phases |= {"register": t1 - t0, "save": t2 - t1, "plan": t3 - t2}
    phases["faults"] /= n
    # what a serving engine pays at startup: load the manifest, warm up, report
    phases["total"] = phases["load"] + phases["warmup"] + phases["report"]
    return phases


def measure(rows: list[tuple[str, int]], runs: int, tmp: Path) -> list[dict[str, Any]]:
    """Each row's phases, medians over ``runs``; the rows take turns run by run.

    Round-robin, not one row's runs back to back: a slower minute of a shared
    host then lands on every row alike instead of on the row it happened in.
    """
    config = warmkit.WarmupConfig(monitor="off", progress="on", on_error="collect")
    samples: dict[tuple[str, int], list[dict[str, float]]] = {row: [] for row in rows}
    for r in range(runs):
        t0 = time.perf_counter()
        for shape, n in rows:
            samples[shape, n].append(sample(n, shape, tmp / f"{shape}-{n}.json", config))
        print(
            f"  run {r + 1}/{runs}: {len(rows)} rows in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    results = []
    for shape, n in rows:
        path = tmp / f"{shape}-{n}.json"
        gc.collect()
        clear_executors()
        tracemalloc.start()
        pipeline(path, config)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        clear_executors()
        med = {k: stats([r[k] for r in samples[shape, n]]) for k in PHASES}
        results.append(
            {
                "keys": n,
                "shape": shape,
                "manifest_bytes": path.stat().st_size,
                "seconds": med,
                "us_per_key": {k: s["median"] / n * 1e6 for k, s in med.items()},
                "faults_per_key": stats([r["faults"] for r in samples[shape, n]])["median"],
                "peak_bytes": peak,
                "bytes_per_key": peak / n,
            }
        )
    return results


def plan_only(n: int, runs: int) -> dict[str, Any]:
    registry = build(n, "declared")
    samples = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        keys = sum(len(k) for k in registry.plan().values())
        samples.append(time.perf_counter() - t0)
        assert keys == n
    s = stats(samples)
    return {"keys": n, "seconds": s, "us_per_key": s["median"] / n * 1e6}


def instructions(shape: str, sizes: list[int], jobs: int | None, tmp: Path) -> dict[str, Any]:
    """Instructions per key of load + warmup + report: callgrind at two sizes, the difference."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit(
            "scale.py --instructions: valgrind is not installed (apt install valgrind)"
        )
    counts = []
    for n in sizes:
        path = tmp / f"{shape}-{n}.json"
        build(n, shape).save(path)
        cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
        cmd += [__file__, "--pipeline", str(path), "--jobs", str(jobs or 0)]
        # a fixed hash seed: with a random one, dict and set probes differ from run to run
        env = os.environ | {"PYTHONHASHSEED": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode != 0 or found is None:
            raise SystemExit(f"scale.py: callgrind of {shape} {n} failed:\n{proc.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    per_key = (counts[1] - counts[0]) / (sizes[1] - sizes[0])
    return {
        "shape": shape,
        "sizes": sizes,
        "jobs": jobs,
        "instructions": counts,
        "per_key": per_key,
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--keys", default="10,1000,10000,100000", help="comma-separated key counts")
    p.add_argument("--plan-only", type=int, default=1_000_000, help="keys for planning alone")
    p.add_argument("--shapes", default="declared,tuned,recorded,replayed,raw")
    p.add_argument(
        "--instructions",
        metavar="N1,N2",
        help="count instructions per key under valgrind (two sizes) instead of timing",
    )
    p.add_argument(
        "--jobs", type=int, default=0, help="WarmupConfig.jobs for --instructions (0: auto)"
    )
    p.add_argument("--pipeline", help=argparse.SUPPRESS)  # a callgrind child: one pipeline
    args = p.parse_args()
    if args.pipeline:
        jobs = args.jobs or None
        # no progress bar: it redraws by the clock, and under callgrind's slowdown a key can
        # take over 1 ms (counted at once), so with it the count would follow the box's load
        config = warmkit.WarmupConfig(monitor="off", progress="off", on_error="collect", jobs=jobs)
        pipeline(Path(args.pipeline), config)
        return
    if args.instructions:
        sizes = [int(x) for x in args.instructions.split(",")]
        if len(sizes) != 2 or not 0 < sizes[0] < sizes[1]:
            p.error(f"--instructions {args.instructions}: two key counts, the smaller first")
        if args.tiny:
            sizes = [20, 40]
        with tempfile.TemporaryDirectory(prefix="warmkit-scale-") as tmp:
            counts = [
                instructions(shape, sizes, args.jobs or None, Path(tmp))
                for shape in args.shapes.split(",")
            ]
        text = "\n".join(
            f"{c['shape']:<9} {c['per_key']:>10,.0f} instructions/key (callgrind, jobs="
            f"{c['jobs'] or 'auto'}, keys {sizes[0]:,} -> {sizes[1]:,})"
            for c in counts
        )
        emit("B10-instructions", {"counts": counts}, args.out, text)
        return
    sizes = [int(x) for x in args.keys.split(",")]
    runs = max(args.runs, 5)
    plan_n = args.plan_only
    if args.tiny:
        sizes, runs, plan_n = [10, 200], 2, 2000
    shapes = args.shapes.split(",")
    rows, results = [], {"curve": [], "plan_only": None}
    with tempfile.TemporaryDirectory(prefix="warmkit-scale-") as tmp:
        curve = measure([(shape, n) for shape in shapes for n in sizes], runs, Path(tmp))
    for r in curve:
        results["curve"].append(r)
        us = r["us_per_key"]
        rows.append(
            (
                r["shape"],
                f"{r['keys']:,}",
                *(f"{us[k]:.1f}" for k in ("register", "save", "load", "plan", "warmup")),
                f"{us['report']:.1f}",
                f"{us['total']:.1f}",
                f"{us['cpu']:.1f}",
                f"{us['gc']:.2f}",
                f"{r['faults_per_key']:.2f}",
                f"{r['seconds']['load']['median']:.3f}",
                f"{r['bytes_per_key']:.0f}",
            )
        )
    if plan_n:
        results["plan_only"] = plan_only(plan_n, runs)
    results["goals"] = {
        "us_per_key": GOAL_US_PER_KEY,
        "bytes_per_key": GOAL_BYTES_PER_KEY,
        "recorded_100k_load_s": GOAL_RECORDED_LOAD_S,
    }
    head = (
        "B10 manifest",
        "keys",
        "register",
        "save",
        "load",
        "plan",
        "warmup",
        "report",
        "total us/key",
        "CPU us/key",
        "gc us/key",
        "faults/key",
        "load s",
        "peak B/key",
    )
    text = table(rows, head)
    text += (
        "\nus per key, medians of "
        f"{runs} runs; total = load + warmup (plans inside) + report (wall); CPU = its "
        "process time, all threads; gc = the collector's time, "
        "inside total; faults = minor page faults; "
        f"goals: total <= {GOAL_US_PER_KEY:.0f} us/key flat from 1k to 100k, peak <= "
        f"{GOAL_BYTES_PER_KEY} B/key, a 100k recorded manifest loads in <= {GOAL_RECORDED_LOAD_S} s"
    )
    if results["plan_only"]:
        po = results["plan_only"]
        text += (
            f"\nplanning alone, {po['keys']:,} keys: {po['seconds']['median']:.3f} s "
            f"({po['us_per_key']:.2f} us/key)"
        )
    emit("B10-scale", results, args.out, text)


if __name__ == "__main__":
    # Run as the module `scale`, not `__main__`: a manifest may only name kernels that another
    # process can import (WarmupRegistry.save refuses __main__'s).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scale

    scale.main()
