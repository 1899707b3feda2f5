"""What one warm key costs: 48 real Triton keys warmed ahead of time, then again in fresh processes.

    python benchmarks/warm_key.py [--runs 5] [--target cuda:90] [--keys 48] [--out warm_key.json]
                                  [--profile DIR] [--compare TREE] [--tiny]

Issue 30's CPU-box goal: a warm key costs <= 2 ms in the default config and
<= 4 ms with ``jobs=1``. The workload is one small elementwise kernel with
48 distinct Triton cache entries (block size x warps x dtype). One cold
warmup (ahead of time for ``--target``) fills a fresh ``TRITON_CACHE_DIR``;
then, ``--runs`` times, alternating the two configurations (A/B, so a busy
minute of a shared host hits both), a fresh process (``--child``) does what
an engine does (``import torch``, ``warmkit.prepare(config)``, the
manifest load, then ``warmkit.warmup``) and reports:

* ``per_key_ms``: the warmup's seconds over its keys (everything the warmup
  waits for, the one-time setup it joins included): the goal's number;
* ``key_ms``: the median of the report's per-key seconds (the steady cost);
* the statuses (all ``cached``) and Triton's compile-listener counts (0
  compiles).

``default`` is ``WarmupConfig()`` with nothing set (jobs = the CPU count);
``jobs=1`` sets ``jobs=1``. ``--profile DIR`` writes a cProfile of one
warm restart of each configuration. ``--compare TREE``: the same rows for
another checkout of this repository (e.g. ``git archive <commit> | tar -x -C
TREE``), its packages first on ``PYTHONPATH``, taking turns with this one's
run by run on the same cache. ``--tiny``: 4 keys, one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep

import warmkit

HERE = Path(__file__).resolve().parent
MARK = "WARM-KEY-CHILD "
GOALS_MS = {"default": 2.0, "jobs=1": 4.0}
CONFIGS = {"default": None, "jobs=1": 1}


@triton.jit
def scaled_add_kernel(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x + offs, mask=mask)
    b = tl.load(y + offs, mask=mask)
    tl.store(out + offs, a * alpha + b, mask=mask)


class ScaledAdd(TritonKernel):
    """out = alpha * x + y; one Triton cache entry per (dtype, block, warps)."""

    fn = scaled_add_kernel

    @attrs.frozen
    class CompileKey:
        dtype: str
        block: int
        num_warps: int

    def dispatch(self, *, dtype: str = "float32", block: int = 1024, num_warps: int = 4) -> Any:
        return self.CompileKey(dtype, block, num_warps)

    def warmup_args(self, key: Any) -> Any:
        n = specialization_rep(4096)
        x, y, o = (WarmupTensor(key.dtype, (n,)) for _ in range(3))
        return (x, y, o, n, 1.5), {"BLOCK": key.block}

    def launch_options(self, key: Any) -> Any:
        return {"num_warps": key.num_warps}


def space(keys: int) -> dict[str, list[Any]]:
    """``keys`` distinct keys (4, 12, 24 or 48)."""
    dtypes = ["float32", "float16", "bfloat16"]
    blocks = [128, 256, 512, 1024]
    warps = [1, 2, 4, 8]
    for nd in (1, 2, 3):
        for nb in range(1, 5):
            for nw in range(1, 5):
                if nd * nb * nw == keys:
                    return {"dtype": dtypes[:nd], "block": blocks[:nb], "num_warps": warps[:nw]}
    raise SystemExit(
        f"warm_key.py: --keys {keys} is not a product of <=3 dtypes, 4 blocks, 4 warps"
    )


def write_manifest(path: Path, keys: int) -> Path:
    from warm_key import ScaledAdd as Named  # the manifest names warm_key:ScaledAdd

    reg = warmkit.WarmupRegistry()
    reg.add(Named, **space(keys))
    return reg.save(path)


# -- the child: one warmup in a fresh process ------------------------------------------------


def child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="warm_key.py --child")
    p.add_argument("manifest")
    p.add_argument("--target", required=True)
    p.add_argument("--jobs", type=int, default=0, help="0: the default (unset)")
    a = p.parse_args(argv)
    config = warmkit.WarmupConfig(
        target=a.target, jobs=a.jobs or None, progress="off", monitor="off", on_error="collect"
    )
    try:
        # A serving process has torch loaded before warming up; imported before prepare() so
        # that a checkout without warmkit_triton._setup._torch_settled (--compare) does not race
        # the setup thread's import of it.
        import torch  # noqa: F401
    except ImportError:
        pass
    warmkit.prepare(config)  # an engine's first warmkit call (docs/performance.md)
    from triton import knobs

    registry = warmkit.WarmupRegistry.load(a.manifest)
    seen: list[bool] = []
    knobs.compilation.listener = lambda **kw: seen.append(bool(kw["cache_hit"]))
    profile_to = os.environ.get("WARM_KEY_PROFILE")
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    report = warmkit.warmup(config, registry)
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        Path(profile_to).write_text(text.getvalue())
    out = {
        "warmup_s": report.seconds,
        "keys": len(report.entries),
        "statuses": dict(Counter(e.status for e in report.entries)),
        "errors": [e.error for e in report.entries if e.error][:3],
        "entry_s": [e.seconds for e in report.entries],
        "compiles": seen.count(False),
        "disk_hits": seen.count(True),
        "jobs": report.jobs,
    }
    print(MARK + json.dumps(out), flush=True)
    return 0 if report.ok else 1


def run_child(manifest: Path, target: str, jobs: int | None, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(manifest)]
    cmd += ["--target", target, "--jobs", str(jobs or 0)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"warm_key.py: child warmup failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return json.loads(lines[-1][len(MARK) :])


# -- the parent ------------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--keys", type=int, default=48)
    p.add_argument("--target", default="cuda:90")
    p.add_argument("--profile", help="write a cProfile of one warm restart per config here")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--compare", help="also run another checkout of this repository (A/B)")
    p.add_argument("--tiny", action="store_true", help="4 keys, one run (a smoke run)")
    a = p.parse_args()
    keys, runs = (4, 1) if a.tiny else (a.keys, a.runs)
    with tempfile.TemporaryDirectory(prefix="warm-key-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
        env["TRITON_CACHE_DIR"] = str(root / "triton")
        env["XDG_CACHE_HOME"] = str(root / "xdg")
        sys.path.insert(0, str(HERE))
        manifest = write_manifest(root / "warm_key.json", keys)
        t0 = time.perf_counter()
        cold = run_child(manifest, a.target, 1, env)
        print(
            f"cold: {cold['keys']} keys, {cold['compiles']} compiles, "
            f"{cold['warmup_s']:.2f} s ({time.perf_counter() - t0:.1f} s with the process)",
            flush=True,
        )
        trees = {"": env}
        if a.compare:
            trees["base "] = _tree_env(env, Path(a.compare))
        rows = [(t, c) for t in trees for c in CONFIGS]
        samples: dict[str, list[dict[str, Any]]] = {t + c: [] for t, c in rows}
        for run in range(runs):
            order = rows if run % 2 == 0 else list(reversed(rows))
            for tree, config in order:
                name = tree + config
                child_env = dict(trees[tree])
                if a.profile and run == 0:
                    Path(a.profile).mkdir(parents=True, exist_ok=True)
                    tag = name.replace("=", "")
                    child_env["WARM_KEY_PROFILE"] = str(Path(a.profile) / f"warm-{tag}.txt")
                res = run_child(manifest, a.target, CONFIGS[config], child_env)
                if a.profile and run == 0:
                    continue  # a profiled run is slower: not a sample
                samples[name].append(res)
                print(
                    f"run {run} {name}: {1000 * res['warmup_s'] / res['keys']:.2f} ms/key "
                    f"({res['statuses']}, {res['compiles']} compiles)",
                    flush=True,
                )
    from _common import emit

    results = {name: summary(rows, keys) for name, rows in samples.items() if rows}
    emit(
        "warm_key",
        {"target": a.target, "keys": keys, **results},
        a.out,
        render(results, keys, a.target),
    )
    return 0


def _tree_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    """``env`` with ``tree``'s core and plugins first on ``PYTHONPATH`` (its benchmarks too)."""
    roots = [
        tree / "benchmarks",
        tree,
        *sorted(p for p in (tree / "plugins").iterdir() if p.is_dir()),
    ]
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join([*(str(r) for r in roots), env["PYTHONPATH"]])
    return out


def summary(rows: list[dict[str, Any]], keys: int) -> dict[str, Any]:
    per_key = [1000 * r["warmup_s"] / r["keys"] for r in rows]
    steady = [1000 * statistics.median(r["entry_s"]) for r in rows]
    return {
        "per_key_ms": per_key,
        "per_key_ms_median": statistics.median(per_key),
        "key_ms_median": statistics.median(steady),
        "compiles": [r["compiles"] for r in rows],
        "statuses": rows[-1]["statuses"],
        "jobs": rows[-1]["jobs"],
    }


def render(results: dict[str, Any], keys: int, target: str) -> str:
    lines = [
        (
            f"| config ({keys} warm keys, {target}) | ms per key, median (min-max) "
            "| median key's own ms | compiles | goal |"
        ),
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        pk = r["per_key_ms"]
        lines.append(
            f"| {name} (jobs={r['jobs']}) | {r['per_key_ms_median']:.2f} ({min(pk):.2f}-{max(pk):.2f}) "
            f"| {r['key_ms_median']:.2f} | {max(r['compiles'])} "
            f"| <= {GOALS_MS[name.split()[-1]]:g} ms |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
