"""CuTe DSL alone against warmkit's cached key, side by side, in fresh processes.

    python benchmarks/cutedsl_hit.py [--runs 5] [--target cuda:90] [--out cutedsl_hit.json]
                                     [--profile FILE] [--tiny]

Issue "warm-path": through warmkit, a cached CuTe DSL key costs <= 20 ms. The
workload is the plugin's ``VectorAdd`` (4 keys: n = 4096 and 65536 float16,
4096 float32, 65536 bfloat16; ``--tiny``: the first 2, one run), compiled ahead
of time for ``--target`` (sm_90a for cuda:90) on a host without a GPU.

CuTe DSL has no warm-cache hit of its own to compare with (nvidia-cutlass-dsl
4.8.1): ``cute.compile(...)`` never uses its file cache.
``cutlass/base_dsl/compiler.py`` ``CompileCallable._compile`` sets
``kwargs["compile_only"] = True`` and ``kwargs["no_cache"] = True``, so
``compile_backend.load_cache_from_path`` is never called and nothing is dumped.
That file cache (``CUTE_DSL_CACHE_DIR``, default
``$TMPDIR/$USER/cutlass_python_cache``; ``CUTE_DSL_DISABLE_FILE_CACHING``
default off) only serves the implicit path (calling the ``@cute.jit`` function
with real tensors), which needs a GPU. So a fresh process recompiles every key
(about 1.8 s for the first, one-time setup included, about 50 ms for each
further key here), and warmkit's plugin keeps its own export cache for that
reason (``warmkit_cutedsl/_backend.py``'s docstring). The bar is therefore the
flat 20 ms.

* ``cold``: one warmkit warmup (default jobs) fills warmkit's export cache, in a
  fresh ``CUTE_DSL_CACHE_DIR`` (its ``warmkit-exports``) per benchmark run;
* then ``--runs`` times, rows taking turns (reversed every other run, so a busy
  minute of a shared host hits every row), a fresh process per row:
  ``cutedsl``: CuTe DSL alone, warmkit never imported (the program module is
  loaded from its file with a stand-in for ``_cute_api``; the runtime library is
  preloaded the way ``_cute_api`` does it, needed on a host without a GPU):
  per key ``cute.compile(fn, <fake tensors>, options=...)`` exactly as
  ``_backend._build`` does, the options from ``_cute_api.compile_options(arch)``
  (computed by the parent); its check wraps
  ``cutlass.base_dsl.compile_backend.load_cache_from_path`` (must be called 0
  times) and counts ``CompilerBackend.compile`` (one real compile per key);
  ``warmkit``/``warmkit jobs=1``: ``warmkit.warmup(WarmupConfig(target=...))``
  of the same keys, default jobs and ``jobs=1``; every status must be ``cached``.

Each row's number is per key: the keys' total seconds over the keys (CuTe DSL:
the loop; warmkit: ``report.seconds``), imports excluded and reported apart
(``cutlass.cute`` and the program module; warmkit adds ``warmkit``,
``warmkit_cutedsl``). Every child runs without ``WARMKIT_*`` variables, with its
own cache directories; the parent also checks that no export file changed after
the cold warmup and that CuTe DSL alone dumped nothing into its own cache dir.
``--profile FILE``: a cProfile (cumulative) of one extra warmkit ``jobs=1``
process, not a sample.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MARK = "CUTEDSL-HIT-CHILD "
GOAL_MS = 20.0
KEYS = [(4096, "float16"), (65536, "float16"), (4096, "float32"), (65536, "bfloat16")]
TINY = KEYS[:2]
ROWS = {"cutedsl": None, "warmkit": 0, "warmkit jobs=1": 1}  # warmkit rows: jobs (0 = default)
LABEL = {"cutedsl": "CuTe DSL alone (cute.compile: no cache of its own, recompiles)"}


def _load_program() -> Any:
    """The plugin's ``_vector_add_program.py`` from its file, ``_cute_api`` replaced (no warmkit)."""
    pkg = importlib.import_module("nvidia_cutlass_dsl")  # _cute_api._preload_runtime, spelled out
    libs = sorted(glob.glob(os.path.join(pkg.__path__[0], "cu*", "lib", "libcute_dsl_runtime.so")))
    if not libs:
        raise SystemExit("cutedsl_hit.py: libcute_dsl_runtime.so not found")
    ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)
    spec = importlib.util.find_spec("warmkit_cutedsl")  # finds the package, runs nothing
    path = Path(next(iter(spec.submodule_search_locations))) / "_vector_add_program.py"
    stand_in = types.ModuleType("cutedsl_hit_pkg")
    stand_in.__path__ = []  # a package, so that "from . import _cute_api" resolves
    api = types.ModuleType("cutedsl_hit_pkg._cute_api")
    api.require_cute = lambda: importlib.import_module("cutlass.cute")
    stand_in._cute_api = api
    sys.modules.update({"cutedsl_hit_pkg": stand_in, "cutedsl_hit_pkg._cute_api": api})
    prog_spec = importlib.util.spec_from_file_location("cutedsl_hit_pkg._vector_add_program", path)
    prog = importlib.util.module_from_spec(prog_spec)
    sys.modules[prog_spec.name] = prog
    prog_spec.loader.exec_module(prog)
    return prog


