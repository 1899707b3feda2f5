"""``warmkit.prepare()`` with the real Triton backend: what its background setup does and leaves alone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from warmkit_triton import _setup
from warmkit_triton import _triton_api as api
from warmkit_triton._aot import AotDriver, aot_driver, parse_target

import warmkit
from warmkit import WarmupConfig, WarmupRegistry, monitor

from ._kernels import Add, raw_mul_kernel
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

ROOT = Path(__file__).resolve().parents[2]


def test_the_setup_does_the_one_time_work_of_a_first_warmup_in_a_fresh_process(tmp_path):
    script = textwrap.dedent(
        """
        import json, sys
        import warmkit

        warmkit.prepare(warmkit.WarmupConfig(target="cuda:90", backends=("triton",), jobs=1))
        # an empty warmup plans nothing and checks no target: it only joins the setup
        warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="off"), warmkit.WarmupRegistry())
        from triton.backends.nvidia import compiler as nv
        from warmkit_triton import _aot, _keycache

        print(json.dumps({
            "gluon": "triton.experimental.gluon" in sys.modules,
            "ptxas_help": _aot._ptxas_archs.cache_info().currsize,
            "ptxas_version": nv.get_ptxas_version.cache_info().currsize,
            "triton_key": _keycache.outcome(),
        }))
        """
    )
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "TRITON_CACHE_DIR": str(tmp_path / "c")}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**_base_env(), **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["gluon"] is True  # the specializer's lazy import, done
    assert got["ptxas_help"] == 1  # the target check's ptxas --help, done
    assert got["triton_key"] == "stored"  # the libtriton digest, computed (first run here)
    assert got["ptxas_version"] == 1  # the version every cache key holds, asked


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("WARMKIT_", "TRITON_"))}


def test_settings_made_after_prepare_are_the_ones_the_warmup_uses(triton_cache, monkeypatch):
    warmkit.prepare(WarmupConfig(target=AOT_TARGET, backends=("triton",), jobs=1))
    later = triton_cache.parent / "set-after-prepare"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(later))
    reg = WarmupRegistry()
    reg.add(Add, n=[1024], block=[64])
    report = warmkit.warmup(WarmupConfig(target=AOT_TARGET, progress="off", monitor="warn"), reg)
    assert [e.status for e in report.entries] == ["compiled"]
    assert list(later.glob("*/*.cubin")) and not list(triton_cache.glob("*/*.cubin"))
    # ... and the monitor it armed reports a compile the warmup did not cover
    assert monitor.mode() == "warn"
    drv = AotDriver(parse_target("cuda:90"))
    x = torch.empty(1000, dtype=torch.float32)
    with aot_driver(drv):
        try:
            raw_mul_kernel.run(x, torch.empty_like(x), 1000, 2.0, BLOCK=128, grid=(1,), warmup=True)
        finally:
            raw_mul_kernel.device_caches.pop(drv.device, None)
    assert [e.kind for e in monitor.events()] == ["compile"]


def test_a_target_this_ptxas_rejects_is_the_warmups_usage_error_as_without_prepare(triton_cache):
    warmkit.prepare(WarmupConfig(target="cuda:999", backends=("triton",), jobs=1))
    reg = WarmupRegistry()
    reg.add(Add, n=[1024], block=[64])
    with pytest.raises(ValueError, match="cuda:999"):
        warmkit.warmup(WarmupConfig(target="cuda:999", progress="off", monitor="off"), reg)
    # the setup's failure went with that warmup: the next one is not failed by it
    report = warmkit.warmup(WarmupConfig(target=AOT_TARGET, progress="off", monitor="off"), reg)
    assert [e.status for e in report.entries] == ["compiled"]


def _point_triton_at_another_ptxas(tmp_path, monkeypatch):
    """A fake ptxas that reports another version, set where Triton looks for ptxas."""
    other = tmp_path / "ptxas"
    other.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.99 (other)'\n")
    other.chmod(0o755)
    for var in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        monkeypatch.setenv(var, str(other))
    return other


def test_a_ptxas_set_after_prepare_is_the_one_whose_version_the_warmup_uses(tmp_path, monkeypatch):
    # Triton caches the ptxas version per arch for the process's life; prepare() asked the
    # bundled ptxas, then the engine points Triton at another one before warming up.
    api.forget_ptxas_version()
    warmkit.prepare(WarmupConfig(target="cuda:90", backends=("triton",), jobs=1))
    warmkit.warmup(WarmupConfig(progress="off", monitor="off"), WarmupRegistry())  # joins it
    bundled = api.ptxas_info(90)["version"]
    other = _point_triton_at_another_ptxas(tmp_path, monkeypatch)
    try:
        assert api.ptxas_info(90)["version"] == bundled  # stale: what Triton alone would use
        _setup.check()  # what compile_scope runs before a warmup's first key
        assert api.ptxas_info(90)["path"] == str(other)
        assert "(other)" in api.ptxas_info(90)["version"]
    finally:
        api.forget_ptxas_version()


def test_a_prepare_for_another_target_during_a_warmup_is_checked_by_its_own_warmup(
    tmp_path, monkeypatch
):
    api.forget_ptxas_version()
    warmkit.prepare(WarmupConfig(target="cuda:90", backends=("triton",), jobs=1))
    warmkit.warmup(WarmupConfig(progress="off", monitor="off"), WarmupRegistry())  # joins it
    # meanwhile (as if during another target's warmup) the check has run: cuda:90 stays primed
    _setup.check()
    bundled = api.ptxas_info(90)["version"]
    _point_triton_at_another_ptxas(tmp_path, monkeypatch)
    try:
        assert api.ptxas_info(90)["version"] == bundled  # stale until a check
        _setup.check()  # the cuda:90 warmup's own
        assert "(other)" in api.ptxas_info(90)["version"]
    finally:
        api.forget_ptxas_version()


def test_the_setup_leaves_the_driver_alone_while_torch_is_being_imported(monkeypatch):
    """Choosing Triton's driver imports torch: from the setup thread while the engine imports it too,
    one of them got a partially initialized torch. The driver waits for a settled torch."""
    import importlib.machinery
    import types

    from warmkit_triton import _setup
    from warmkit_triton import _triton_api as api

    asked = []
    monkeypatch.setattr(api, "default_driver", lambda: asked.append(1))
    importing = types.ModuleType("torch")
    importing.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    importing.__spec__._initializing = True  # what importlib sets while the module runs
    monkeypatch.setitem(sys.modules, "torch", importing)
    _setup.prepare(None)
    assert asked == []
    importing.__spec__._initializing = False
    _setup.prepare(None)
    assert asked == [1]


def test_the_setup_only_logs_a_specializer_that_met_a_half_imported_torch():
    """Triton 3.9's C specializer reads torch off sys.modules: while the engine imports torch
    right after prepare(), its first call in the setup thread fails; that is logged, the first
    key primes it. Any other failure of that call is still raised."""
    script = textwrap.dedent(
        """
        import importlib.machinery, sys, types
        importing = types.ModuleType("torch")
        importing.__spec__ = importlib.machinery.ModuleSpec("torch", None)
        importing.__spec__._initializing = True  # another thread is running its import
        sys.modules["torch"] = importing
        from warmkit_triton import _setup
        from warmkit_triton import _triton_api as api

        try:
            api.prime_specializer()
        except AttributeError as exc:
            print("race:", "partially initialized module 'torch'" in str(exc))
        _setup.prepare(None)  # no raise: logged
        def other():
            raise AttributeError("something else")
        api.prime_specializer = other
        try:
            _setup.prepare(None)
        except AttributeError as exc:
            print("raised:", exc)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=_base_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # Triton 3.6's specializer does not read the half-imported torch (no race line): there
    # only the re-raise is checked; on 3.9 the setup went on past the race (exit 0)
    lines = proc.stdout.strip().splitlines()
    race = [] if str(api.triton_version()).startswith("3.6.") else ["race: True"]
    assert lines == [*race, "raised: something else"]
