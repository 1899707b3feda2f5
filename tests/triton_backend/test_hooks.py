"""The runtime hooks: events for raw @triton.jit kernels, chaining, error mode before compile.

A CPU-only host has no GPU to launch on, so "runtime" launches here are Triton's
own JIT path (``fn.run(..., warmup=True)``, which binds, looks up the in-memory
cache, fires the cache hook and compiles exactly like a launch) under a driver
that reports sm_90. That is the path a GPU launch takes up to the launch itself.
"""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch
from triton import knobs
from warmkit_triton import TritonBackend
from warmkit_triton._aot import AotDriver, aot_driver, parse_target
from warmkit_triton._hooks import describe_specialization

import warmkit
from warmkit import RuntimeCompileError, monitor
from warmkit._plugin.discovery import get_backend

from ._kernels import Add, raw_mul_kernel
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

DRIVER = AotDriver(parse_target("cuda:90"))


@contextlib.contextmanager
def fake_gpu():
    """Triton's JIT path as on an sm_90 GPU, with in-memory caches dropped afterwards."""
    with aot_driver(DRIVER):
        try:
            yield
        finally:
            raw_mul_kernel.device_caches.pop(DRIVER.device, None)


def launch(n=1000, factor=2.0, block=128, **options):
    x = torch.empty(n, dtype=torch.float32)
    return raw_mul_kernel.run(
        x, torch.empty_like(x), n, factor, BLOCK=block, grid=(1,), warmup=True, **options
    )


def forget_in_memory():
    raw_mul_kernel.device_caches.pop(DRIVER.device, None)


def arm(mode: str) -> None:
    get_backend("triton")  # loaded, so arm() installs its hooks
    monitor.arm(mode)


def test_raw_kernel_events_compile_then_disk_hit(triton_cache):
    arm("warn")
    with fake_gpu():
        launch()
        assert [e.kind for e in monitor.events()] == ["compile"]
        launch()  # in-memory hit: no event
        assert len(monitor.events()) == 1
        forget_in_memory()  # a new process: in-memory cache empty, disk cache warm
        launch()
    compile_ev, disk_ev = monitor.events()
    assert compile_ev.kernel.endswith("_kernels.raw_mul_kernel")
    assert compile_ev.backend == "triton" and compile_ev.seconds > 0
    assert (
        compile_ev.key
        == "x:*fp32[div16], out:*fp32[div16], n:i32, factor:fp32, BLOCK=128 | num_warps=4, num_stages=3"
    )
    assert disk_ev.kind == "disk_hit" and disk_ev.key == compile_ev.key and 0 < disk_ev.seconds
    assert disk_ev.seconds < compile_ev.seconds


def test_each_specialization_is_its_own_event(triton_cache):
    arm("warn")
    with fake_gpu():
        launch(n=1024)
        launch(n=1025)  # i32 without divisibility: another variant
        launch(n=1)  # 1 is a constant
        launch(n=1024, num_warps=8)
    keys = [e.key for e in monitor.events()]
    assert len(set(keys)) == 4
    assert (
        "n:i32[div16]" in keys[0]
        and "n:i32," in keys[1]
        and "n=1" in keys[2]
        and "num_warps=8" in keys[3]
    )


def test_warn_mode_logs_once_per_kernel_and_key(triton_cache, caplog):
    arm("warn")
    caplog.set_level(logging.WARNING, logger="warmkit.monitor")
    with fake_gpu():
        launch()
        forget_in_memory()
        launch()
        launch(n=1024)
    warnings = [r for r in caplog.records if "runtime compile after warmup" in r.getMessage()]
    assert len(warnings) == 2


def test_error_mode_raises_before_compiling(triton_cache):
    listened = []
    knobs.compilation.listener = lambda **kw: listened.append(kw["cache_hit"])
    arm("error")
    with fake_gpu(), pytest.raises(RuntimeCompileError) as exc:
        launch()
    assert exc.value.backend == "triton" and exc.value.kernel.endswith("raw_mul_kernel")
    assert "BLOCK=128" in str(exc.value.key)
    assert listened == []  # triton.compile never ran
    assert not any(triton_cache.glob("*/*.cubin")) if triton_cache.exists() else True
    assert [e.kind for e in monitor.events()] == ["refused"]


