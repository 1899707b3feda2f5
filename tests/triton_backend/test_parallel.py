"""Parallel compile under AsyncCompileMode: same entries as serial, really concurrent, deduplicated."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import attrs
import pytest
from triton import knobs
from warmkit_triton import TritonBackend, TritonKernel, WarmupTensor
from warmkit_triton._entry import AOT_RECORD

import warmkit

from ._kernels import Add, add_kernel
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

SPACE = {"dtype": ["float32", "float16"], "n": [64, 65, 1], "block": [128]}


def warm(cache: Path, monkeypatch, jobs: int, **space) -> warmkit.WarmupReport:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    Add.clear_executors()
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(**space)
    return warmkit.warmup(
        warmkit.WarmupConfig(target=AOT_TARGET, jobs=jobs, progress="off", monitor="off"),
        registry=reg,
    )


def entries(cache: Path) -> dict[str, set[str]]:
    # dot-directories are warmkit's own (.warmkit-locks), not entries
    return {
        d.name: {f.name for f in d.iterdir()}
        for d in cache.iterdir()
        if d.is_dir() and not d.name.startswith(".")
    }


def test_parallel_gives_the_same_entries_as_serial(tmp_path, monkeypatch):
    serial = warm(tmp_path / "serial", monkeypatch, 1, **SPACE)
    parallel = warm(tmp_path / "parallel", monkeypatch, 2, **SPACE)
    assert [e.status for e in serial.entries] == ["compiled"] * 6
    assert sorted(e.status for e in parallel.entries) == ["compiled"] * 6
    a, b = entries(tmp_path / "serial"), entries(tmp_path / "parallel")
    assert len(a) == 6 and a == b
    for name in a:
        ptx_a = (tmp_path / "serial" / name / "add_kernel.ptx").read_text()
        assert ptx_a == (tmp_path / "parallel" / name / "add_kernel.ptx").read_text()
        assert AOT_RECORD in a[name]


def test_parallel_compiles_really_overlap(tmp_path, monkeypatch):
    spans: list[tuple[str, float, float]] = []

    def listener(**kw):
        if not kw["cache_hit"]:
            end = time.perf_counter()
            spans.append((threading.current_thread().name, end - kw["times"].total / 1e6, end))

    knobs.compilation.listener = listener
    warm(
        tmp_path / "c",
        monkeypatch,
        2,
        dtype=["float32", "float16", "bfloat16"],
        n=[64, 65],
        block=[64, 128],
    )
    assert len(spans) == 12
    threads = {name for name, _, _ in spans}
    assert len(threads) >= 2 and all(name.startswith("warmkit-triton") for name in threads)
    spans.sort(key=lambda s: s[1])
    overlaps = sum(1 for (_, s0, e0), (_, s1, _) in itertools.pairwise(spans) if s1 < e0)
    assert overlaps >= 1, spans


class Tagged(TritonKernel):
    """Two keys (tags) whose launches are identical: one Triton cache entry."""

    fn = add_kernel

    @attrs.frozen
    class CompileKey:
        tag: str

    def dispatch(self, *, tag: str = "a") -> CompileKey:
        return self.CompileKey(tag)

    def warmup_args(self, key: CompileKey):
        t = WarmupTensor("float32", (256,))
        return (t, t, t, 256), {"BLOCK": 256}

    def launch_options(self, key: CompileKey):
        return {"num_warps": 2}


@pytest.mark.parametrize("jobs", [1, 2])
def test_keys_hitting_one_triton_entry_compile_once(triton_cache, jobs):
    compiles = []
    knobs.compilation.listener = lambda **kw: compiles.append(kw["cache_hit"])
    Tagged.clear_executors()
    backend = TritonBackend()
    keys = [Tagged().dispatch(tag=t) for t in "abcd"]
    with backend.compile_scope("cuda:90", jobs):
        if jobs == 1:
            arts = [backend.compile(Tagged(), k, "cuda:90") for k in keys]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(4) as pool:
                arts = list(pool.map(lambda k: backend.compile(Tagged(), k, "cuda:90"), keys))
    assert len({a.hash for a in arts}) == 1
    assert compiles.count(False) == 1, compiles
    assert sum(not a.cache_hit for a in arts) <= 1
    assert len([p for p in triton_cache.iterdir() if not p.name.startswith(".")]) == 1


def test_failure_in_one_parallel_key_is_attributed(triton_cache):
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(n=[64], block=[128, 100])  # BLOCK=100: tl.arange needs a power of 2
    with pytest.raises(warmkit.WarmupError) as exc:
        warmkit.warmup(
            warmkit.WarmupConfig(
                target=AOT_TARGET, jobs=2, progress="off", monitor="off", on_error="collect"
            ),
            registry=reg,
        )
    failed = list(exc.value.failures)
    assert len(failed) == 1 and failed[0].key.block == 100
    # the scope closed cleanly: no FutureKernel placeholders left in Triton's in-memory caches
    from triton.runtime._async_compile import FutureKernel

    for entry in add_kernel.device_caches.values():
        assert not any(isinstance(v, FutureKernel) for v in entry[0].values())


_FIRST_TORCH_KERNELS = """
import attrs
import triton
import triton.language as tl
from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep


@triton.jit
def copy_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


class Copy(TritonKernel):
    fn = copy_kernel

    @attrs.frozen
    class CompileKey:
        block: int

    def dispatch(self, *, block=128):
        return self.CompileKey(block)

    def warmup_args(self, key):
        n = specialization_rep(1024)  # Triton's C specializer, then this thread's first torch dtype
        t = WarmupTensor("float32", (n,))
        return (t, t, n), {"BLOCK": key.block}
"""

_FIRST_TORCH_SCRIPT = """
import sys
import warmkit
from first_torch import Copy

assert "torch" not in sys.modules
reg = warmkit.WarmupRegistry()
reg.add(Copy, block=[32, 64, 128, 256])
config = warmkit.WarmupConfig(target=sys.argv[1], jobs=2, progress="off", monitor="off")
report = warmkit.warmup(config, reg)
print(report.count("compiled"), report.ok)
"""


def test_compile_threads_of_a_fresh_process_do_not_race_the_import_of_torch(tmp_path):
    """On a host without a GPU nothing imports torch before the warmup: one compile thread
    imported it for a WarmupTensor's dtype while another ran Triton's C specializer, which
    read torch.Tensor off the half-imported module and failed its key."""
    import os
    import subprocess
    import sys

    (tmp_path / "first_torch.py").write_text(_FIRST_TORCH_KERNELS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMKIT_", "TRITON_"))}
    env.update(PYTHONPATH=str(tmp_path), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_TORCH_SCRIPT, AOT_TARGET],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["4", "True"]
