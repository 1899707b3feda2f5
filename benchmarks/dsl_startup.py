"""DSL backends on the GPU: cold compile per kernel, warm restart (B2), first call vs steady state, no warmup.

Each phase runs in a fresh process (``--phase``), the driver runs them in order:

* ``cold``: empty TileLang cache, device warmup of the TiledGemm keys, default
  config (the keys compile in parallel; per-key seconds);
* ``cold1``: the same with ``jobs=1``, into another empty cache (B2's baseline);
* ``warm``: the ``cold`` phase's cache, new process: warmup, default config (all
  disk hits), then the first real call of each key against the steady state
  (median of ``--steady`` calls);
* ``nowarm``: empty cache, no warmup: the first call of each shape (it compiles).

B2's protocol, as ``startup.py``'s: like an engine, each phase calls
``warmkit.prepare()`` first, has torch, its CUDA context and its kernels' modules
(here TileLang and the GEMM program) before it warms up, and times the warmup
alone; the imports and the CUDA start are timed apart (``import_s``,
``cuda_start_s``, ``program_import_s``). B2 is ``warm`` / ``cold1`` (goal <= 5 %);
``warm`` / ``cold`` is printed too.

Without a GPU (or with ``--tiny``) the ``cold``/``warm`` phases compile ahead of
time for ``cuda:90`` instead (the CPU build box's numbers) and make no calls.

Usage (on the H200): ``python3 benchmarks/dsl_startup.py --out dsl.json``.
Medians and ratios from one run; results go to docs/benchmarks.md.
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

HERE = Path(__file__).resolve().parent
TINY = [(64, 128, 64)]


def _first_and_steady(steady: int, shapes) -> list[dict]:
    import torch
    from warmkit_tilelang import TiledGemm

    gemm = TiledGemm()
    rows = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = gemm(a, b)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        times = []
        for _ in range(steady):
            t0 = time.perf_counter()
            gemm(a, b)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        err = (c.float() - a.float() @ b.float()).abs().max().item()
        rows.append(
            {"shape": [m, n, k], "first_s": first, "steady_s": statistics.median(times), "err": err}
        )
    return rows


def phase(name: str, steady: int, tiny: bool) -> dict:
    from _common import TILED_GEMM_SHAPES, tiled_gemm_registry

    t_import = time.perf_counter()
    from warmkit_tilelang import TiledGemm, TileLangBackend

    import warmkit

    gpu = TileLangBackend().default_target() is not None and not tiny
    shapes = TINY if tiny else TILED_GEMM_SHAPES
    target = None if gpu else "cuda:90"
    warmkit.prepare(warmkit.WarmupConfig(target=target, jobs=1))  # an engine's first call
    import torch

    out: dict = {"phase": name, "gpu": gpu, "import_s": time.perf_counter() - t_import}
    if gpu:
        t0 = time.perf_counter()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        out["cuda_start_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    TiledGemm.jit_function()  # the engine's kernels' modules: TileLang and the program
    out["program_import_s"] = time.perf_counter() - t0
    if name == "nowarm" and not gpu:
        return out | {"skipped": "no GPU: nothing to call"}
    if name != "nowarm":
        t0 = time.perf_counter()
        config = warmkit.WarmupConfig(
            progress="off", monitor="error", target=target, jobs=1 if name == "cold1" else None
        )
        report = warmkit.warmup(config, tiled_gemm_registry(shapes))
        out["warmup_s"] = time.perf_counter() - t0
        out["keys"] = [
            {"key": repr(e.key), "status": e.status, "seconds": e.seconds} for e in report.entries
        ]
        warmkit.monitor.clear()
    if gpu and name != "cold1":
        out["calls"] = _first_and_steady(steady, shapes)
        out["events_after_warmup"] = len(warmkit.monitor.events()) if name != "nowarm" else None
    return out


def main() -> None:
    sys.path.insert(0, str(HERE))
    from _common import emit, parser

    ap = parser("TileLang: cold compile, warm restart, first call vs steady, no warmup")
    ap.add_argument("--phase", choices=["cold", "cold1", "warm", "nowarm"])
    ap.add_argument("--steady", type=int, default=50)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.steady, args.tiny)))
        return
    results = []
    with (
        tempfile.TemporaryDirectory() as cache,
        tempfile.TemporaryDirectory() as serial,
        tempfile.TemporaryDirectory() as cold2,
    ):
        phases = [("cold", cache), ("cold1", serial), ("warm", cache)]
        phases += [] if args.tiny else [("nowarm", cold2)]
        for name, directory in phases:
            env = {**os.environ, "TILELANG_CACHE_DIR": directory}
            cmd = [sys.executable, __file__, "--phase", name, "--steady", str(args.steady)]
            proc = subprocess.run(
                cmd + (["--tiny"] if args.tiny else []),
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                sys.exit(proc.returncode)
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    lines = []
    for r in results:
        keys = ", ".join(f"{k['status']} {k['seconds']:.2f}s" for k in r.get("keys", []))
        calls = ", ".join(
            f"m={c['shape'][0]}: first {c['first_s'] * 1e3:.2f} ms, steady {c['steady_s'] * 1e3:.3f} ms"
            for c in r.get("calls", [])
        )
        cuda = f", CUDA start {r['cuda_start_s']:.2f}s" if "cuda_start_s" in r else ""
        lines.append(
            f"{r['phase']}: import {r['import_s']:.2f}s{cuda}, TileLang and program "
            f"{r['program_import_s']:.2f}s, warmup {r.get('warmup_s', 0):.3f}s "
            f"[{keys}] [{calls}] {r.get('skipped', '')}"
        )
    by = {r["phase"]: r for r in results}
    b2 = {
        "warm_over_cold_jobs1": by["warm"]["warmup_s"] / by["cold1"]["warmup_s"],
        "warm_over_cold": by["warm"]["warmup_s"] / by["cold"]["warmup_s"],
    }
    lines.append(
        f"B2 (goal <= 5 %): warm / cold jobs=1 {b2['warm_over_cold_jobs1']:.1%}; "
        f"warm / cold default config {b2['warm_over_cold']:.1%}"
    )
    emit("dsl_startup", {"tilelang": results, "b2": b2}, args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
