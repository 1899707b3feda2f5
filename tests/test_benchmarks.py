"""Every script in benchmarks/ runs with --tiny, exits 0 and writes valid JSON with --out (none may rot)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
#: scripts that are benchmarks (not helpers); a new script must be added here
SCRIPTS = [
    "planning.py",
    "import_time.py",
    "launch_overhead.py",
    "slot_mapping_throughput.py",
    "startup.py",
    "first_launch.py",
    "autotune.py",
    "record_replay.py",
    "scale.py",
    "dsl_startup.py",
    "fleet.py",
    "warm_key.py",
    "fault_matrix.py",
    "tilelang_hit.py",
    "cutedsl_hit.py",
]
#: not benchmarks: shared helpers and workloads (synthetic_kernels.py has its own check below);
#: identity_gpu.py is the lead's H200 proof of pinned identity (needs CUDA and fla-core);
#: real_libraries.py needs CUDA, fla-core and liger-kernel (its refusals are tested below)
HELPERS = {
    "_common.py",
    "synthetic_kernels.py",
    "plot_scale.py",
    "identity_gpu.py",
    "real_libraries.py",
    "wheel_deps.py",
}


def test_every_script_is_smoke_tested():
    assert {p.name for p in BENCH.glob("*.py")} - HELPERS == set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_tiny_run_writes_json(script, tmp_path):
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    scratch = tmp_path / "tmp"  # the script's temporary files: none may outlive it
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--tiny", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, f"{script}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    doc = json.loads(out.read_text())
    assert isinstance(doc, dict) and doc
    left = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*"))
    # CuTe DSL makes its own file cache's default folder, $TMPDIR/$USER/cutlass_python_cache, when
    # it is imported: the library's lasting cache, not the script's temporary files
    cute = [d for d in left if d.split(os.sep)[-1] == "cutlass_python_cache"]
    for d in cute:
        assert not any((scratch / d).iterdir()), f"{script} wrote into CuTe DSL's default cache"
    kept = [d for d in left if any(c == d or c.startswith(d + os.sep) for c in cute)]
    assert [d for d in left if d not in kept] == [], f"{script} left these"
    if "benchmark" in doc:  # written by _common.emit
        assert doc["machine"]["python"] and "results" in doc
    if script == "fault_matrix.py":  # each tiny case ran and was refused naming the bad setting
        tiny = ["WARMKIT_BACKENDS=tritn", "--backends tritn", "WARMKIT_JOBS=0", "-j 0"]
        assert [(c["case"], c["ended"]) for c in doc["cases"]] == [(n, "clear error") for n in tiny]
        assert doc["counts"]["clear error"] == 4 and sum(doc["counts"].values()) == 4


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_scale_counts_instructions_per_key_under_callgrind(tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--tiny", "--instructions", "20,40",
         "--shapes", "declared", "--jobs", "1", "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (count,) = json.loads(out.read_text())["results"]["counts"]
    # two fresh processes, 20 keys apart: a no-op key costs thousands of instructions
    assert count["shape"] == "declared" and count["sizes"] == [20, 40]
    assert count["instructions"][1] > count["instructions"][0]
    assert 1_000 < count["per_key"] < 10_000_000


def test_synthetic_manifest_has_32_distinct_triton_keys(tmp_path):
    """32 warmkit keys that are 32 distinct Triton cache entries (hashes of a real AOT compile are not
    needed: the launch options and constexprs differ per key, and they are part of Triton's key)."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "synthetic_kernels.py"), "--out", str(tmp_path / "m.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "32 keys" in proc.stdout
    sys.path.insert(0, str(BENCH))
    try:
        import synthetic_kernels as sk
    finally:
        sys.path.remove(str(BENCH))
    kernel = sk.BlockedMatmul()
    keys = sk.registry().plan()[kernel.name]
    triton_keys = set()
    for key in keys:
        args, kwargs = kernel.warmup_args(key)
        dtypes = tuple(str(a.dtype) for a in args[:3])
        opts = kernel.launch_options(key)
        triton_keys.add((dtypes, tuple(sorted(kwargs.items())), tuple(sorted(opts.items()))))
    assert len(keys) == 32 and len(triton_keys) == 32


def test_plot_scale_writes_a_png(tmp_path):
    """The B10 plot script draws the curve of a real (tiny) scale.py run."""
    pytest.importorskip(
        "matplotlib", reason="pip install 'warmkit[bench]' for benchmarks/plot_scale.py"
    )
    data = tmp_path / "scale.json"
    run = [sys.executable, str(BENCH / "scale.py"), "--tiny", "--out", str(data)]
    subprocess.run(run, cwd=tmp_path, capture_output=True, timeout=240, check=True)
    png = tmp_path / "img" / "scale.png"
    plot = [sys.executable, str(BENCH / "plot_scale.py"), str(data), str(png)]
    subprocess.run(plot, cwd=tmp_path, capture_output=True, timeout=240, check=True)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wheel_deps_resolves_requires_dist_recursively_minus_the_gpu_hosts_packages():
    """The GPU host's wheel list comes from the packages' metadata: warmkit's jsonschema (once
    forgotten by hand) and jsonschema's own referencing come, the host's attrs and the repo's own
    packages do not, and a requirement not installed here is an error naming who needs it."""
    run = [sys.executable, str(BENCH / "wheel_deps.py")]
    proc = subprocess.run([*run, "warmkit"], capture_output=True, text=True, timeout=60, check=True)
    names = {line.split("==")[0] for line in proc.stdout.split()}
    assert {"jsonschema", "referencing", "stevedore", "pebble"} <= names
    assert not names & {"attrs", "warmkit", "tqdm", "filelock"}
    proc = subprocess.run(
        [*run, "--host-has", "", "no-such-dist-xyz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and "no-such-dist-xyz (required by the command line)" in proc.stderr


@pytest.mark.parametrize(
    ("args", "rc", "said"),
    [
        (["--libs", "fla,nope"], 2, "unknown --libs ['nope']"),
        (["--runs", "3"], 2, "--runs must be >= 5"),
        ([], 1, "no CUDA GPU is visible; run it on a GPU host"),
    ],
)
def test_real_libraries_refuses_bad_arguments_and_a_host_without_cuda(args, rc, said, tmp_path):
    torch = pytest.importorskip("torch")
    if not args and torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the benchmark would run")
    proc = subprocess.run(
        [sys.executable, str(BENCH / "real_libraries.py"), *args, "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == rc and said in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()  # refused before any process ran


def test_real_libraries_runs_every_other_round_in_reverse(tmp_path: Path) -> None:
    # real_libraries.measure's order on a GPU host, with its processes stood in for (the
    # workload needs CUDA): a fixed order would hand one row whatever the process before it
    # leaves, so odd rounds run the rows backwards, and each run says where it stood.
    sys.path.insert(0, str(BENCH))
    try:
        import real_libraries as rl
    finally:
        sys.path.remove(str(BENCH))

    class Standin(rl.Session):
        def __init__(self, out: Path) -> None:
            super().__init__(out)
            # the other build alone, then what it runs with: PYTHONPATH as given
            self.compare, self.seen = f"{tmp_path / 'site'}{os.pathsep}{tmp_path / 'rest'}", []

        def run(self, lib, prefix, cache, label, env=None):
            self.seen.append(label)
            return {"label": label, "first_s": 1.0, "env": env}

        def call(self, cmd, cache, label, env=None):
            self.seen.append(label)
            return "", ""

    s = Standin(tmp_path)
    res = rl.measure(s, "liger", 2)
    timed = [label for label in s.seen if label[-2:] in ("-0", "-1")]
    assert timed == [
        "liger-base-0", "liger-warm-0", "liger-compare-0", "liger-jobs1-0",
        "liger-install-0", "liger-bundle-0",
        "liger-install-1", "liger-bundle-1", "liger-jobs1-1", "liger-compare-1",
        "liger-warm-1", "liger-base-1",
    ]  # fmt: skip
    where = {r["label"]: r["position"] for rs in res["rows"].values() for r in rs}
    assert where == {
        "liger-base-0": 0, "liger-warm-0": 1, "liger-compare-0": 2, "liger-jobs1-0": 3,
        "liger-bundle-0": 4, "liger-bundle-1": 0, "liger-jobs1-1": 1, "liger-compare-1": 2,
        "liger-warm-1": 3, "liger-base-1": 4,
    }  # fmt: skip
    jobs1 = res["rows"]["warmkit run, warm restart, WARMKIT_JOBS=1"]
    assert [r["env"] for r in jobs1] == [{"WARMKIT_JOBS": "1"}] * 2
    compared = res["rows"][rl.COMPARE]
    assert [r["env"] for r in compared] == [{"PYTHONPATH": s.compare}] * 2
    assert all(r["first_s"] > 1.0 for r in res["rows"][rl.ROWS[3]])  # the install counted in


def test_real_libraries_tilelang_replays_the_engines_registration(
    tmp_path: Path, monkeypatch
) -> None:
    # TileLang has no raw-kernel recording: its manifest is TiledGemm's registration of the
    # workload's shapes, written by the driver, and the table names TileLang, not Triton.
    pytest.importorskip("warmkit_tilelang")
    monkeypatch.syspath_prepend(str(BENCH))  # as when run: its folder's _common is importable
    import _common
    import real_libraries as rl

    import warmkit

    class Standin(rl.Session):
        def run(self, lib, prefix, cache, label, env=None):
            self.seen.append((label, prefix))
            return {"label": label, "first_s": 1.0, "compiles": 0, "benchmarks": 0}

        def call(self, cmd, cache, label, env=None):
            self.seen.append((label, cmd))
            return "", ""

    s = Standin(tmp_path)
    s.seen = []
    res = rl.measure(s, "tilelang", 1)
    labels = [label for label, _ in s.seen]
    assert "tilelang-record" not in labels and "warmkit record, empty cache" not in res["once"]
    replay = dict(s.seen)["tilelang-replay"]
    assert replay[-4:] == ["run", "-m", "tilelang_run.json", "--"]
    reg = warmkit.WarmupRegistry.load(tmp_path / "tilelang_run.json")
    (keys,) = reg.plan().values()  # one kernel: TiledGemm
    assert sorted((k.m, k.n, k.k) for k in keys) == sorted(_common.TILED_GEMM_SHAPES)
    text = rl.table({"tilelang": res})
    assert "TileLang alone, warm cache" in text and "Triton" not in text
