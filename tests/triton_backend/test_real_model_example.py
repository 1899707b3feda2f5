"""The CPU part of examples/real_model: its committed recording builds into a complete bundle for cuda:90.

The manifest was recorded from an HF Llama patched with Liger-Kernel
(examples/real_model/README.md says how). Replaying its raw entries imports
Liger's kernel modules only, so this needs liger-kernel (a test dependency)
and never transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import warmkit

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "real_model" / "run.json"
TARGET = "cuda:90"
#: The Liger kernels a Llama's generate() launches: RMSNorm, RoPE and SwiGLU's forward.
LIGER_KERNELS = {
    "liger_kernel.ops.rms_norm._rms_norm_forward_kernel",
    "liger_kernel.ops.rope._triton_rope",
    "liger_kernel.ops.swiglu._swiglu_forward_kernel",
}


def _warmkit(args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(cache)
    # A `transformers` that refuses to import, first on the path: CI does not install the
    # real one, and the build must not need it even where it is installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd / "no-hf"), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *args],
        env=env,
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """One `warmkit bundle build` of the committed recording into an empty Triton cache."""
    tmp = tmp_path_factory.mktemp("real-model")
    blocker = tmp / "no-hf" / "transformers"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        'raise ImportError("the real-model bundle build imported transformers")\n'
    )
    wkb = tmp / "model.wkb"
    proc = _warmkit(
        ["bundle", "build", str(MANIFEST), "--target", TARGET, "-o", str(wkb), "--json"],
        tmp / "empty-cache",
        tmp,
    )
    assert proc.returncode == 0, proc.stderr
    return tmp, wkb, json.loads(proc.stdout)


def test_the_committed_recording_is_liger_kernels_for_cuda90_all_replayable() -> None:
    entries = warmkit.read_recorded(MANIFEST)
    assert {e.name for e in entries} == LIGER_KERNELS
    assert all(e.target == TARGET and e.replayable for e in entries), [
        (e.name, e.target, e.reason) for e in entries if e.target != TARGET or not e.replayable
    ]


def test_every_recorded_key_is_in_the_bundle_built_without_transformers(built) -> None:
    _, wkb, report = built
    recorded = list(warmkit.read_recorded(MANIFEST))
    assert (report["kernels"], report["keys"]) == (len(LIGER_KERNELS), len(recorded)), report
    info = warmkit.inspect_bundle(wkb)
    assert info["target"] == TARGET
    assert set(info["kernels"]) == LIGER_KERNELS
    assert sum(map(len, info["kernels"].values())) == len(recorded)


def test_bundle_check_passes_for_the_committed_recording(built) -> None:
    tmp, wkb, _ = built
    proc = _warmkit(
        ["bundle", "check", str(wkb), "--manifest", str(MANIFEST), "--target", TARGET],
        tmp / "check-cache",
        tmp,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recorded = json.loads(MANIFEST.read_text())
    lines = proc.stdout.splitlines()
    assert lines[-1].endswith(": 0 miss(es)"), proc.stdout
    assert sum(line.startswith("HIT ") for line in lines) == int(lines[-1].split()[0]), proc.stdout
    assert recorded  # the committed recording is not empty


def test_gen_refuses_a_host_without_cuda_and_says_where_to_run_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: gen.py runs the model instead")
    proc = subprocess.run(
        [sys.executable, str(MANIFEST.parent / "gen.py")],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()  # said once, no traceback
    assert line == (
        "gen.py: no CUDA GPU is visible (torch.cuda.is_available() is False); run it on a GPU "
        "host (examples/real_model/README.md). On a CPU host, examples/real_model/record_cpu.py "
        "records the same model's kernels."
    )


def test_the_h100_recording_builds_under_its_triton_and_is_refused_under_another(tmp_path) -> None:
    # run_h100.json: the same model recorded on an H100 (Triton 3.6), with pinned identity.
    # Under Triton 3.6 it builds every key for cuda:90; under another Triton the build refuses,
    # naming the function of Triton's own library whose source differs (never another variant).
    import triton

    gpu = ROOT / "examples" / "real_model" / "run_h100.json"
    recorded = list(warmkit.read_recorded(gpu))
    assert {e.name for e in recorded} == LIGER_KERNELS
    assert {e.spec["triton"] for e in recorded} == {"3.6.0"}
    (tmp_path / "no-hf").mkdir()
    wkb = tmp_path / "h100.wkb"
    args = ["bundle", "build", str(gpu), "--target", TARGET, "-o", str(wkb), "--json"]
    proc = _warmkit(args, tmp_path / "cache", tmp_path)
    if triton.__version__ == "3.6.0":
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["keys"] == len(recorded)
    else:
        assert proc.returncode == 1 and not wkb.exists()
        assert "the pinned identity cannot be reproduced on this host: function " in proc.stderr
        assert "triton.language.standard:" in proc.stderr


FAKE_GEN = """
import sys
print("TOKENS [1, 2]")
for line in ("MAIN_AT_S 0.1", "IMPORTS_S 0.2", "FIRST_RESPONSE_S 1.0", "STEADY_S 0.1", "COMPILES 0"):
    print(line)