def test_allow_window_compiles_and_records_the_reason(triton_cache):
    arm("error")
    with fake_gpu(), monitor.allow("adapter loaded at runtime"):
        launch()
    (event,) = monitor.events()
    assert event.kind == "compile" and event.allowed == "adapter loaded at runtime"


def test_hooks_chain_to_previous_and_restore_them(triton_cache):
    calls = []

    def prev_hook(**kw):
        calls.append(("hook", kw["is_manual_warmup"]))

    def prev_listener(**kw):
        calls.append(("listener", kw["cache_hit"]))

    knobs.runtime.jit_cache_hook = prev_hook
    knobs.compilation.listener = prev_listener
    arm("warn")
    assert knobs.runtime.jit_cache_hook is not prev_hook
    with fake_gpu():
        launch()
    assert calls == [("hook", True), ("listener", False)]
    assert len(monitor.events()) == 1
    arm("error")  # re-arming is idempotent: still one layer of ours
    assert knobs.runtime.jit_cache_hook.previous is prev_hook
    monitor.disarm()
    assert knobs.runtime.jit_cache_hook is prev_hook
    assert knobs.compilation.listener is prev_listener
    monitor.disarm()  # idempotent
    assert knobs.runtime.jit_cache_hook is prev_hook


def test_a_previous_hook_that_vetoes_the_compile_is_respected(triton_cache):
    knobs.runtime.jit_cache_hook = lambda **kw: True  # "already handled": Triton skips the compile
    arm("error")
    with fake_gpu():
        assert launch() is None
    assert monitor.events() == ()


def test_hook_installed_on_top_of_ours_keeps_working(triton_cache):
    """Someone chains onto our hook; we uninstall and re-install: no broken chain, no double events."""
    arm("warn")
    ours = knobs.runtime.jit_cache_hook
    seen = []

    def theirs(**kw):
        seen.append(kw["key"])
        return ours(**kw)

    knobs.runtime.jit_cache_hook = theirs
    monitor.disarm()
    assert knobs.runtime.jit_cache_hook is theirs  # theirs stays; ours is a pass-through inside it
    with fake_gpu():
        launch()
    assert len(seen) == 1 and monitor.events() == ()
    arm("warn")
    with fake_gpu():
        launch(n=1024)
    assert len(seen) == 2 and len(monitor.events()) == 1  # reported once, not twice


def test_warmkit_own_compiles_are_not_reported(triton_cache):
    arm("error")  # any reported event would raise
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(n=[64, 65])
    report = warmkit.warmup(
        warmkit.WarmupConfig(target=AOT_TARGET, progress="off", monitor="error", jobs=2),
        registry=reg,
    )
    assert (
        report.ok if hasattr(report, "ok") else all(e.status == "compiled" for e in report.entries)
    )
    backend = TritonBackend()
    backend.compile(Add(), Add().dispatch(n=66), "cuda:90")  # direct call: managed too
    assert monitor.events() == ()


def test_tritonkernel_path_never_compiles_silently(triton_cache):
    arm("error")
    kernel = Add()
    key = kernel.dispatch(n=64)
    x = torch.empty(64)
    with pytest.raises(RuntimeCompileError) as exc:
        kernel.run(key, (1,), x, x, x, 64, BLOCK=128)
    assert exc.value.key == key and exc.value.kernel == Add.name
    assert [e.kind for e in monitor.events()] == ["refused"]


def test_describe_specialization():
    text = describe_specialization(
        {"x": "*fp16", "n": "i32", "B": "constexpr", "f": "fp32"},
        {(2,): 64},
        {(0,): [["tt.divisibility", 16]], (1,): []},
        {"num_warps": 8, "num_stages": 2, "num_ctas": 1},
    )
    assert text == "x:*fp16[div16], n:i32, B=64, f:fp32 | num_warps=8, num_stages=2"
