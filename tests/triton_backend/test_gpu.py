"""GPU tests (run on the H200 through the device tool; skipped without CUDA).

* Device-mode warmup leaves zero Triton hook events on the first real launch of every key.
* First-call latency after warmup vs the steady state, and the same after a
  compile-only warmup, measured and printed. Asserted: no first call above
  1 ms (a compile-only warmup leaves ~190 ms). The 1.5x goal is reported per
  variant, not asserted (see the test and docs/triton.md).
* A cache filled ahead of time with CUDA hidden, then used with the GPU visible
  (same path), gives disk hits only.

Each measurement runs in a fresh process (``_gpu_child.py``), so no in-memory
cache of an earlier test helps it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION"),
]

CHILD = Path(__file__).resolve().parent / "_gpu_child.py"


def child(mode: str, cache: Path, *args: str, env: dict | None = None) -> dict:
    full_env = dict(os.environ, TRITON_CACHE_DIR=str(cache), PYTHONWARNINGS="ignore")
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, str(CHILD), mode, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, f"{mode} failed:\n{out.stdout}\n{out.stderr}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\n[{mode}] {json.dumps(result, indent=1)}")
    return result


def table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"  {'variant':<14} {'first (us)':>11} {'steady (us)':>12} {'ratio':>6}")
    for r in rows:
        print(
            f"  {r['variant']:<14} {r['first_us']:>11.1f} {r['steady_us']:>12.1f} {r['ratio']:>6.2f}"
        )


def test_device_warmup_leaves_zero_hook_events_and_first_call_is_steady(tmp_path):
    """Three fresh processes, the variants' order rotated, so each process's very first call is another key."""
    runs = [child("latency-device", tmp_path / f"cache{r}", str(r)) for r in range(3)]
    for result in runs:
        assert set(result["statuses"]) == {"compiled"}
        assert result["hook_events"] == [], result["hook_events"]
        assert result["monitor_events"] == []
        assert all(result["correct"]), result["correct"]
        table(f"device warmup, TritonKernel calls (Triton {result['triton']})", result["latency"])
    summary = summarize(runs)
    table("device warmup, TritonKernel calls: per-variant median over the 3 processes", summary)
    for r in summary:
        # Nothing compiles, loads or builds at the first launch: a compile-only warmup
        # leaves ~190 ms there (Triton 3.6: gcc launcher build + module load).
        assert r["first_us"] < 1000, r
    # The 1.5x goal, reported rather than asserted: on the H200 the first call
    # of a key still pays 20-180 us of first-touch costs that no compile, load or
    # build explains (the process's first launch, a wrapper's first call, the driver's
    # first look at a new allocation); see docs/triton.md.
    ratios = sorted(r["ratio"] for r in summary)
    within = sum(x <= 1.5 for x in ratios)
    print(f"first/steady ratios: {ratios}; {within}/{len(ratios)} variants within 1.5x")


def test_device_warmup_also_prepares_bare_launches(tmp_path):
    result = child("latency-device-raw", tmp_path / "cache")
    assert result["hook_events"] == [], result["hook_events"]
    table("device warmup, bare fn[grid] launches", result["latency"])
    for r in result["latency"]:
        assert r["first_us"] < 1000, r


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    for variant in [r["variant"] for r in runs[0]["latency"]]:
        firsts = [r["first_us"] for run in runs for r in run["latency"] if r["variant"] == variant]
        steadies = [
            r["steady_us"] for run in runs for r in run["latency"] if r["variant"] == variant
        ]
        first, steady = statistics.median(firsts), statistics.median(steadies)
        rows.append(
            {
                "variant": variant,
                "first_us": first,
                "steady_us": steady,
                "ratio": round(first / steady, 2),
            }
        )
    return rows


def test_compile_only_warmup_first_call_is_reported(tmp_path):
    """The vLLM way, for comparison: Triton's compile-only warmup leaves module load (and in 3.6 a gcc launcher build)."""
    result = child("latency-compile-only", tmp_path / "cache")
    table("compile-only fn.warmup, bare fn[grid] launches (for comparison)", result["latency"])
    assert all(r["first_us"] > 0 for r in result["latency"])


def test_aot_cache_built_without_gpu_gives_disk_hits_only(tmp_path):
    cap = torch.cuda.get_device_capability()
    target = f"cuda:{cap[0] * 10 + cap[1]}"
    cache = tmp_path / "cache"
    filled = child("aot-fill", cache, target, env={"CUDA_VISIBLE_DEVICES": ""})
    assert set(filled["statuses"]) == {"compiled"} and filled["check"] == []
    used = child("aot-use", cache)
    assert used["device_target"] == target and used["check"] == [] and used["correct"]
    kinds = [kind for _, kind, _ in used["monitor_events"]]
    assert kinds and set(kinds) == {"disk_hit"}, used["monitor_events"]
    assert len(kinds) == len(filled["statuses"])