def _cute_child(keys: list[tuple[int, str]], options: str) -> dict[str, Any]:
    """CuTe DSL alone: ``cute.compile`` per key, as ``_backend._build`` calls it."""
    t0 = time.perf_counter()
    prog = _load_program()
    import cutlass
    from cutlass import cute
    from cutlass.base_dsl import compile_backend
    from cutlass.cute.runtime import make_fake_compact_tensor

    import_s = time.perf_counter() - t0
    assert "warmkit" not in sys.modules, "CuTe DSL alone imported warmkit"
    numeric = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16,
               "float32": cutlass.Float32}  # fmt: skip
    lookups: list[bool] = []
    load = compile_backend.load_cache_from_path

    def counted_load(*args: Any, **kwargs: Any) -> Any:
        fn = load(*args, **kwargs)
        lookups.append(fn is not None)
        return fn

    compiles: list[int] = []
    backend_compile = compile_backend.CompilerBackend.compile

    def counted_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        compiles.append(1)
        return backend_compile(self, *args, **kwargs)

    compile_backend.load_cache_from_path = counted_load  # looked up as a module global
    compile_backend.CompilerBackend.compile = counted_compile
    entries = []
    t_all = time.perf_counter()
    for n, dtype in keys:  # VectorAdd.compile_args + _backend._build, spelled out
        t0 = time.perf_counter()
        t = make_fake_compact_tensor(numeric[dtype], (n,), assumed_align=16)
        compiled = cute.compile(prog.vector_add, t, t, t, n, options=options)
        entries.append({"s": time.perf_counter() - t0, "compiled": compiled is not None})
    total = time.perf_counter() - t_all
    return {
        "import_s": import_s,
        "total_s": total,
        "entry_s": [e["s"] for e in entries],
        "keys": entries,
        "compiles": len(compiles),
        "cache_lookups": len(lookups),
        "cache_hits": lookups.count(True),
        "warmkit_imported": "warmkit" in sys.modules,
    }