print("PYCACHE", sys.pycache_prefix, sys.flags.dont_write_bytecode)
if "warmkit" in sys.modules:  # under `warmkit run`: which installation's hook ran
    import warmkit
    print("JIT_EVENTS 0 []")
    print("WARMKIT_FROM", warmkit.__file__)
"""


def _smoke_bench(
    tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None
) -> tuple[Path, str, dict]:
    """bench.py with FAKE_GEN for gen.py, no cold/record/bundle rows: its out, stdout, rows."""
    gen = tmp_path / "fake_gen.py"
    gen.write_text(FAKE_GEN)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env |= env_extra or {}
    env["TMPDIR"] = str(tmp_path / "tmp")  # its caches: removed when it ends
    (tmp_path / "tmp").mkdir()
    cmd = [sys.executable, str(ROOT / "examples" / "real_model" / "bench.py"), *args]
    cmd += ["--other-runs", "0", "--out", str(out), "--gen", f"{sys.executable} {gen}"]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
    return out, proc.stdout, dict(json.loads((out / "results.json").read_text())["rows"])


def test_bench_compare_row_runs_the_other_installation(tmp_path: Path) -> None:
    # The A/B row of a change (--compare SITE) must run SITE's warmkit, parent and hook,
    # taking turns with this installation's row; a smoke run with a stand-in for gen.py.
    import shutil

    site = tmp_path / "site"
    shutil.copytree(
        ROOT / "warmkit", site / "warmkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    out, _, rows = _smoke_bench(tmp_path, "--runs", "2", "--compare", str(site))
    compare = rows["`warmkit run -m run.json`, warm cache, the --compare installation"]
    assert [r["label"] for r in compare] == ["compare-0", "compare-1"]
    assert [r["jit_events"] for r in compare] == [0, 0]
    for label, where in (("compare-0", site), ("run-0", ROOT)):
        log = (out / f"{label}.log").read_text()
        assert f"WARMKIT_FROM {where / 'warmkit' / '__init__.py'}" in log, log


def test_bench_pycache_gives_every_row_one_bytecode_cache(tmp_path: Path) -> None:
    # A host that forbids writing bytecode (PYTHONDONTWRITEBYTECODE=1): with --pycache every
    # process, plain or under `warmkit run`, may write and read one cache, in the bench's scratch.
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    out, _, _ = _smoke_bench(tmp_path, "--runs", "1", "--pycache", env_extra=env)
    seen = {
        label: next(
            line.split()[1:]
            for line in (out / f"{label}.log").read_text().splitlines()
            if line.startswith("PYCACHE ")
        )
        for label in ("warm-prime", "warm-0", "run-0", "torch-start-0")
    }
    prefixes = {prefix for prefix, _ in seen.values()}
    assert len(prefixes) == 1 and prefixes.pop().endswith("pycache"), seen
    assert {flag for _, flag in seen.values()} == {"0"}, seen
    assert json.loads((out / "results.json").read_text())["pycache"] is True
    (tmp_path / "without").mkdir()
    out, _, _ = _smoke_bench(tmp_path / "without", "--runs", "1", env_extra=env)
    line = next(
        line for line in (out / "warm-0.log").read_text().splitlines() if line.startswith("PYCACHE")
    )
    assert line == "PYCACHE None 1"  # the host's settings, untouched without --pycache


def test_bench_seconds_starts_no_turn_that_would_end_past_it(tmp_path: Path) -> None:
    # A device call cut at its limit brings back nothing: --seconds stops taking turns in time,
    # after one turn at least (the table needs a run per row), and says how many ran.
    _, stdout, rows = _smoke_bench(tmp_path, "--runs", "3", "--seconds", "0.001")
    assert "bench: 1 turn(s) of 3: another would end past --seconds 0.001" in stdout
    assert [r["label"] for r in rows["warm Triton cache, no warmkit"]] == ["warm-0"]
    assert [r["label"] for r in rows["`warmkit run -m run.json`, warm cache"]] == ["run-0"]


def test_bench_takes_every_other_turn_in_reverse(tmp_path: Path) -> None:
    # A fixed order in each turn would hand one row whatever the process before it leaves
    # (the page cache, a busy minute starting): every other turn runs the rows backwards.
    _, stdout, rows = _smoke_bench(tmp_path, "--runs", "2")
    # the stand-in's times are equal: no turn is sooner, and the table reads the turns as pairs
    assert (
        "| `warmkit run -m run.json`, warm cache | 2 | +0.00 | 0 of 2 | 1.000 | +0.00 | +0.00 |"
        in stdout
    )
    got = {
        r["label"]: r["position"]
        for name in ("warm Triton cache, no warmkit", "`warmkit run -m run.json`, warm cache")
        for r in rows[name]
    }
    got |= {r["label"]: r["position"] for r in rows[next(n for n in rows if "TORCH_START" in n)]}
    assert got == {
        "warm-0": 0, "run-0": 1, "torch-start-0": 2,
        "torch-start-1": 0, "run-1": 1, "warm-1": 2,
    }  # fmt: skip


def _load_example(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        name, ROOT / "examples" / "real_model" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_reads_each_turn_against_the_warm_run_of_the_same_turn() -> None:
    # The host's spread from one process to the next hides a warm restart's gain in the rows'
    # medians; the table's last lines pair run i of a turn row with run i of the warm row.
    bench = _load_example("bench")

    def run(first: float, before: float) -> dict:
        return {"first_response_s": first, "main_at_s": 0.5, "imports_s": before - 0.5}

    warm = [run(10.0, 6.0), run(12.0, 7.0), run(11.0, 6.0)]
    ours = [run(9.0, 6.5), run(12.5, 8.0), run(10.5, 6.5)]  # sooner in turns 1 and 3
    lines = bench.paired([(bench.WARM_ROW, warm), (bench.RUN_ROW, ours), ("cold", ours[:1])])
    assert lines[-1] == f"| {bench.RUN_ROW} | 3 | -0.50 | 2 of 3 | 0.500 | +0.50 | -1.00 |"
    # a blank line, the header, its rule and one row: a row that took no turns is left out
    assert len(lines) == 4
    assert bench.paired([(bench.WARM_ROW, warm)]) == []


def test_hook_profile_splits_the_hooks_imports_from_its_own_work() -> None:
    # py-spy raw lines (process;thread;outermost..innermost frames count): site's import of
    # sitecustomize is above the hook, so only imports below warmkit's module count as imports.
    mod = _load_example("hook_profile")
    site = "p;thread (1): MainThread;main (<frozen site>:636);execsitecustomize (<frozen site>:575)"
    site += ";_find_and_load (<frozen importlib._bootstrap>:1360);<module> (sitecustomize.py:5)"
    lines = [
        f"{site};main (warmkit/_cli/startup.py:158);_find_and_load (<frozen x>:1);<module> (a.py:1) 7",
        f"{site};main (warmkit/_cli/startup.py:158);prime (warmkit_triton/_kernel.py:9) 2",
        "p;thread (1): MainThread;<module> (gen.py:3);forward (m.py:1) 5",
        "p;thread (1): MainThread 3",
        "p;thread (2): warmkit-compile;run (t.py:1);RecordedTritonKernel.function_for (_record.py:375) 4",
        "p;thread (2): warmkit-compile;run (t.py:1);load_handles (_runtime.py:1) 1",
        "p;thread (2): warmkit-compile;run (t.py:1);_find_and_load (<frozen x>:1);f (b.py:2) 6",
        f"{site};main (warmkit/_cli/startup.py:158);Event.wait (threading.py:655) 8",
        f"{site};_find_and_load (<frozen x>:1);<module> (warmkit/_warmup/report.py:3) 9",
        'process 7:"python gen.py";thread (7);<module> (gen.py:3) 2',  # unnamed: the main one
    ]
    parts = {k: sum(v.values()) for k, v in mod.split(lines).items()}
    assert parts == {
        "main: the hook, importing": 7,
        "main: the hook, warmkit's own work": 2,
        "main: the command": 7,
        "main: no Python frame (interpreter start, exec, exit)": 3,
        "warmkit-compile: waiting on an import": 4,
        "warmkit-compile: other": 1,
        "warmkit-compile: importing": 6,
        "main: the hook, waiting on warmkit's threads": 8,
        "main: the hook, importing warmkit's own modules": 9,
    }


def test_hook_profile_counts_each_kind_of_work_wherever_the_process_made_it() -> None:
    # The same device work counts as one kind whether the hook or the command made it, and
    # torch's CUDA start inside Triton's load is torch's; imports by the innermost module.
    mod = _load_example("hook_profile")
    sp = "/usr/lib/python3/dist-packages"
    site = "p;thread (1): MainThread;main (<frozen site>:636);execsitecustomize (<frozen site>:575)"
    site += ";_find_and_load (<frozen importlib._bootstrap>:1360)"
    site += ";<module> (/tmp/site/warmkit/_cli/hook/sitecustomize.py:5)"
    hook = f"{site};main (/tmp/site/warmkit/_cli/startup.py:158)"
    gen = "p;thread (1): MainThread;<module> (/w/gen.py:3);main (/w/gen.py:120)"
    load = f"_init_handles ({sp}/triton/compiler/compiler.py:460)"
    lazy = f"_lazy_init ({sp}/torch/cuda/__init__.py:410)"
    imp = "_find_and_load (<frozen importlib._bootstrap>:1360)"
    lines = [
        f"{hook};compile (/tmp/site/warmkit_triton/_kernel.py:9);{load} 4",
        f"{gen};generate (/w/gen.py:86);run ({sp}/triton/runtime/jit.py:700);{load} 3",
        f"{gen};generate (/w/gen.py:86);{load};current_device ({sp}/torch/cuda/__init__.py:1);{lazy} 2",
        f"{gen};build_model (/w/gen.py:70);to ({sp}/torch/nn/modules/module.py:1);{lazy} 5",
        f"{hook};{imp};<module> ({sp}/liger_kernel/ops/rms_norm.py:1);{imp};<module> ({sp}/torch/__init__.py:1) 11",
        f"{hook};{imp};<module> ({sp}/liger_kernel/ops/rms_norm.py:1) 6",
        f"{gen};{imp};<module> ({sp}/torch/__init__.py:1) 12",
        f"{hook};resolve (/tmp/site/warmkit/_warmup/orchestrate.py:107) 7",
        f"{gen};generate (/w/gen.py:86);sdpa ({sp}/torch/nn/functional.py:1) 8",
        "p;thread (1): MainThread;<module> (/tmp/site/bin/warmkit:3);main (/tmp/site/warmkit/_cli/commands.py:1) 9",
        "p;thread (1): MainThread 1",
        f"p;thread (2): warmkit-cuda-start;{lazy} 50",
        # py-spy names no thread before `threading` is imported: the process's own id is main
        'process 7:"python gen.py";thread (7);<module> (/w/gen.py:3);main (/w/gen.py:120) 6',
        f'process 7:"python gen.py";thread (8);{lazy} 40',
    ]
    assert mod.phases(lines) == {
        "Triton: kernel loads and launchers (_init_handles)": 7,
        "torch: CUDA start (torch.cuda._lazy_init)": 7,
        "import: torch": 23,
        "import: liger_kernel": 6,
        "the hook: warmkit's own work": 7,
        "the command: generate": 8,
        "the command: main": 6,
        "warmkit run's CLI (before it execs the command)": 9,
        "no Python frame (interpreter start, exec, exit)": 1,
    }


def test_first_request_splits_the_first_generate_from_the_second_by_part() -> None:
    # py-spy raw lines of a --profile run: child calls gen.generate directly the first time and
    # through _timed the second; other threads and the rest of child are not either call.
    fr = _load_example("first_request")
    main = "thread (7): MainThread;<module> (first_request.py:9);main (first_request.py:1)"
    first = f"{main};child (first_request.py:129);generate (gen.py:86);forward (m.py:3)"
    second = f"{main};child (first_request.py:132);_timed (first_request.py:84)"
    second += ";<lambda> (first_request.py:132);generate (gen.py:86);forward (m.py:3)"
    lines = [
        f"{first};run_cudnn_SDP_fprop (libtorch_cuda.so);x (libcudnn_graph.so.9);nvrtcCompileProgram (libnvrtc.so.13) 40",
        f"{first};run_cudnn_SDP_fprop (libtorch_cuda.so);cudnnBackendFinalize (libcudnn_graph.so.9) 5",
        f"{first};JITFunction.run (triton/runtime/jit.py:720);triton_key (triton/runtime/cache.py:297) 9",
        f"{first};cuLaunchKernel (libcuda.so.580) 3",
        f"{second};cuLaunchKernel (libcuda.so.580) 2",
        f"{second} 6",
        f"{main};child (first_request.py:105);build_model (gen.py:57) 50",
        "thread (8): prelude;child (first_request.py:129);generate (gen.py:86) 70",
        # py-spy's unnamed main thread: still the main thread (it runs the script's <module>)
        f"{first.replace('thread (7): MainThread', 'thread (7)')};cuLaunchKernel (libcuda.so.580) 4",
    ]
    assert fr.split_profile(lines) == {
        "first": {
            "cuDNN: NVRTC under its plans' build": 40,
            "cuDNN: the rest": 5,
            "Triton: first call (cache key, load, launcher)": 9,
            "libcuda (innermost)": 7,
        },
        "second": {"libcuda (innermost)": 2, "Python (innermost)": 6},
    }


def test_first_request_says_a_failed_priming_run_and_exits_nonzero(tmp_path: Path) -> None:
    # Without a GPU (or without transformers) every child fails: the script must not print an
    # empty table and exit 0 as if it had measured something.
    cmd = [sys.executable, str(ROOT / "examples" / "real_model" / "first_request.py")]
    cmd += ["--runs", "2", "--seconds", "1", "--out", str(tmp_path / "out")]
    env = {k: v for k, v in os.environ.items() if k not in ("FIRST_REQUEST_DEVICE",)}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["TMPDIR"] = str(tmp_path / "tmp")  # its Triton cache: removed however it ends
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # its own Triton cache is gone (torch's children may leave their lasting caches there)
    assert [p.name for p in (tmp_path / "tmp").glob("first-request-*")] == []
    assert "first_request: the priming run failed; nothing measured" in proc.stderr
    assert "prime: exit" in proc.stdout and (tmp_path / "out" / "prime.log").is_file()
    assert "| mode |" not in proc.stdout


def test_start_costs_times_each_part_in_fresh_processes() -> None:
    # One run per row: a row per part, `warmkit run` execs `true` (exit 0, nothing printed),
    # and where there is no libcuda its row says why instead of a time of nothing.
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "real_model" / "start_costs.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out[2:]}
    assert set(rows) == {
        "python -c pass",
        "warmkit run -m MANIFEST -- true",
        "import warmkit._cli.commands",
        "libcuda: cuInit + primary context",
    }
    assert rows["warmkit run -m MANIFEST -- true"][3].strip(" |") == ""
    cuda = rows["libcuda: cuInit + primary context"][3]
    assert "cuInit" in cuda or "libcuda" in cuda, cuda