def test_cpu_built_bundle_install_builds_the_launchers_so_warmup_builds_none(tmp_path):
    """B3: the gcc-built modules a CPU-built bundle lacks are built by ``bundle install``."""
    cap = torch.cuda.get_device_capability()
    target = f"cuda:{cap[0] * 10 + cap[1]}"
    bundle = tmp_path / "cpu-built.wkb"
    child("bundle-build", tmp_path / "build-cache", target, str(bundle),
          env={"CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    cache = tmp_path / "serving-cache"
    installed = child("bundle-install", cache, str(bundle))
    assert installed["installed"] > 0
    assert "launcher(s) built or found" in installed["prepared"]["triton"], installed
    modules = sorted(str(p.relative_to(cache)) for p in cache.rglob("*.so"))
    assert modules, "install built no module"
    warm = child("latency-device", cache)
    assert set(warm["statuses"]) == {"cached"}
    # the device warmup found every launcher (and cuda_utils) built: gcc did not run
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*.so")) == modules


def test_the_device_target_from_libcuda_is_tritons():
    # bundle install names the target without importing torch (libcuda); it must be the one
    # Triton's driver reports, or every install would be refused (or accepted) wrongly.
    from warmkit_triton import _cuda
    from warmkit_triton._aot import real_driver

    target = real_driver().get_current_target()
    assert _cuda.capability() == target.arch and target.backend == "cuda"
    code = "import sys; from warmkit_triton import _compiler as c; print(c.device_target(), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"cuda:{target.arch}", "False"]


def test_the_early_cuda_start_creates_the_context_and_its_release_gives_it_back():
    # A fresh process, so nothing else holds device 0's primary context: the early start
    # must create it (a device warmup's first load then finds it made), and its release
    # must leave the driver as it found it (the retain count back to 0: context gone).
    code = """
import ctypes, time
from warmkit._plugin.cuda import start_context
lib = ctypes.CDLL("libcuda.so.1")
assert lib.cuInit(0) == 0
def active():
    flags, on = ctypes.c_uint(), ctypes.c_int()
    assert lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(on)) == 0
    return on.value
before = active()
release = start_context(0)
deadline = time.monotonic() + 60
while not active() and time.monotonic() < deadline:
    time.sleep(0.001)
during = active()
print(before, during, release(), active())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "True", "0"], out.stdout + out.stderr


def test_torch_start_makes_torchs_first_calls_during_the_device_warmup(tmp_path):
    # WARMKIT_TRITON_TORCH_START=1: the device warmup's thread makes torch's one-time
    # CUDA starts, the warmup's end waits for it, and the command's first SDPA and matmul
    # calls after it no longer pay the libraries' first-use load.
    code = """
import json, logging, sys, threading, time
import torch, torch.nn.functional as F
import warmkit
sys.path.insert(0, sys.argv[1])
from triton_backend._kernels import Add
logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s")
reg = warmkit.WarmupRegistry()
with reg.activate():
    Add().register_warmup(dtype="float32", n=[4096])
warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="off", jobs=1), reg)
alive = [t.name for t in threading.enumerate() if t.name == "warmkit-torch-start"]
q = torch.randn(1, 8, 12, 64, dtype=torch.bfloat16, device="cuda")
w = torch.randn(512, 64, dtype=torch.bfloat16, device="cuda")
times = []
for _ in range(2):
    t0 = time.perf_counter()
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    F.linear(q, w)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print(json.dumps({"alive": alive, "first_s": times[0], "second_s": times[1]}))
"""
    tests_dir = str(Path(__file__).resolve().parents[1])
    results = {}
    for flag in ("0", "1"):
        env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path), WARMKIT_TRITON_TORCH_START=flag)
        out = subprocess.run(
            [sys.executable, "-c", code, tests_dir],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        made = "torch's CUDA starts on device 0 made in" in out.stderr
        assert made is (flag == "1"), out.stderr[-2000:]
        results[flag] = json.loads(out.stdout.strip().splitlines()[-1])
        assert results[flag]["alive"] == []  # the warmup's end waited for the thread
    print(f"\n[torch start] {json.dumps(results, indent=1)}")
    # the starts were made: most of the first calls' cost is gone (H100, session 21: 1.437 s
    # without, 0.078 s with; what is left is the kernels of these shapes, not the libraries)
    assert results["1"]["first_s"] < 0.25 * results["0"]["first_s"], results