def _warmkit_child(keys: list[tuple[int, str]], target: str, jobs: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    from warmkit_cutedsl import VectorAdd, _cute_api

    import warmkit

    _cute_api.require_cute()  # imported by the engine before warmup, like CuTe's row
    import warmkit_cutedsl._vector_add_program  # noqa: F401

    import_s = time.perf_counter() - t0
    reg = warmkit.WarmupRegistry()
    for n, dtype in keys:
        reg.add(VectorAdd, n=n, dtype=dtype)
    from _common import timed_warmup

    return {
        "import_s": import_s,
        **timed_warmup(reg, target, jobs, os.environ.get("CUTEDSL_HIT_PROFILE")),
    }


def main() -> int:
    sys.path.insert(0, str(HERE))
    from _common import hit_args, hit_child, snapshot, take_turns

    a = hit_args(
        "CuTe DSL alone (no hit of its own) vs warmkit's cached key (fresh processes)", list(ROWS)
    )
    keys = TINY if a.tiny else KEYS
    if a.child:
        jobs = ROWS[a.child]
        out = (_cute_child(keys, os.environ["CUTEDSL_HIT_OPTIONS"]) if jobs is None
               else _warmkit_child(keys, a.target, jobs))  # fmt: skip
        print(MARK + json.dumps(out), flush=True)
        return 0
    from warmkit_cutedsl import _backend, _cute_api

    arch = _backend._arch(a.target)
    options = _cute_api.compile_options(arch)  # what _backend._build passes
    runs = 1 if a.tiny else a.runs
    with tempfile.TemporaryDirectory(prefix="cutedsl-hit-") as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
        base["CUTEDSL_HIT_OPTIONS"] = options
        base["HOME"] = str(Path(tmp) / "home")  # anything falling back to ~/.cache lands here
        cache = Path(tmp) / "warmkit-cute"  # warmkit's: <it>/warmkit-exports
        alone = Path(tmp) / "cute-alone"  # CuTe DSL alone's own file cache dir
        alone.mkdir()
        env_of = {row: {**base, "CUTE_DSL_CACHE_DIR": str(alone if row == "cutedsl" else cache)}
                  for row in ROWS}  # fmt: skip
        cold = hit_child(__file__, "warmkit", a, env_of["warmkit"], MARK)
        print(f"cold (warmkit, fills its export cache): {cold['compiles']} compiles, "
              f"{cold['total_s'] / len(keys):.2f} s per key, statuses {cold['statuses']}",
              flush=True)  # fmt: skip
        before = snapshot(cache)

        def profile() -> None:  # one extra warmkit jobs=1 process, not a sample
            profiled = {
                **env_of["warmkit jobs=1"],
                "CUTEDSL_HIT_PROFILE": str(Path(a.profile).resolve()),
            }
            hit_child(__file__, "warmkit jobs=1", a, profiled, MARK)

        samples = take_turns(
            list(ROWS), runs, lambda row: hit_child(__file__, row, a, env_of[row], MARK), len(keys),
            profile if a.profile else None,
        )  # fmt: skip
        unchanged = snapshot(cache) == before
        alone_files = sorted(str(p.relative_to(alone)) for p in alone.rglob("*"))
    from _common import emit

    results = {row: summary(rs, len(keys)) for row, rs in samples.items()}
    cute = samples["cutedsl"]
    statuses = [s for row in ROWS if row != "cutedsl" for r in samples[row] for s in r["statuses"]]
    checks = {
        "cutedsl_cache_lookups": [r["cache_lookups"] for r in cute],
        "cutedsl_every_key_compiled": all(r["compiles"] == len(keys) for r in cute),
        "cutedsl_warmkit_imported": any(r["warmkit_imported"] for r in cute),
        "cutedsl_cache_dir_files": alone_files,
        "warmkit_all_cached": all(s == "cached" for s in statuses),
        "cold_compiled": cold["compiles"] == len(keys),
        "export_cache_unchanged": unchanged,
    }
    goal = {
        "bar_ms": GOAL_MS,
        "bar_is": "CuTe DSL has no hit of its own to compare with, so the flat bar applies",
        "met": {r: results[r]["per_key_ms"]["median"] <= GOAL_MS for r in ROWS if r != "cutedsl"},
    }
    doc = {"target": a.target, "arch": arch, "options": options, "keys": keys, "cold": cold,
           "checks": checks, "goal": goal, **results}  # fmt: skip
    text = render(results, goal, checks, cute, a.target, len(keys))
    emit("cutedsl_hit", doc, a.out, text)
    bad = (any(checks["cutedsl_cache_lookups"]) or not checks["cutedsl_every_key_compiled"]
           or checks["cutedsl_warmkit_imported"] or not checks["warmkit_all_cached"]
           or not checks["cold_compiled"] or not unchanged)  # fmt: skip
    return 1 if bad else 0


def summary(rows: list[dict[str, Any]], keys: int) -> dict[str, Any]:
    from _common import hit_summary, stats

    out = hit_summary(rows, keys)
    if "keys" in rows[0]:  # CuTe DSL: the first key (one-time setup) and the rest apart
        out["first_key_ms"] = stats([1000 * r["entry_s"][0] for r in rows])
        out["further_key_ms"] = stats([1000 * statistics.median(r["entry_s"][1:]) for r in rows])
    return out


def render(results: dict[str, Any], goal: dict[str, Any], checks: dict[str, Any],
           cute: list[dict[str, Any]], target: str, keys: int) -> str:  # fmt: skip
    def mm(s: dict[str, float], f: str = ".2f") -> str:
        return f"{s['median']:{f}} ({s['min']:{f}}-{s['max']:{f}})"

    lines = [
        f"| row ({keys} VectorAdd keys, {target}) | ms per key, median (min-max) | median "
        + "key's own ms | import s, median (min-max) | compiles | goal |",
        "|---|---|---|---|---|---|",
    ]
    for row, r in results.items():
        mark = "" if row == "cutedsl" else ("met" if goal["met"][row] else "NOT met")
        lines.append(f"| {LABEL.get(row, row)} | {mm(r['per_key_ms'])} | {mm(r['key_ms'])} "
                     f"| {mm(r['import_s'])} | {max(r['compiles'])} | {mark} |")  # fmt: skip
    c = results["cutedsl"]
    lines += [
        "",
        f"goal: <= {goal['bar_ms']:.0f} ms per cached key ({goal['bar_is']}); runs: "
        + f"{c['per_key_ms']['runs']}",
        f"CuTe DSL alone: first key {mm(c['first_key_ms'])} ms (one-time setup included), "
        + f"further keys {mm(c['further_key_ms'])} ms; load_cache_from_path calls per run "
        + f"{checks['cutedsl_cache_lookups']}; files in its CUTE_DSL_CACHE_DIR: "
        + f"{len(checks['cutedsl_cache_dir_files'])}; warmkit imported: "
        + f"{checks['cutedsl_warmkit_imported']}",
        f"warmkit: every warm status cached: {checks['warmkit_all_cached']}; export cache "
        + f"unchanged by the warm runs: {checks['export_cache_unchanged']}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
