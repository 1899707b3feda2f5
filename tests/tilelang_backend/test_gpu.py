"""On a CUDA GPU (the lead runs these on the H200): warm TiledGemm on the device, then the first
real call makes no compile event and matches torch; a CPU-built bundle makes a new process compile
nothing. Skipped, saying so, where there is no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from warmkit_tilelang import TiledGemm, TileLangBackend, TileLangExecutor
from warmkit_tilelang import _tilelang_api as api

import warmkit
from warmkit import monitor

from .conftest import REPO, run_child

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        TileLangBackend().default_target() is None, reason="needs a CUDA GPU (none visible)"
    ),
]

SHAPES = [(64, 256, 128), (256, 512, 256)]


def _registry() -> warmkit.WarmupRegistry:
    reg = warmkit.WarmupRegistry()
    for m, n, k in SHAPES:
        reg.add(TiledGemm, m=m, n=n, k=k, dtype=["float16", "bfloat16"])
    return reg


def test_warm_on_device_then_the_first_real_calls_compile_nothing_and_match_torch():
    report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), _registry())
    assert {e.status for e in report.entries} <= {"compiled", "cached"}
    assert len(report.entries) == 2 * len(SHAPES)
    for executor in TiledGemm.executors.values():
        assert isinstance(executor, TileLangExecutor) and executor.primed
    monitor.clear()
    gemm = TiledGemm()
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k in SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            c = gemm(a, b)
            ref = (a.float() @ b.float()).to(dtype)
            torch.testing.assert_close(c, ref, rtol=2e-2, atol=2e-1)
    assert monitor.events() == ()  # error mode: any compile would have raised


def test_a_raw_call_of_the_jit_function_hits_what_warmup_filled():
    key = TiledGemm().dispatch(m=64, n=256, k=128)
    warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), _registry())
    args, kwargs = TiledGemm().compile_args(key)
    executor = TiledGemm.executors[key]
    assert TiledGemm.jit_function()(*args, **kwargs) is executor.jit_kernel


CHILD = """
import json, torch, warmkit
from warmkit_tilelang import TiledGemm
reg = warmkit.WarmupRegistry()
reg.add(TiledGemm, m=64, n=256, k=128)
report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), reg)
a = torch.randn(64, 128, device="cuda", dtype=torch.float16)
b = torch.randn(128, 256, device="cuda", dtype=torch.float16)
err = (TiledGemm()(a, b).float() - a.float() @ b.float()).abs().max().item()
print(json.dumps({"statuses": [e.status for e in report.entries], "events": len(warmkit.monitor.events()), "err": err}))
"""


def test_a_cpu_built_bundle_in_an_empty_cache_means_zero_compiles(tmp_path):
    """Built by the CLI in a process that sees no GPU (as on a CPU host), for cuda:90."""
    reg = warmkit.WarmupRegistry()
    reg.add(TiledGemm, m=64, n=256, k=128)
    manifest = reg.save(tmp_path / "warmup.json")
    out = tmp_path / "gemm.wkb"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TILELANG_CACHE_DIR": str(tmp_path / "build")}
    res = subprocess.run(
        [sys.executable, "-m", "warmkit", "bundle", "build", str(manifest), "--target", "cuda:90",
         "-o", str(out)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    serving = tmp_path / "serving"
    kernels = serving.joinpath(*api.cache_namespace().split("/"), "kernels")
    installed = warmkit.install_bundle(out, cache_dirs={"tilelang": kernels})
    assert len(installed.installed) == 1
    seen = json.loads(run_child(CHILD, serving).stdout.strip().splitlines()[-1])
    assert seen["statuses"] == ["cached"] and seen["events"] == 0 and seen["err"] < 0.5
