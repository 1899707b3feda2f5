"""On a CUDA GPU (the lead runs these on the H200): warm VectorAdd on the device; its first real
calls compile nothing and match torch; exports built ahead of time load with 0 compiles."""

from __future__ import annotations

import json

import pytest
from warmkit_cutedsl import CuteDSLBackend, CuteExecutor, VectorAdd

import warmkit
from warmkit import monitor

from .conftest import run_child

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        CuteDSLBackend().default_target() is None, reason="needs a CUDA GPU (none visible)"
    ),
]

SPACE = {"n": [1000, 1 << 20], "dtype": ["float32", "float16", "bfloat16"]}


def test_warm_on_device_then_first_calls_compile_nothing_and_match_torch():
    reg = warmkit.WarmupRegistry()
    reg.add(VectorAdd, **SPACE)
    report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), reg)
    assert len(report.entries) == 6
    assert all(isinstance(e, CuteExecutor) and e.primed for e in VectorAdd.executors.values())
    monitor.clear()
    add = VectorAdd()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in SPACE["n"]:
            a = torch.randn(n, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            torch.testing.assert_close(add(a, b), a + b)
    assert monitor.events() == ()


CHILD = """
import json, torch, warmkit
from warmkit_cutedsl import VectorAdd
reg = warmkit.WarmupRegistry()
reg.add(VectorAdd, n=4096, dtype="float32")
warmkit.monitor.arm("error")
report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), reg)
a = torch.randn(4096, device="cuda"); b = torch.randn(4096, device="cuda")
ok = bool(torch.equal(VectorAdd()(a, b), a + b))
print(json.dumps({"statuses": [e.status for e in report.entries], "events": len(warmkit.monitor.events()), "ok": ok}))
"""


def test_exports_built_ahead_of_time_load_in_a_new_process_with_zero_compiles(tmp_path, cute_cache):
    reg = warmkit.WarmupRegistry()
    reg.add(VectorAdd, n=4096, dtype="float32")
    out = tmp_path / "vadd.wkb"
    warmkit.build_bundle(reg, out, target="cuda:90", progress="off")  # the same as on a CPU host
    warmkit.install_bundle(out, cache_dirs={"cutedsl": tmp_path / "serving" / "warmkit-exports"})
    seen = json.loads(run_child(CHILD, tmp_path / "serving").stdout.strip().splitlines()[-1])
    assert seen == {"statuses": ["cached"], "events": 0, "ok": True}
