"""The monitor hooks: raw @tilelang.jit compiles are reported, error mode refuses before compiling,
hooks chain with whatever was installed before, and uninstalling restores it exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tilelang.cache.kernel_cache import KernelCache
from tilelang.jit import JITImpl
from warmkit_tilelang import TileLangBackend, _hooks
from warmkit_tilelang import _tilelang_api as api

from warmkit import RuntimeCompileError, monitor

from . import _programs

NAME = f"{_programs.__name__}.scale"


def _events():
    return [e for e in monitor.events() if e.backend == "tilelang"]


def _fresh_function():
    """``_programs.scale`` with an empty in-process cache (as in a new process)."""
    _programs.scale._kernel_cache.clear()
    _programs.scale._call_form_cache.clear()
    api.forget_in_memory()
    return _programs.scale


def _entries(backend: TileLangBackend) -> set[str]:
    root = backend.cache_dir()
    return {p.name for p in root.iterdir()} if root.exists() else set()


def test_a_raw_jit_compile_then_a_disk_hit_are_reported_with_their_name(tilelang_cache):
    backend = TileLangBackend()
    backend.install_monitor()
    monitor.arm("warn")
    fn = _fresh_function()
    fn(256, 2.0)
    fn(256, 2.0)  # an in-process hit: no event
    (compiled,) = _events()
    assert compiled.kernel == NAME and compiled.kind == "compile" and compiled.seconds > 0
    assert "(256, 2.0)" in compiled.key and "cache key" in compiled.key
    _fresh_function()(256, 2.0)  # from disk now
    assert [e.kind for e in _events()] == ["compile", "disk_hit"]
    assert _events()[1].key == compiled.key


def test_error_mode_refuses_before_tilelang_loads_or_compiles_anything(tilelang_cache, monkeypatch):
    backend = TileLangBackend()
    monitor.arm("error")
    backend.install_monitor()
    built = []
    import tilelang.cache.kernel_cache as kc

    real_jit_kernel = kc.JITKernel
    monkeypatch.setattr(
        kc, "JITKernel", lambda *a, **k: built.append(a) or real_jit_kernel(*a, **k)
    )
    with pytest.raises(RuntimeCompileError) as info:
        _fresh_function()(512, 3.0)
    assert info.value.kernel == NAME
    assert built == [] and _entries(backend) == set()
    assert [e.kind for e in _events()] == ["refused"]
    with monitor.allow("a test compiles on purpose"):
        _fresh_function()(512, 3.0)
    assert len(built) == 1 and len(_entries(backend)) == 1
    assert _events()[-1].allowed == "a test compiles on purpose"


def test_error_mode_refuses_with_the_cache_disabled_too(tilelang_cache, monkeypatch):
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    monitor.arm("error")
    TileLangBackend().install_monitor()
    with pytest.raises(RuntimeCompileError, match="cache disabled"):
        _fresh_function()(128, 1.5)


def test_hooks_chain_with_a_wrapper_installed_before_and_uninstall_restores_it_exactly(
    tilelang_cache,
):
    original = KernelCache.__dict__["cached"]
    seen = []

    def foreign(self, *args, **kwargs):  # e.g. vLLM's own monitor
        seen.append("foreign")
        return original(self, *args, **kwargs)

    KernelCache.cached = foreign
    try:
        backend = TileLangBackend()
        monitor.arm("warn")
        backend.install_monitor()
        assert _hooks.installed() and KernelCache.__dict__["cached"] is not foreign
        _fresh_function()(384, 2.0)
        assert seen == ["foreign"] and [e.kind for e in _events()] == ["compile"]
        backend.install_monitor()  # idempotent: no second layer
        _fresh_function()(384, 4.0)
        assert seen == ["foreign", "foreign"] and len(_events()) == 2
        backend.uninstall_monitor()
        assert KernelCache.__dict__["cached"] is foreign
        assert "_load_kernel_from_disk" in KernelCache.__dict__
        assert JITImpl.__dict__["compile"].__name__ == "compile"
        assert not hasattr(JITImpl.__dict__["compile"], "__warmkit_wrapper__")
        _fresh_function()(384, 2.0)
        assert len(_events()) == 2  # nothing reported after uninstall
    finally:
        KernelCache.cached = original


def test_a_wrapper_installed_on_top_of_ours_keeps_working_after_we_uninstall(tilelang_cache):
    backend = TileLangBackend()
    monitor.arm("warn")
    backend.install_monitor()
    ours = KernelCache.__dict__["cached"]
    seen = []

    def on_top(self, *args, **kwargs):
        seen.append("on top")
        return ours(self, *args, **kwargs)

    KernelCache.cached = on_top
    try:
        backend.uninstall_monitor()
        assert KernelCache.__dict__["cached"] is on_top  # their chain is left alone
        _fresh_function()(640, 2.0)
        assert seen == ["on top"] and _events() == []  # ours is a pass-through now
    finally:
        KernelCache.cached = ours.__warmkit_wrapper__.previous


def test_warmkit_own_compiles_are_not_reported_twice(tilelang_cache):
    from warmkit_tilelang import TiledGemm

    import warmkit

    from .conftest import AOT_TARGET

    monitor.arm("error")
    TileLangBackend().install_monitor()
    reg = warmkit.WarmupRegistry()
    reg.add(TiledGemm, m=64, n=128, k=64)
    report = warmkit.warmup(warmkit.WarmupConfig(target=AOT_TARGET, progress="off"), reg)
    assert [e.status for e in report.entries] == ["compiled"]
    assert _events() == []


def test_disarming_the_monitor_does_not_import_tilelang():
    """A warmup with monitor="off" disarms it, which uninstalls every loaded backend's hooks: the
    TileLang backend, loaded by warmkit.prepare()'s plugin scan, must not import TileLang (1.3 s) to
    remove hooks it never installed."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from warmkit import monitor\nfrom warmkit._plugin import discovery as _plugins\n"
        "backend = _plugins.get_backend('tilelang')\n"
        "monitor.arm('off')\n"
        "backend.uninstall_monitor()\n"
        "print('tilelang' in sys.modules, type(backend).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "TileLangBackend"]


def test_arming_every_backend_imports_no_dsl_and_the_hooks_go_in_at_its_import():
    """`warmkit record` of a Triton engine loads and arms every backend: no DSL import (~3 s)."""
    code = (
        "import json, sys\n"
        "import warmkit.monitor\n"
        "from warmkit._plugin.discovery import load_every_backend\n"
        "from warmkit_tilelang import _hooks\n"
        "load_every_backend()\n"
        "warmkit.monitor.arm('warn')\n"
        "before = sorted(m for m in ('tilelang', 'tvm', 'cutlass', 'torch') if m in sys.modules)\n"
        "import tilelang\n"
        "print(json.dumps([before, _hooks.installed()]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [[], True]
