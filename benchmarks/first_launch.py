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

Triton's hook events (in-memory misses, compiles/disk hits, module loads)
during the timed launches are counted; after a warmkit warmup they must be 0.
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


def child(mode: str, rotate: int, iters: int) -> int:
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

    t0 = time.perf_counter()
    if mode == "warmkit":
        report = warmkit.warmup(
            warmkit.WarmupConfig(progress="off", monitor="off", target=None), registry
        )
        assert report.ok, report.table()
    else:
        for key in keys:
            args, kwargs = kernel.warmup_args(key)
            fn.warmup(*args, grid=(1,), **kwargs, **kernel.launch_options(key))
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
        if mode == "warmkit":
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

    events: list[str] = []
    knobs.runtime.jit_cache_hook = lambda **kw: events.append("miss") and None
    knobs.compilation.listener = lambda **kw: events.append(
        "disk_hit" if kw.get("cache_hit") else "compile"
    )
    knobs.runtime.kernel_load_start_hook.add(lambda *a, **k: events.append("load"))

    def timed(call: Any) -> float:
        torch.cuda.synchronize()
        s = time.perf_counter()
        call()
        torch.cuda.synchronize()
        return (time.perf_counter() - s) * 1e6

    rotate %= len(keys)
    order = keys[rotate:] + keys[:rotate]
    out = []
    for i, key in enumerate(order):
        call = launcher(key)
        before = len(events)
        first = timed(call)
        first_events = events[before:]
        steady = statistics.median(timed(call) for _ in range(iters))
        out.append(
            {
                "key": repr(key),
                "position": i,
                "first_us": first,
                "steady_us": steady,
                "ratio": first / steady,
                "events": first_events,
            }
        )
    print(MARK + json.dumps({"mode": mode, "warmup_s": warmup_s, "keys": out}), flush=True)
    return 0


# -- the parent --------------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    sys.path.insert(0, str(HERE))
    from _common import emit, parser, stats, table

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200, help="steady-state launches per key")
    args = p.parse_args()
    if not _gpu():
        emit("B4-first-launch", {"skipped": NEEDS_GPU, "goal_ratio": GOAL}, args.out, NEEDS_GPU)
        return 0
    runs = 1 if args.tiny else max(args.runs, 5)
    iters = 20 if args.tiny else args.iters
    per: dict[str, dict[str, list[dict[str, Any]]]] = {"warmkit": {}, "compile-only": {}}
    warmups: dict[str, list[float]] = {m: [] for m in per}
    for r in range(runs):
        for mode, samples_by_key in per.items():
            with tempfile.TemporaryDirectory(prefix="warmkit-b4-") as cache:
                env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")} | {
                    "TRITON_CACHE_DIR": cache
                }
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
    rows = []
    for mode, keys in per.items():
        results["modes"][mode] = {"warmup_s": stats(warmups[mode]), "keys": {}}
        for i, (key, samples) in enumerate(keys.items()):
            ratio = stats([s["ratio"] for s in samples])
            first = stats([s["first_us"] for s in samples])
            steady = stats([s["steady_us"] for s in samples])
            events = sorted({e for s in samples for e in s["events"]})
            results["modes"][mode]["keys"][key] = {
                "first_us": first,
                "steady_us": steady,
                "ratio": ratio,
                "events_at_first_launch": events,
                "first_in_process_ratio": [s["ratio"] for s in samples if s["position"] == 0],
            }
            rows.append(
                (
                    f"{mode} key {i}",
                    f"{first['median']:.1f} ({first['min']:.1f}-{first['max']:.1f})",
                    f"{steady['median']:.1f}",
                    f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})",
                    ",".join(events) or "none",
                    "yes" if ratio["median"] <= GOAL else "NO",
                )
            )
    text = table(
        rows,
        ("B4 warmup / key", "first us", "steady us", "first/steady", "Triton events", "<= 1.5x"),
    )
    text += "\nkeys: " + "; ".join(f"{i}: {k}" for i, k in enumerate(per["warmkit"]))
    emit("B4-first-launch", results, args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
