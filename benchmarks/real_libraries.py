"""Warm starts on real third-party Triton libraries, warmkit against Triton alone, side by side in one run.

Libraries (``--libs``, default ``fla,liger``):

* ``fla``: flash-linear-attention (``fla-core``), heavily autotuned, and it picks
  constexpr globals from the visible GPU at import: a gated delta rule prefill
  (``chunk_gated_delta_rule``, two lengths) then decode steps
  (``fused_recurrent_gated_delta_rule``) from its final state;
* ``liger``: Liger-Kernel's functional ops (RMSNorm, fused add+RMSNorm, RoPE,
  SwiGLU, GEGLU, LayerNorm, softmax, cross entropy, fused linear cross entropy)
  at two hidden sizes;
* ``tilelang``: TileLang, not Triton: a ``@tilelang.jit`` GEMM program (the one
  ``warmkit_tilelang.TiledGemm`` compiles; fp16, m = 64..512, n = k = 4096) called
  the way TileLang's users call it, ``tiled_gemm(m, n, k, ...)(a, b)``. Alone, each
  call is an in-process miss that TileLang's disk cache answers (``TILELANG_CACHE_DIR``);
  under ``warmkit run`` the warmup has put each kernel into that function's own
  in-process cache, so the calls find it. TileLang has no raw-kernel recording:
  its manifest is the engine's registration (``TiledGemm``, the four shapes),
  written by the driver where the Triton libraries are recorded. Its "Triton"
  rows below read "TileLang".

Per library, in one run and on one machine, fresh processes each:

1. Triton alone, empty cache (once: it primes the baseline's warm cache);
2. ``warmkit record`` into an empty cache (once: the recording; ``tilelang``: the
   registration saved as its manifest);
3. ``warmkit run -m`` replaying the recording into an empty cache (once: the
   warm cache of rows 5 and 6);
4. ``warmkit bundle build`` of the recording (once, on this host);

then ``--runs`` rounds, the rows taking turns so that a slow minute lands on each (every
other round in reverse order; each run's ``position`` in its round is in the JSON):

* **baseline**: Triton alone on its warm cache (``TRITON_CACHE_AUTOTUNING=1``);
* **warm restart**: ``warmkit run -m`` on its warm cache, default config;
* **warm restart, jobs=1**: the same with ``WARMKIT_JOBS=1``;
* **bundle**: an empty cache, ``warmkit bundle install`` (timed), then
  ``warmkit run -m`` (the row's time is install + the process).

With ``--compare SITE`` (another build of warmkit installed with every dependency by
``pip install --target SITE``; or ``SITE:REST``, PYTHONPATH's syntax, where ``SITE`` has the
other build of warmkit and its plugins alone and ``REST`` the libraries it runs with), one
more timed row takes turns with the others: the default warm restart with that
``PYTHONPATH``, on the same warm cache (the A/B of a change, in one run).

Each process prints its times from launch (the environment's
``REAL_LIBRARIES_LAUNCH``, set just before the command starts, so warmkit's
own start is counted). The ratio that matters is launch to the end of the
first pass of the workload, against the baseline's. Checks (exit 1, each
failure named): every process's outputs are bitwise equal to the first
baseline's, and every warmkit row after warmup sees 0 compiles, 0 autotune
benchmarks and 0 JIT events.

Needs a CUDA GPU and each library asked for (``fla-core``, ``liger-kernel``; ``tilelang``
and ``warmkit-tilelang``, whose wheels ``benchmarks/dsl_wheels.sh`` gathers)::

    python3 benchmarks/real_libraries.py --runs 5 --out out/real_libraries
    python3 benchmarks/real_libraries.py workload fla     # one process of a workload

Writes into ``--out``: each library's recording (``<lib>_run.json``: the
identity proof of ``identity_gpu.py`` builds ``fla_run.json`` on a CPU host),
a log per process, ``results.json`` and ``table.md``.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCH_ENV = "REAL_LIBRARIES_LAUNCH"
TIMEOUT_S = 400
HOOK_LINE = re.compile(
    r"warmed (\d+) key\(s\) of \S+ in ([0-9.]+)s \((\d+) compiled, (\d+) cached\)"
)


# -- the workloads (child processes) -----------------------------------------------------------


def _fla(torch):
    from fla.ops.gated_delta_rule import (
        chunk_gated_delta_rule,
        fused_recurrent_gated_delta_rule,
    )

    dev, dt = "cuda", torch.bfloat16
    h, d = 4, 128

    def inputs(t):
        q = torch.randn(1, t, h, d, device=dev, dtype=dt)
        k = torch.randn(1, t, h, d, device=dev, dtype=dt)
        v = torch.randn(1, t, h, d, device=dev, dtype=dt)
        g = torch.nn.functional.logsigmoid(torch.randn(1, t, h, device=dev, dtype=torch.float32))
        beta = torch.rand(1, t, h, device=dev, dtype=dt).sigmoid()
        return q, k, v, g, beta

    def once():
        outs = []
        state = None
        for t in (256, 1024):
            o, state = chunk_gated_delta_rule(
                *inputs(t), output_final_state=True, use_qk_l2norm_in_kernel=True
            )
            outs.append(o)
        for _ in range(4):  # decode steps from the prefill's state
            o, state = fused_recurrent_gated_delta_rule(
                *inputs(1), initial_state=state, output_final_state=True,
                use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
            outs += [o, state]
        return outs

    return once


def _liger(torch):
    from liger_kernel.transformers import functional as F

    dev, dt = "cuda", torch.bfloat16

    def once():
        outs = []
        for hidden in (1024, 4096):
            x = torch.randn(4, 128, hidden, device=dev, dtype=dt)
            w = torch.randn(hidden, device=dev, dtype=dt)
            b = torch.randn(hidden, device=dev, dtype=dt)
            outs.append(F.liger_rms_norm(x.clone(), w, 1e-6))
            outs += list(F.liger_fused_add_rms_norm(x.clone(), x.clone(), w, 1e-6))
            outs.append(F.liger_layer_norm(x, w, b, 1e-5))
            outs.append(F.liger_swiglu(x, x * 0.5))
            outs.append(F.liger_geglu(x, x * 0.5))
            outs.append(F.liger_softmax(x))
            heads, hd = hidden // 128, 128
            q = torch.randn(4, heads, 128, hd, device=dev, dtype=dt)
            k = torch.randn(4, heads // 2, 128, hd, device=dev, dtype=dt)
            cos = torch.randn(1, 128, hd, device=dev, dtype=dt)
            sin = torch.randn(1, 128, hd, device=dev, dtype=dt)
            outs += list(F.liger_rope(q, k, cos, sin))
            vocab = 8192
            logits = torch.randn(512, vocab, device=dev, dtype=torch.float32)
            target = torch.randint(0, vocab, (512,), device=dev)
            outs.append(F.liger_cross_entropy(logits, target))
            lin = torch.randn(vocab, hidden, device=dev, dtype=dt)
            outs.append(F.liger_fused_linear_cross_entropy(x.view(-1, hidden)[:512], lin, target))
        return [o if isinstance(o, torch.Tensor) else o[0] for o in outs]

    return once


def _tilelang(torch):
    from _common import TILED_GEMM_SHAPES, tiled_gemm_args, tilelang_program

    # Under `warmkit run` the warmup imported the program and filled its function's cache: the
    # calls must reach that very function. Alone, the same file is loaded without importing
    # warmkit_tilelang (whose package imports warmkit): TileLang alone, as its users run it.
    prog = sys.modules.get("warmkit_tilelang._gemm_program") or tilelang_program()
    tiled_gemm = prog.tiled_gemm

    def once():
        outs = []
        for m, n, k in TILED_GEMM_SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            b = torch.randn(k, n, device="cuda", dtype=torch.float16)
            args, kwargs = tiled_gemm_args(m, n, k)  # the key warmkit's warmup filled
            kernel = tiled_gemm(*args, **kwargs)
            outs.append(kernel(a, b))
        return outs

    return once


WORKLOADS = {"fla": _fla, "liger": _liger, "tilelang": _tilelang}


def _counters(lib: str):
    """Compiles that were not disk hits, and autotune benchmarks, from here on.

    Triton's come from its compilation listener; TileLang's from its disk lookup, which
    answers None before each real compile (``KernelCache._load_kernel_from_disk``).
    """
    from triton import knobs
    from triton.runtime import autotuner

    counts = {"compiles": 0, "benchmarks": 0}
    if lib == "tilelang":
        from tilelang.cache.kernel_cache import KernelCache

        load = KernelCache._load_kernel_from_disk  # warmkit's monitor may have wrapped it: chained

        def counted_load(self, *a, **kw):
            kernel = load(self, *a, **kw)
            counts["compiles"] += kernel is None
            return kernel

        KernelCache._load_kernel_from_disk = counted_load
    previous = knobs.compilation.listener

    def listener(**kw):  # chained: warmkit's own listener (under `warmkit run`) still runs
        if not kw.get("cache_hit"):
            counts["compiles"] += 1
        if previous is not None:
            previous(**kw)

    knobs.compilation.listener = listener
    bench = autotuner.Autotuner._bench

    def counted(self, *a, **kw):
        counts["benchmarks"] += 1
        return bench(self, *a, **kw)

    autotuner.Autotuner._bench = counted
    return counts


def workload(lib: str) -> None:
    launched = float(os.environ.get(LAUNCH_ENV) or time.time())
    main_at = time.time() - launched
    t0 = time.perf_counter()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("real_libraries.py: no CUDA GPU is visible; run it on a GPU host")
    counts = _counters(lib)
    once = WORKLOADS[lib](torch)
    imports = time.perf_counter() - t0
    torch.manual_seed(0)
    t1 = time.perf_counter()
    outs = once()
    torch.cuda.synchronize()
    first_pass = time.perf_counter() - t1
    first = time.time() - launched
    digest = hashlib.sha256()
    for o in outs:
        digest.update(o.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    torch.manual_seed(0)
    t2 = time.perf_counter()
    once()
    torch.cuda.synchronize()
    steady = time.perf_counter() - t2
    print(f"MAIN_AT_S {main_at:.3f}")
    print(f"IMPORTS_S {imports:.3f}")
    print(f"FIRST_PASS_S {first_pass:.3f}")
    print(f"FIRST_S {first:.3f}")
    print(f"STEADY_S {steady:.4f}")
    print(f"COMPILES {counts['compiles']}")
    print(f"BENCHMARKS {counts['benchmarks']}")
    print(f"OUT_SHA {digest.hexdigest()}")
    if "warmkit" in sys.modules:  # loaded by `warmkit run`/`record`'s startup hook
        from warmkit import monitor

        events = monitor.events()
        print(f"JIT_EVENTS {len(events)} {sorted({e.kind for e in events})}")
    sys.stdout.flush()


# -- the driver ---------------------------------------------------------------------------------


class Session:
    """Where one run's processes write, and how they are called."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.scratch = Path(tempfile.mkdtemp(prefix="real-libraries-"))
        # removed at exit, however the run ends
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)
        self.warmkit = [sys.executable, "-m", "warmkit"]
        self.timeout = TIMEOUT_S
        self.recordings: Path | None = None
        self.py_spy: str | None = None
        self.compare: str | None = None  # PYTHONPATH of the --compare row
        self.failures: list[str] = []
        self._n = 0

    def cache(self) -> Path:
        self._n += 1
        return self.scratch / f"cache-{self._n}"  # absent: Triton creates it empty

    def call(
        self, cmd: list[str], cache: Path, label: str, env: dict | None = None
    ) -> tuple[str, str]:
        full = dict(
            os.environ, TRITON_CACHE_DIR=str(cache), TRITON_CACHE_AUTOTUNING="1",
            TILELANG_CACHE_DIR=f"{cache}-tilelang",  # TileLang's own disk cache, beside Triton's
        )  # fmt: skip
        full.update(env or {}, PYTHONFAULTHANDLER="1")
        full[LAUNCH_ENV] = repr(time.time())
        log = self.out / f"{label}.log"
        proc = subprocess.Popen(
            cmd, env=full, cwd=self.out, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            # Every Python process of the group prints its threads' stacks (faulthandler), then dies.
            os.killpg(proc.pid, signal.SIGABRT)
            try:
                stdout, stderr = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
            log.write_text(f"$ {shlex.join(cmd)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
            raise SystemExit(f"real_libraries: {label} ran past {self.timeout} s; see {log}")
        log.write_text(f"$ {shlex.join(cmd)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
        if proc.returncode != 0:
            raise SystemExit(f"real_libraries: {label} exited {proc.returncode}; see {log}")
        return stdout, stderr

    def run(
        self, lib: str, prefix: list[str], cache: Path, label: str, env: dict | None = None
    ) -> dict:
        cmd = [*prefix, sys.executable, str(Path(__file__).resolve()), "workload", lib]
        stdout, stderr = self.call(cmd, cache, label, env)
        got: dict = {"label": label}
        for line in stdout.splitlines():
            word, _, rest = line.partition(" ")
            if word.endswith("_S"):
                got[word.lower()] = float(rest)
            elif word in ("COMPILES", "BENCHMARKS", "JIT_EVENTS"):
                got[word.lower()] = int(rest.split()[0])
            elif word == "OUT_SHA":
                got["sha"] = rest.strip()
        hook = HOOK_LINE.search(stderr)
        if hook:
            got["warmup_s"] = float(hook.group(2))
            got["keys"] = int(hook.group(1))
        if "sha" not in got:
            raise SystemExit(
                f"real_libraries: {label} printed no OUT_SHA; see {self.out / label}.log"
            )
        return got


def measure(s: Session, lib: str, runs: int) -> dict:
    base_cache, wk_cache = s.cache(), s.cache()
    once = {"triton alone, empty cache": s.run(lib, [], base_cache, f"{lib}-cold")}
    recording = f"{lib}_run.json"
    if lib == "tilelang":  # no raw recording for TileLang: the engine's registration
        from _common import TILED_GEMM_SHAPES, tiled_gemm_registry

        tiled_gemm_registry(TILED_GEMM_SHAPES).save(s.out / recording)
    elif s.recordings is None or not (s.recordings / recording).is_file():
        once["warmkit record, empty cache"] = s.run(
            lib, [*s.warmkit, "record", "-o", recording, "--"], s.cache(), f"{lib}-record"
        )
    else:  # an earlier run's recording: the replay's outputs are the reference then
        shutil.copy(s.recordings / recording, s.out / recording)
    replay = [*s.warmkit, "run", "-m", recording, "--"]
    once["warmkit run, replay into an empty cache"] = s.run(lib, replay, wk_cache, f"{lib}-replay")
    t0 = time.perf_counter()
    s.call([*s.warmkit, "bundle", "build", recording, "--target", "cuda:90", "-o", f"{lib}.wkb"],
           s.cache(), f"{lib}-bundle-build")  # fmt: skip
    build_s = time.perf_counter() - t0
    rows: dict[str, list[dict]] = {k: [] for k in ROWS}
    if s.compare is not None:
        rows[COMPARE] = []

    def bundled(i: int) -> dict:
        cache = s.cache()
        t0 = time.perf_counter()
        s.call([*s.warmkit, "bundle", "install", f"{lib}.wkb"], cache, f"{lib}-install-{i}")
        install = time.perf_counter() - t0
        got = s.run(lib, replay, cache, f"{lib}-bundle-{i}")
        got["install_s"] = install
        got["first_s"] += install
        return got

    turn = [  # row, prefix, cache, label, environment
        (ROWS[0], [], base_cache, "base", None),
        (ROWS[1], replay, wk_cache, "warm", None),
        (ROWS[2], replay, wk_cache, "jobs1", {"WARMKIT_JOBS": "1"}),
        (ROWS[3], replay, None, "bundle", None),  # its own empty cache per run: bundled()
    ]
    if s.compare is not None:  # the other installation, on the same warm cache
        turn.insert(2, (COMPARE, replay, wk_cache, "compare", {"PYTHONPATH": s.compare}))
    for i in range(runs):
        # Every other round in reverse: what a process leaves the next one (the page cache, the
        # driver's state, a busy minute starting) lands on each row as often first as last.
        for position, (row, prefix, cache, tag, env) in enumerate(turn[:: -1 if i % 2 else 1]):
            got = (
                bundled(i) if cache is None else s.run(lib, prefix, cache, f"{lib}-{tag}-{i}", env)
            )
            rows[row].append(got | {"position": position})
        # after each round: a call cut short still brings back the rounds that finished
        partial = {"once": once, "rows": rows, "bundle_build_s": build_s}
        (s.out / f"{lib}-partial.json").write_text(json.dumps(partial, indent=1))
    if s.py_spy:
        profile(s, lib, replay, wk_cache)
    return {"once": once, "rows": rows, "bundle_build_s": build_s}


def profile(s: Session, lib: str, replay: list[str], wk_cache: Path) -> None:
    """A py-spy profile (every thread, idle included; collapsed stacks) of one warm restart with
    the default jobs and one with jobs=1: where the warmup's time goes beyond Triton's own loads."""

    def spy(label: str) -> list[str]:
        dest = s.out / f"{lib}-profile-{label}.txt"
        return [s.py_spy, "record", "--subprocesses", "--idle", "--threads", "--nonblocking",
                "--rate", "250", "--format", "raw", "-o", str(dest), "--"]  # fmt: skip

    bundle_cache = s.cache()
    install = [*s.warmkit, "bundle", "install", f"{lib}.wkb"]
    try:
        for label, env in (("default", {}), ("jobs1", {"WARMKIT_JOBS": "1"})):
            s.run(lib, [*spy(label), *replay], wk_cache, f"{lib}-profile-{label}", env)
        s.call([*spy("install"), *install], bundle_cache, f"{lib}-profile-install")
        s.run(lib, [*spy("bundle"), *replay], bundle_cache, f"{lib}-profile-bundle")
    except SystemExit as exc:  # a profile is evidence, not a row: the rows stand without it
        print(f"real_libraries: a profile failed: {exc}", flush=True)


ROWS = [
    "baseline: Triton alone, warm cache",
    "warmkit run, warm restart",
    "warmkit run, warm restart, WARMKIT_JOBS=1",
    "bundle install into an empty cache + warmkit run",
]
COMPARE = "warmkit run, warm restart, default, --compare installation"


def check(s: Session, lib: str, res: dict) -> None:
    """Bitwise-equal outputs (warmkit rows against the recorded run, Triton alone against its own
    cold run: two cold runs may autotune to different configs), and nothing JIT under warmkit."""
    once = res["once"]
    first = (
        once.get("warmkit record, empty cache") or once["warmkit run, replay into an empty cache"]
    )
    recorded = first["sha"]
    every = list(once.items()) + [(n, r) for n, rs in res["rows"].items() for r in rs]
    for name, r in every:
        warmkit = name.startswith(("warmkit", "bundle"))
        reference = recorded if warmkit else once["triton alone, empty cache"]["sha"]
        if r["sha"] != reference:
            s.failures.append(
                f"{lib} {r['label']}: outputs differ (bitwise) from the "
                f"{'recorded run' if warmkit else 'cold run'}'s"
            )
        if name.startswith(("warmkit run, warm", "bundle")):
            for what in ("compiles", "benchmarks", "jit_events"):
                if r.get(what) != 0:
                    s.failures.append(
                        f"{lib} {r['label']}: {what.upper()} {r.get(what)} (expected 0)"
                    )
    res["baseline_equals_recorded"] = recorded == once["triton alone, empty cache"]["sha"]


def _med(rs: list[dict], key: str) -> float:
    return (
        statistics.median(r[key] for r in rs if key in r)
        if any(key in r for r in rs)
        else float("nan")
    )


def table(results: dict) -> str:
    lines = [
        (
            "| library | start | N | launch to end of first pass, median (s) | min-max "
            "| ratio to baseline | warmup (s) | first pass (s) | steady (s) | compiles | benchmarks "
            "| JIT events |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lib, res in results.items():
        base = _med(res["rows"][ROWS[0]], "first_s")
        for name, rs in [*((n, [r]) for n, r in res["once"].items()), *res["rows"].items()]:
            first = [r["first_s"] for r in rs]
            if lib == "tilelang":
                name = name.replace("Triton", "TileLang").replace("triton", "TileLang")
            lines.append(
                f"| {lib} | {name} | {len(rs)} | {statistics.median(first):.2f} | {min(first):.2f}-{max(first):.2f} "
                f"| {statistics.median(first) / base:.2f}x | {_med(rs, 'warmup_s'):.2f} "
                f"| {_med(rs, 'first_pass_s'):.3f} | {_med(rs, 'steady_s'):.4f} "
                f"| {','.join(sorted({str(r['compiles']) for r in rs}))} "
                f"| {','.join(sorted({str(r['benchmarks']) for r in rs}))} "
                f"| {','.join(sorted({str(r.get('jit_events', '-')) for r in rs}))} |"
            )
        lines.append(
            f"| {lib} | bundle build (once), install median | | {res['bundle_build_s']:.1f} build "
            f"| | | | {_med(res['rows'][ROWS[3]], 'install_s'):.2f} install | | | | |"
        )
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["workload"]:
        return workload(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="rounds of the timed rows (>= 5)")
    p.add_argument("--libs", default="fla,liger", help=f"comma-separated, of {sorted(WORKLOADS)}")
    p.add_argument("--out", type=Path, default=Path("out/real_libraries"))
    p.add_argument(
        "--recordings", type=Path,
        help="a folder with an earlier run's <lib>_run.json: replayed instead of recording again",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per process")
    p.add_argument(
        "--compare", metavar="SITE[:SITE...]",
        help="a folder with another build of warmkit, its plugins and every dependency installed "
        "(pip install --target SITE), or such folders as PYTHONPATH lists them (the first with "
        "the other build, the rest what it needs beside): one more timed row, the default warm "
        "restart with them as PYTHONPATH, taking turns with this installation's on the same "
        "warm cache (A/B)",
    )  # fmt: skip
    p.add_argument(
        "--profile", metavar="PY_SPY",
        help="py-spy's path: also profile one warm restart per jobs setting (<lib>-profile-*.txt); "
        "with --runs 0, only that (no timed rows, no ratios)",
    )  # fmt: skip
    a = p.parse_args()
    libs = a.libs.split(",")
    unknown = sorted(set(libs) - set(WORKLOADS))
    if unknown or (a.runs < 5 and not (a.runs == 0 and a.profile)):
        p.error(f"unknown --libs {unknown}" if unknown else "--runs must be >= 5 (medians of >= 5)")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("real_libraries.py: no CUDA GPU is visible; run it on a GPU host")
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    s = Session(a.out)
    s.timeout = a.timeout
    s.recordings = a.recordings.resolve() if a.recordings else None
    s.py_spy = a.profile
    s.compare = (
        os.pathsep.join(str(Path(d).resolve()) for d in a.compare.split(os.pathsep))
        if a.compare
        else None
    )
    results = {}
    for lib in libs:
        results[lib] = measure(s, lib, a.runs)
        check(s, lib, results[lib])
        if not a.runs:  # profiles only: no ratios to print
            continue
        text = table(results)  # written after each library: a call cut short keeps what finished
        (a.out / "table.md").write_text(text + "\n")
        doc = {"gpu": torch.cuda.get_device_name(0), "results": results, "failures": s.failures}
        (a.out / "results.json").write_text(json.dumps(doc, indent=1))
        print(table({lib: results[lib]}), flush=True)
    if a.runs:
        print(text)
    for f in s.failures:
        print(f"FAIL {f}")
    raise SystemExit(1 if s.failures else 0)


if __name__ == "__main__":
    main()
