"""Ahead-of-time compiles on a CPU-only host: real sm_90/sm_80 compiles, hash equality, validity, portability."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
import torch
import triton
from triton import knobs
from triton._C.libtriton import get_cache_invalidating_env_vars
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.cache import get_cache_key
from triton.runtime.driver import driver
from triton.runtime.jit import create_function_from_signature
from warmkit_triton import (
    AotArtifact,
    TritonBackend,
    check_aot_cache,
    parse_target,
    validity_record,
)
from warmkit_triton._entry import AOT_RECORD, relocate_cache_entry

import warmkit

from ._kernels import Add, add_kernel
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")


def aot(kernel, key, target="cuda:90", jobs=1) -> AotArtifact:
    backend = TritonBackend()
    with backend.compile_scope(target, jobs):
        return backend.compile(kernel, key, target)


def runtime_hash(fn, target: GPUTarget, args, kwargs) -> str:
    """The cache hash Triton's JIT path computes for fn[grid](*args, **kwargs) on ``target``.

    Rebuilt from Triton's own pieces (its generated binder, JITFunction._pack_args,
    ASTSource, get_cache_key), with the same extra kwargs JITFunction.run adds.
    """
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    if hasattr(knobs.compilation, "fpsan_homomorphic_casts"):  # Triton >= 3.9
        kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound, specialization, options
    )
    src = ASTSource(fn, signature, constexprs, attrs)
    key = get_cache_key(src, backend, options, get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.mark.parametrize(
    "target,arch,ptx_target", [("cuda:90", 90, "sm_90a"), ("cuda:80", 80, "sm_80")]
)
def test_real_aot_compile(triton_cache, target, arch, ptx_target):
    art = aot(Add(), Add().dispatch(n=4096, block=256), target)
    assert art.target == target and art.name == "add_kernel" and not art.cache_hit
    entry = triton_cache / art.entry_dir.rsplit("/", 1)[-1]
    assert entry.is_dir()
    meta = json.loads((entry / "add_kernel.json").read_text())
    assert meta["target"]["arch"] == arch and meta["num_warps"] == 4 and meta["hash"] == art.hash
    assert f".target {ptx_target}" in (entry / "add_kernel.ptx").read_text()
    cubin = (entry / "add_kernel.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF"
    record = json.loads((entry / AOT_RECORD).read_text())
    assert record["target"] == target and record["hash"] == art.hash
    assert "Add.CompileKey" in record["key"]
    # what building its launcher on the GPU host needs: the signature's types, in order
    sig = record["launcher"]["signature"]
    assert [name for name, _ in sig] == ["x", "y", "out", "n", "BLOCK"]
    assert sig[0][1] == sig[2][1] == "*fp32" and sig[4][1] == "constexpr"
    assert art.launcher == record["launcher"]
    # nothing of the AOT driver is left in the function's in-memory caches
    assert not [d for d in add_kernel.device_caches if str(d).startswith("warmkit-aot")]
    with pytest.raises(RuntimeError, match="cannot launch"):
        art((1,))


def test_the_aot_record_is_rewritten_only_when_its_data_differs(triton_cache):
    key = Add().dispatch(n=4096, block=128)
    art = aot(Add(), key)
    record = triton_cache / art.entry_dir.rsplit("/", 1)[-1] / AOT_RECORD
    data = json.loads(record.read_text())
    record.write_text(json.dumps(data))  # the same data, another layout (an older writer's)
    inode = record.stat().st_ino
    assert aot(Add(), key).cache_hit
    assert record.stat().st_ino == inode  # left as it was: a rewrite replaces the file
    record.write_text(json.dumps({**data, "kernel": "someone else"}))
    assert aot(Add(), key).cache_hit
    assert json.loads(record.read_text()) == data and record.stat().st_ino != inode
    record.write_text("{ torn")
    aot(Add(), key)
    assert json.loads(record.read_text()) == data


def test_aot_hash_equals_triton_jit_path_hash(triton_cache):
    """Same call, real tensors, Triton's own binder/_pack_args/get_cache_key: the same hash, then a disk hit."""
    kernel = Add()
    key = kernel.dispatch(dtype="float16", n=1 << 20, block=512)
    art = aot(kernel, key, "cuda:90")
    x = torch.empty(1 << 20, dtype=torch.float16)
    args, kwargs = (
        (x, x, torch.empty_like(x), 1 << 20),
        {"BLOCK": 512, **kernel.launch_options(key)},
    )
    assert runtime_hash(add_kernel, GPUTarget("cuda", 90, 32), args, kwargs) == art.hash
    # and for another target the runtime would look up another entry
    assert runtime_hash(add_kernel, GPUTarget("cuda", 80, 32), args, kwargs) != art.hash
    # triton.compile of that source finds the AOT entry on disk
    hits = []
    knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(add_kernel.signature, add_kernel.params, backend)
    full = dict(kwargs, debug=False, instrumentation_mode=knobs.compilation.instrumentation_mode)
    if hasattr(knobs.compilation, "fpsan_homomorphic_casts"):
        full["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    bound, spec, opts = binder(*args, **full)
    opts, sig, constexprs, attrs = add_kernel._pack_args(backend, full, bound, spec, opts)
    compiled = triton.compile(
        ASTSource(add_kernel, sig, constexprs, attrs),
        target=GPUTarget("cuda", 90, 32),
        options=opts.__dict__,
    )
    assert compiled.hash == art.hash and hits == [True]


def test_second_aot_is_a_disk_hit_and_in_memory_state_is_dropped(triton_cache):
    kernel = Add()
    key = kernel.dispatch(n=100)
    first = aot(kernel, key)
    second = aot(kernel, key)
    assert first.hash == second.hash and not first.cache_hit and second.cache_hit


def test_validity_record():
    rec = validity_record("cuda:90")
    assert rec["target"] == "cuda:90" and rec["triton_version"] == triton.__version__
    assert len(rec["triton_key_sha256"]) == 64
    import sys

    assert rec["python"]["cache_tag"] == sys.implementation.cache_tag
    assert "Cuda compilation tools" in rec["ptxas"]["version"]
    assert rec["cache_dir"].endswith("triton-cache")
    assert rec["env"] == dict(get_cache_invalidating_env_vars())


def test_cache_invalidating_env_is_recorded_and_changes_the_hash(triton_cache, monkeypatch):
    """TRITON_DEFAULT_FP_FUSION=1 is Triton's default, yet setting it gives another entry."""
    key = Add().dispatch(n=64)
    plain = aot(Add(), key)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    fused = aot(Add(), key)
    assert fused.hash != plain.hash
    rec = json.loads((triton_cache / fused.entry_dir.rsplit("/", 1)[-1] / AOT_RECORD).read_text())
    assert rec["validity"]["env"].get("TRITON_DEFAULT_FP_FUSION") in ("1", "true")
    # this process (variable set) would not find the plain entry: the check says why
    problems = check_aot_cache(triton_cache)
    assert any("env differs" in p for p in problems), problems


def test_copied_cache_misses_until_relocated(triton_cache, tmp_path, monkeypatch):
    """Group files hold absolute paths: a copy misses (or reads the original); relocation fixes it."""
    art = aot(Add(), Add().dispatch(n=64))
    assert check_aot_cache(triton_cache) == []
    copy = tmp_path / "copied-cache"
    shutil.copytree(triton_cache, copy)
    problems = check_aot_cache(copy)
    assert len(problems) == 1 and "points outside" in problems[0]

    def lookup() -> bool:
        hits = []
        with knobs.compilation.scope():
            knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
            aot(Add(), Add().dispatch(n=64))
        return hits == [True]

    monkeypatch.setenv("TRITON_CACHE_DIR", str(copy))
    shutil.rmtree(triton_cache)
    copy2 = tmp_path / "copy2"
    shutil.copytree(copy, copy2)
    assert not lookup()  # the original is gone: Triton recompiles into the copy
    monkeypatch.setenv("TRITON_CACHE_DIR", str(copy2))
    entry = copy2 / art.entry_dir.rsplit("/", 1)[-1]
    relocate_cache_entry(entry, entry)
    assert check_aot_cache(copy2) == []
    assert lookup()  # relocated: a disk hit


def test_backend_relocate_is_the_bundle_hook(tmp_path):
    staged = tmp_path / "staged" / "ENTRY"
    staged.mkdir(parents=True)
    (staged / "__grp__k.json").write_text(
        json.dumps({"child_paths": {"k.json": "/elsewhere/ENTRY/k.json"}})
    )
    final = tmp_path / "cache" / "ENTRY"
    TritonBackend().relocate_cache_entry(staged, final)
    data = json.loads((staged / "__grp__k.json").read_text())
    assert data == {"child_paths": {"k.json": str(final / "k.json")}}


@pytest.mark.parametrize(
    "text,arch",
    [
        ("cuda:90", 90),
        ("cuda:80", 80),
        ("cuda:100", 100),
        ("sm_90", 90),
        ("sm90", 90),
        ("CUDA:120", 120),
        ("cuda:9.0", 90),
    ],
)
def test_parse_target(text, arch):
    t = parse_target(text)
    assert (t.backend, t.arch, t.warp_size) == ("cuda", arch, 32) and str(t) == f"cuda:{arch}"


@pytest.mark.parametrize(
    "bad", ["cuda", "cuda:", "gpu:90", "hip:gfx942", "cuda:sm_9x", "cuda:60", "90a", ""]
)
def test_unknown_target_string_is_a_clear_error(bad):
    with pytest.raises(ValueError) as exc:
        parse_target(bad)
    assert repr(bad) in str(exc.value) and "cuda:90" in str(exc.value)
    backend = TritonBackend()
    with pytest.raises(ValueError, match="cuda:80"):
        backend.compile(Add(), Add().dispatch(), bad)
    with pytest.raises(ValueError, match="accepted"), backend.compile_scope(bad, 1):
        pass
    with pytest.raises(TypeError):
        parse_target(90)  # type: ignore[arg-type]


def test_aot_driver_is_scoped_to_the_compiling_context(triton_cache):
    """While an AOT scope is open, other threads still get the real driver (here: none, as without warmkit)."""
    seen = {}

    def other_thread():
        try:
            seen["target"] = driver.active.get_current_target()
        except RuntimeError as exc:
            seen["error"] = str(exc)

    backend = TritonBackend()
    with backend.compile_scope("cuda:80", 1):
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        art = backend.compile(Add(), Add().dispatch(n=32), "cuda:80")
    assert art.target == "cuda:80"
    if torch.cuda.is_available():  # pragma: no cover - GPU host
        assert seen["target"].arch != 80 or seen["target"].backend == "cuda"
    else:
        assert "active drivers" in seen["error"]
    if not torch.cuda.is_available():
        assert backend.default_target() is None


def test_warmkit_warmup_reports_compiled_then_cached(triton_cache):
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(n=[64, 65], block=128)
    cfg = warmkit.WarmupConfig(target=AOT_TARGET, progress="off", monitor="off", jobs=1)
    first = warmkit.warmup(cfg, registry=reg)
    assert [e.status for e in first.entries] == ["compiled", "compiled"]
    Add.clear_executors()  # a new process would have no executors: only the disk cache
    second = warmkit.warmup(cfg, registry=reg)
    assert [e.status for e in second.entries] == ["cached", "cached"]
    assert len(list(triton_cache.glob(f"*/{AOT_RECORD}"))) == 2
    assert check_aot_cache() == []


def test_a_checked_aot_hit_is_cached_whatever_an_older_compile_outcome_says(triton_cache):
    # A warm AOT key is checked, not read (_probe.aot_hit): Triton's listener records no
    # outcome for it, so one left over from an earlier compile of that hash must not make it
    # "compiled".
    from warmkit_triton import _hooks
    from warmkit_triton._entry import entry_hash

    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(n=[64], block=128)
    cfg = warmkit.WarmupConfig(target=AOT_TARGET, progress="off", monitor="off", jobs=1)
    warmkit.warmup(cfg, registry=reg)
    Add.clear_executors()
    (digest,) = [entry_hash(d) for d in triton_cache.iterdir() if entry_hash(d)]
    with _hooks._lock:
        _hooks._outcomes[digest] = False  # stale: "compiled"
    again = warmkit.warmup(cfg, registry=reg)
    assert [e.status for e in again.entries] == ["cached"]
    assert _hooks.pop_outcome(digest) is None  # and the stale one is gone


def test_an_aot_hit_reads_the_metadata_in_its_entry_not_where_the_group_file_points(
    triton_cache, tmp_path
):
    # An entry without an integrity record (as Triton writes one) whose group file names a
    # metadata file elsewhere: the checked hit reads the entry's own file, which the structural
    # check looked at, never the path that came from the group file.
    kernel = Add()
    key = kernel.dispatch(n=4096, block=64)
    art = aot(kernel, key)
    entry = triton_cache / art.entry_dir.rsplit("/", 1)[-1]
    (entry / "warmkit-integrity.json").unlink(missing_ok=True)
    (grp,) = entry.glob("__grp__*.json")
    doc = json.loads(grp.read_text())
    elsewhere = tmp_path / "elsewhere" / "add_kernel.json"
    elsewhere.parent.mkdir()
    meta = json.loads((entry / "add_kernel.json").read_text())
    elsewhere.write_text(json.dumps({**meta, "name": "not_this_one"}))
    doc["child_paths"]["add_kernel.json"] = str(elsewhere)
    grp.write_text(json.dumps(doc))
    backend = TritonBackend()
    with backend.compile_scope(AOT_TARGET, 1):
        assert backend.cache.entry_key(kernel, key, AOT_TARGET) == art.hash
        hit = backend.compile(kernel, key, AOT_TARGET)
    assert hit.cache_hit and hit.hash == art.hash and hit.name == "add_kernel"


def test_aot_without_scope_and_fingerprint(triton_cache):
    backend = TritonBackend()
    art = backend.compile(Add(), Add().dispatch(n=48), "sm_80")
    assert (
        art.target == "cuda:80"
        and (triton_cache / art.entry_dir.rsplit("/", 1)[-1] / AOT_RECORD).exists()
    )
    fp = backend.cache_fingerprint("cuda:80")
    assert set(fp) == {
        "target",
        "triton_version",
        "triton_key_sha256",
        "python_abi",
        "ptxas",
        "env",
    }
    assert all(isinstance(v, str) for v in fp.values()) and fp["target"] == "cuda:80"
    assert backend.cache_dir() == triton_cache.resolve()


_LIBCUDA = """
int cuInit(unsigned f) { return 0; }
int cuDeviceGetCount(int *c) { *c = COUNT; return 0; }
int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) { *v = attr == 75 ? 8 : 9; return 0; }
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a libcuda stand-in")
@pytest.mark.parametrize("count", [1, 0])
def test_the_device_target_comes_from_libcuda_without_importing_torch(tmp_path, count):
    # A stand-in libcuda.so.1 (the real one is the GPU host's; test_gpu.py checks it against
    # Triton's driver there): capability 8.9 names cuda:89, and nothing imports torch for it.
    # With no device, Triton's driver decides (here: no GPU, so no target).
    src = tmp_path / "libcuda.c"
    src.write_text(_LIBCUDA.replace("COUNT", str(count)))
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(src)], check=True
    )
    code = (
        "import sys; from warmkit_triton import _compiler as c; "
        "print(c.device_target(), 'torch' in sys.modules)"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == (["cuda:89", "False"] if count else ["None", "True"])


def test_a_host_without_a_gpu_names_no_target_without_importing_torch(tmp_path):
    """Triton's AMD backend imports torch to say it is not active: 1.5 s a command, skipped here."""
    from warmkit_triton._aot import no_gpu_here

    if not no_gpu_here():  # pragma: no cover - a GPU host
        pytest.skip("this host has a GPU device node or a libcuda.so.1")
    code = (
        "import sys; from warmkit_triton import TritonBackend; "
        "print(TritonBackend().default_target(), 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}

    def ask(**extra: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert ask() == ["None", "False"]
    # Where the answer is not known (a libcuda Triton is told to find), Triton is asked: the
    # same answer, through its backends, which import torch.
    assert ask(TRITON_LIBCUDA_PATH=str(tmp_path)) == ["None", "True"]
