"""Shared helpers for the benchmark scripts: timing statistics, machine facts, output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any


def stats(samples: Sequence[float]) -> dict[str, float]:
    """Median, min and max of a list of samples, plus how many there were."""
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "runs": len(samples),
    }


def machine() -> dict[str, Any]:
    """The facts a reader needs to compare numbers: host, CPUs, Python, versions."""
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for mod in ("warmkit", "triton", "torch"):
        # from the installed metadata: importing torch only to read its version cost every
        # benchmark's parent 1.5 s on the CPU box (its children are what is measured)
        try:
            info[mod] = metadata.version(mod)
        except metadata.PackageNotFoundError:  # a missing package is a fact, not an error
            info[mod] = None
    from warmkit._plugin.contract import no_gpu_device  # here: "X alone" children import no warmkit

    info["gpu"] = _gpu_name() if "torch" in sys.modules or not no_gpu_device() else None
    return info


def _gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 -- no torch: no GPU to name
        return None


def marked_child(cmd: list[str], env: dict[str, str], mark: str, name: str) -> dict[str, Any]:
    """Run a benchmark's child process; its result is the JSON after ``mark`` on its last such line.

    Raises:
        SystemExit: the child failed or printed no result; the message names it (``name``)
            and ends with its output.
    """
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(mark)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{name} child failed ({proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip
    return json.loads(lines[-1][len(mark) :])


def hit_args(description: str, rows: Sequence[str]) -> argparse.Namespace:
    """The DSL hit scripts' arguments (``parser``'s, ``--target``, ``--profile``, the hidden ``--child``).

    Exits with a usage error for ``--runs`` under 5 in the parent, except with ``--tiny``.
    """
    ap = parser(description)
    ap.add_argument("--target", default="cuda:90", help="the AOT target (default cuda:90: sm_90a)")
    ap.add_argument("--profile", help="write a cProfile of one warmkit jobs=1 cached-key process")
    ap.add_argument("--child", choices=list(rows), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.child and a.runs < 5 and not a.tiny:
        ap.error("--runs must be >= 5 (medians of fewer runs are noise); --tiny for a smoke run")
    return a


def hit_child(
    script: str, row: str, a: argparse.Namespace, env: dict[str, str], mark: str
) -> dict[str, Any]:
    """One fresh process of a DSL hit script (``script``) for ``row``, with ``hit_args``' ``a``."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", row, "--target", a.target]
    return marked_child(cmd + ["--tiny"] * a.tiny, env, mark, f"{Path(script).name}: {row}")


def hit_summary(rows: list[dict[str, Any]], keys: int) -> dict[str, Any]:
    """What the DSL hit scripts report of a row's samples (``timed_warmup``'s, plus ``import_s``)."""
    return {
        "per_key_ms": stats([1000 * r["total_s"] / keys for r in rows]),
        "key_ms": stats([1000 * statistics.median(r["entry_s"]) for r in rows]),
        "import_s": stats([r["import_s"] for r in rows]),
        "compiles": [r["compiles"] for r in rows],
        "samples": rows,
    }


def timed_warmup(registry: Any, target: str, jobs: int, profile_to: str | None) -> dict[str, Any]:
    """A child's AOT ``warmkit.warmup`` of ``registry`` (``jobs`` 0: the default), as facts.

    ``profile_to``: also write a cProfile (cumulative; warmkit's functions, then all) there.
    """
    import warmkit

    config = warmkit.WarmupConfig(target=target, jobs=jobs or None, progress="off", monitor="off")
    if profile_to:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        report = profiler.runcall(warmkit.warmup, config, registry)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats("warmkit", 40)
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
        Path(profile_to).write_text(text.getvalue())
    else:
        report = warmkit.warmup(config, registry)
    statuses = [e.status for e in report.entries]
    return {
        "total_s": report.seconds,
        "entry_s": [e.seconds for e in report.entries],
        "statuses": statuses,
        "compiles": len(statuses) - statuses.count("cached"),
        "jobs": report.jobs,
    }


def tilelang_program() -> Any:
    """``warmkit_tilelang``'s GEMM program module, loaded from its file: TileLang alone.

    Importing ``warmkit_tilelang._gemm_program`` would import the package, and with it
    warmkit: a row of TileLang alone must not. ``find_spec`` finds the package and runs
    nothing of it.
    """
    import importlib.util

    spec = importlib.util.find_spec("warmkit_tilelang")
    path = Path(next(iter(spec.submodule_search_locations))) / "_gemm_program.py"
    prog_spec = importlib.util.spec_from_file_location("benchmarks_tilelang_gemm", path)
    prog = importlib.util.module_from_spec(prog_spec)
    prog_spec.loader.exec_module(prog)
    return prog


#: ``TiledGemm``'s keys (m, n, k) in the DSL benchmarks: fp16; its dispatch picks block_m 64
#: for m <= 64, else 128.
TILED_GEMM_SHAPES = [(64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096), (512, 4096, 4096)]


def tiled_gemm_registry(shapes: Sequence[tuple[int, int, int]]) -> Any:
    """The registration an engine makes for ``TiledGemm`` at ``shapes`` (imports warmkit)."""
    from warmkit_tilelang import TiledGemm

    import warmkit

    reg = warmkit.WarmupRegistry()
    for m, n, k in shapes:
        reg.add(TiledGemm, m=m, n=n, k=k)
    return reg


def tiled_gemm_args(m: int, n: int, k: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``TiledGemm.dispatch`` and ``compile_args`` for fp16, spelled out: the same key, no warmkit."""
    return (m, n, k, 64 if m <= 64 else 128, 128, 32, 3, 128), {"dtype": "float16"}


def take_turns(
    rows: Sequence[str],
    runs: int,
    run_row: Callable[[str], dict[str, Any]],
    keys: int,
    profile: Callable[[], Any] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``runs`` rounds of ``run_row(row)`` (a child's facts) per row, the rows in turn.

    Every other round is reversed, so that a busy minute of a shared host lands on
    every row. ``profile``, if given, runs once before the first round: not a sample.
    """
    samples: dict[str, list[dict[str, Any]]] = {row: [] for row in rows}
    for run in range(runs):
        if profile is not None and run == 0:
            profile()
        for row in rows if run % 2 == 0 else list(rows)[::-1]:
            res = run_row(row)
            samples[row].append(res)
            print(f"run {run} {row}: {1000 * res['total_s'] / keys:.2f} ms/key, "
                  f"{res['compiles']} compiles, import {res['import_s']:.2f} s", flush=True)  # fmt: skip
    return samples


def snapshot(root: Path) -> dict[str, int]:
    """Every path under ``root`` and its mtime: equal snapshots, no file written in between."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (for tests)")
    p.add_argument("--runs", type=int, default=5, help="repetitions per measurement (>= 5)")
    return p


def table(rows: Sequence[Sequence[Any]], head: Sequence[str]) -> str:
    cells = [list(map(str, head))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit(name: str, results: dict[str, Any], out: str | None, text: str) -> None:
    """Print the table, and write ``{benchmark, machine, command, results}`` as JSON if asked."""
    print(text)
    if out:
        doc = {
            "benchmark": name,
            "machine": machine(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "results": results,
        }
        Path(out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"wrote {out}")
