"""The canary of ``warmkit_triton._triton_api``: every accessor against the installed Triton.

A Triton upgrade that moves or changes an internal warmkit relies on fails
here, in a test named after the accessor, with a message naming it. The
checks use real Triton objects: an ahead-of-time compile for sm_90 (no GPU
needed), Triton's own hooks and cache files. What needs a GPU (loading a
module, the launcher's C call) is checked structurally here and for real in
``test_canary_launch_on_gpu``.

A second test reads the plugin's modules and fails when any module other than
``_triton_api`` imports Triton or names one of its internals.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import triton
from warmkit_triton import WarmupTensor
from warmkit_triton import _triton_api as api
from warmkit_triton._aot import AotDriver, aot_driver, parse_target

from warmkit._compat import AST_PARSE_RACES

from ._kernels import add_kernel

CANARIES: dict[str, Callable[..., None]] = {}


def canary(*names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(check: Callable[..., None]) -> Callable[..., None]:
        for name in names:
            CANARIES[name] = check
        return check

    return register


ARGS = (WarmupTensor("float32", (1024,)), WarmupTensor("float32", (1024,)), None, 16)


def aot_compile(fn=add_kernel, options=None):
    """An ahead-of-time compile for sm_90 through the accessors; returns (compiled, device)."""
    args = (*ARGS[:2], WarmupTensor("float32", (1024,)), ARGS[3])
    with aot_driver(AotDriver(parse_target("cuda:90"))):
        device = api.prepare_function(fn)
        compiled = api.warmup(fn, args, {"BLOCK": 128}, options or {"num_warps": 4})
    return compiled, device


def entry_dir(compiled) -> Path:
    return Path(api.cache_entry_dir(api.cache_dir(), api.compiled_identity(compiled)[0]))


# -- importing ------------------------------------------------------------------------------------


@canary("require_triton", "triton_version", "version_tuple")
def check_import() -> None:
    assert api.require_triton() is triton
    assert api.triton_version() == triton.__version__
    assert api.version_tuple(triton.__version__) >= api.MIN_TRITON
    assert api.version_tuple("3.6.0+git1234") == (3, 6)


@canary("on_first_import")
def check_on_first_import() -> None:
    from warmkit_triton import _keycache

    # the plugin's package registers the key cache, so _triton_api needs no import of it
    assert _keycache.install in api._import._first_import_hooks
    api.require_triton()
    ran: list[int] = []

    def hook() -> None:
        ran.append(1)

    try:
        api.on_first_import(hook)  # Triton is imported already: runs now
        api.on_first_import(hook)  # the same hook again: not twice
        api.require_triton()
        assert ran == [1]
    finally:
        api._import._first_import_hooks.remove(hook)


def _most_parses_at_once(monkeypatch: pytest.MonkeyPatch) -> int:
    """Four threads parse ``add_kernel`` with ``ast.parse`` slowed down; how many were inside at once."""
    inside, most, count = 0, 0, threading.Lock()
    real_parse = ast.parse

    def slow_parse(*args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.05)
        with count:
            inside -= 1
        return real_parse(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(ast, "parse", slow_parse)
        with ThreadPoolExecutor(4) as pool:
            trees = list(pool.map(lambda _: add_kernel.parse(), range(4)))
    assert all(isinstance(tree.body[0], ast.FunctionDef) for tree in trees)
    return most


@canary("serialize_ast_parse")
def check_serialize_ast_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    api.require_triton()
    if AST_PARSE_RACES:  # require_triton serialized them (this CI box: Python 3.11.7)
        assert _most_parses_at_once(monkeypatch) == 1
        return
    assert _most_parses_at_once(monkeypatch) > 1, "parses serialized on a Python without the race"
    from triton.runtime.jit import JITCallable  # restored below: other tests keep parallel parses

    monkeypatch.setattr(JITCallable, "parse", JITCallable.parse)
    monkeypatch.setattr(api._import, "_parse_serialized", False)
    api.serialize_ast_parse()
    assert _most_parses_at_once(monkeypatch) == 1


# -- JITFunction -----------------------------------------------------------------------------------


@canary("is_jit_function", "jit_params", "pre_run_hooks")
def check_jit_function() -> None:
    assert api.is_jit_function(add_kernel)
    assert not api.is_jit_function(add_kernel.fn) and not api.is_jit_function(type(add_kernel))
    names, defaults = api.jit_params(add_kernel)
    assert names == ["x", "y", "out", "n", "BLOCK"] and defaults == {}
    hooks = api.pre_run_hooks(add_kernel)
    assert isinstance(hooks, list) and not hooks


@canary("is_interpreted", "interpreting")
def check_interpreter() -> None:
    from triton.runtime.interpreter import InterpretedFunction

    assert not api.is_interpreted(add_kernel)
    assert api.is_interpreted(InterpretedFunction(add_kernel.fn))
    assert api.interpreting() is False  # TRITON_INTERPRET is not set in this suite


@canary("prepare_function", "warmup", "compiled_identity", "kernel_caches", "drop_device")
def check_compile_and_kernel_cache() -> None:
    compiled, device = aot_compile()
    assert device == "warmkit-aot:cuda:90"
    digest, name = api.compiled_identity(compiled)
    assert re.fullmatch(r"[0-9a-f]{64}", digest) and name == "add_kernel"
    assert any(compiled in cache.values() for cache in api.kernel_caches(add_kernel))
    api.drop_device(add_kernel, device)
    assert not any(compiled in cache.values() for cache in api.kernel_caches(add_kernel))


@canary("probe_cache_hash")
def check_probe_cache_hash(triton_cache: Path) -> None:
    args = (*ARGS[:2], WarmupTensor("float32", (1024,)), ARGS[3])
    with aot_driver(AotDriver(parse_target("cuda:90"))):
        device = api.prepare_function(add_kernel)
        api.drop_device(add_kernel, device)
        device = api.prepare_function(add_kernel)
        probed = api.probe_cache_hash(add_kernel, args, {"BLOCK": 128}, {"num_warps": 4})
        assert probed is not None and not any(triton_cache.glob("*/*.cubin"))  # compiled nothing
        assert not any(c for c in api.kernel_caches(add_kernel))  # cached nothing in memory
        compiled = api.warmup(add_kernel, args, {"BLOCK": 128}, {"num_warps": 4})
        assert api.compiled_identity(compiled)[0] == probed  # the hash Triton then wrote
        # an in-memory hit: nothing to compile, so no key
        assert api.probe_cache_hash(add_kernel, args, {"BLOCK": 128}, {"num_warps": 4}) is None
        api.drop_device(add_kernel, device)


@canary("probe_or_load")
def check_probe_or_load(triton_cache: Path) -> None:
    args = (*ARGS[:2], WarmupTensor("float32", (1024,)), ARGS[3])
    launch = (add_kernel, args, {"BLOCK": 256}, {"num_warps": 4})
    with aot_driver(AotDriver(parse_target("cuda:90"))):
        device = api.prepare_function(add_kernel)
        api.drop_device(add_kernel, device)
        device = api.prepare_function(add_kernel)
        asked = []
        digest, kernel = api.probe_or_load(*launch, lambda d: asked.append(d) or False)
        assert kernel is None and asked == [digest] and not any(triton_cache.glob("*/*.cubin"))
        assert not any(c for c in api.kernel_caches(add_kernel))  # cached nothing in memory
        compiled = api.warmup(*launch)  # writes the entry
        api.drop_device(add_kernel, device)
        device = api.prepare_function(add_kernel)
        again, loaded = api.probe_or_load(*launch, lambda d: True)
        assert (
            again
            == digest
            == api.compiled_identity(loaded)[0]
            == api.compiled_identity(compiled)[0]
        )
        assert any(loaded in cache.values() for cache in api.kernel_caches(add_kernel))
        assert api.probe_or_load(*launch, lambda d: True) == (None, None)  # an in-memory hit
        api.drop_device(add_kernel, device)
        # A stand-in takes the CompiledKernel's place: Triton reads nothing (no listener call),
        # and the stand-in is given the hash and the ASTSource Triton hashed.
        device = api.prepare_function(add_kernel)
        given, heard = [], []
        stand_in = object()
        previous = triton.knobs.compilation.listener
        triton.knobs.compilation.listener = lambda **kw: heard.append(kw)
        try:
            third, put = api.probe_or_load(
                *launch, lambda d: True, lambda d, src: given.append((d, src)) or stand_in
            )
        finally:
            triton.knobs.compilation.listener = previous
        assert third == digest and put is stand_in and heard == []
        ((seen, src),) = given
        assert seen == digest and src.name == "add_kernel"
        assert dict(src.signature) == dict(loaded.src.signature)
        assert any(stand_in in cache.values() for cache in api.kernel_caches(add_kernel))
        api.drop_device(add_kernel, device)
        # A stand-in that declines (None), and TRITON_ALWAYS_COMPILE: Triton's compile runs.
        for declines, always in ((True, False), (False, True)):
            device = api.prepare_function(add_kernel)
            before = triton.knobs.compilation.always_compile
            triton.knobs.compilation.always_compile = always
            try:
                _, got = api.probe_or_load(
                    *launch, lambda d: True, lambda d, src, no=declines: None if no else stand_in
                )
            finally:
                triton.knobs.compilation.always_compile = before
            assert got is not stand_in and api.compiled_identity(got)[1] == "add_kernel"
            api.drop_device(add_kernel, device)


@canary("cache_is_redirected")
def check_cache_is_redirected() -> None:
    assert api.cache_is_redirected() is False
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.add_stages_inspection_hook = lambda *a: ("", "")
        assert api.cache_is_redirected() is True


@canary("binder", "specialization_of", "scalar_specializer", "wrap_warmup_arg")
def check_specialization() -> None:
    import torch

    with aot_driver(AotDriver(parse_target("cuda:90"))):
        device = api.prepare_function(add_kernel)
        x = api.wrap_warmup_arg(torch.float32)
        assert x.dtype == torch.float32 and x.data_ptr() % 16 == 0
        assert api.wrap_warmup_arg(7) == 7
        _bound, spec, options = api.binder(add_kernel, device)(x, x, x, 16, BLOCK=128, num_warps=4)
        assert len(spec) == 5 and options == {"num_warps": 4}
        got = api.specialization_of(add_kernel, device, [x, x, x, 17], {"BLOCK": 128})
    api.drop_device(add_kernel, device)
    assert got[0] == ("*fp32", "D") and got[3] == ("i32", "")
    spec1 = api.scalar_specializer()
    assert spec1(16, True, True) == ("i32", "D")
    assert spec1(1, True, True) == ("constexpr", 1)
    assert spec1(2**31, True, True) == ("i64", "D")
    assert spec1(16, False, True) == ("i32", None)


@canary("launch_option_names")
def check_launch_options() -> None:
    names = api.launch_option_names()
    assert names is not None and {"num_warps", "num_stages", "num_ctas", "debug"} <= names


# -- CompiledKernel: handles and the launcher (structure here, for real on the GPU) -----------------


@canary("load_handles", "launcher_of")
def check_compiled_kernel_structure() -> None:
    from triton.compiler.compiler import CompiledKernel

    compiled, device = aot_compile()
    api.drop_device(add_kernel, device)
    assert isinstance(compiled, CompiledKernel)
    assert callable(CompiledKernel._init_handles)  # load_handles
    assert isinstance(inspect.getattr_static(CompiledKernel, "run"), property)  # launcher_of
    assert compiled.function is None and compiled.packed_metadata is not None  # not loaded yet
    assert "launch_metadata" in vars(CompiledKernel)


@canary("launcher_recipe", "build_launcher")
def check_launcher_recipe(triton_cache) -> None:
    import json

    import torch
    from triton.backends.nvidia import driver as nv

    compiled, device = aot_compile()
    api.drop_device(add_kernel, device)
    recipe = api.launcher_recipe(compiled)
    assert recipe == {
        "signature": [["x", "*fp32"], ["y", "*fp32"], ["out", "*fp32"], ["n", "i32"],
                      ["BLOCK", "constexpr"]]
    }  # fmt: skip
    json.dumps(recipe)  # it is kept in the AOT record
    init = inspect.getsource(nv.CudaLauncher.__init__)
    assert "src.signature" in init and "src.constants" in init  # what build_launcher passes
    if api.version_tuple(triton.__version__) < (3, 9):
        # the per-signature C source depends on the signature's types and tensordesc_meta only
        body = inspect.getsource(nv.make_launcher).split("\n", 1)[1]
        assert "constants" not in body and "signature" in body
        assert "make_launcher(constants, signature, tensordesc_meta)" in init
    else:
        assert "utils.launch" in init  # one generic launcher, in cuda_utils
    metadata = json.loads((entry_dir(compiled) / f"{compiled.name}.json").read_text())
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):  # no CUDA driver: nothing can be built here
            api.build_launcher(recipe, metadata)
        return
    before = set(triton_cache.rglob("*.so"))
    api.build_launcher(recipe, metadata)
    api.build_launcher(recipe, metadata)  # the second time: Triton's cache
    built = set(triton_cache.rglob("*.so")) - before
    if api.version_tuple(triton.__version__) < (3, 9):
        assert any(p.name.startswith("__triton_launcher") for p in built), built


@canary("direct_launch", "runtime_knobs", "hook_chain_active")
def check_launcher_layout() -> None:
    from triton.backends.nvidia.driver import CudaLauncher

    init = inspect.getsource(CudaLauncher.__init__)
    for attr in ("launch", "launch_cooperative_grid", "launch_pdl", "global_scratch_size"):
        assert f"self.{attr} =" in init, f"CudaLauncher no longer sets {attr}"
    call = inspect.getsource(CudaLauncher.__call__)
    assert "self.launch(" in call
    if api.version_tuple(triton.__version__) >= (3, 9):
        assert "self.arg_annotations" in init and "self.kernel_signature" in init
    rt = api.runtime_knobs()
    for slot in ("launch_enter_hook", "launch_exit_hook", "jit_cache_hook", "interpret"):
        assert hasattr(rt, slot), slot
    chain = rt.launch_enter_hook
    assert not api.hook_chain_active(None)
    assert api.hook_chain_active(print)
    assert not api.hook_chain_active(chain)  # an empty HookChain by default
    chain.add(print)
    try:
        assert api.hook_chain_active(chain)
    finally:
        chain.remove(print)


# -- drivers and targets ---------------------------------------------------------------------------


@canary("gpu_target", "active_driver", "installed_driver", "set_installed_driver")
def check_drivers() -> None:
    target = api.gpu_target("cuda", 90, 32)
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32)
    saved = api.installed_driver()
    drv = AotDriver(parse_target("cuda:80"))
    api.set_installed_driver(drv)
    try:
        assert api.installed_driver() is drv
        assert api.active_driver() is drv
        assert api.active_driver().get_current_target().arch == 80
    finally:
        api.set_installed_driver(saved)
    assert api.installed_driver() is saved


@canary("default_driver")
def check_default_driver() -> None:
    try:
        drv = api.default_driver()
    except RuntimeError as exc:  # no GPU: Triton finds no active driver
        assert "active drivers" in str(exc)
    else:
        assert drv.get_current_target().backend == "cuda"


@canary("backend_names")
def check_backend_names() -> None:
    names = api.backend_names()
    assert "nvidia" in names and names == sorted(names), names


@canary("ptxas_info")
def check_ptxas() -> None:
    info = api.ptxas_info(90)
    assert Path(info["path"]).is_file(), info
    assert "ptxas" in info["version"].lower() or "cuda" in info["version"].lower(), info


@canary("ptxas_path")
def check_ptxas_path() -> None:
    path = api.ptxas_path(90)
    assert path == api.ptxas_info(90)["path"] and Path(path).is_file(), path


@canary("ptxas_version_inputs", "prime_ptxas_version", "forget_ptxas_version")
def check_ptxas_version_cache() -> None:
    api.forget_ptxas_version()
    from triton.backends.nvidia import compiler as nv

    assert nv.get_ptxas_version.cache_info().currsize == 0
    inputs = api.prime_ptxas_version(90)
    assert inputs == api.ptxas_version_inputs(90) == (api.ptxas_path(90), None)
    assert nv.get_ptxas_version.cache_info().currsize == 1
    api.forget_ptxas_version()
    assert nv.get_ptxas_version.cache_info().currsize == 0


@canary("probe_kernel")
def check_probe_kernel() -> None:
    kernel = api.probe_kernel()
    assert api.is_jit_function(kernel)
    assert api.jit_params(kernel)[0] == ["src", "dst", "n", "BLOCK"]


@canary("prime_specializer")
def check_prime_specializer() -> None:
    # Its point is the specializer's lazy import (which a fresh process lacks; the
    # Triton tests' test_prepare checks that in one): here, that it calls through.
    api.prime_specializer()
    assert "triton.experimental.gluon" in sys.modules


# -- parallel compiles -----------------------------------------------------------------------------


@canary("async_compile_mode", "active_async_mode", "is_future", "future_result", "resolved_future")
def check_async_compile() -> None:
    pool = ThreadPoolExecutor(1)
    mode = api.async_compile_mode(pool)
    lock = threading.Lock()
    args = (*ARGS[:2], WarmupTensor("float32", (1024,)), ARGS[3])
    try:
        with aot_driver(AotDriver(parse_target("cuda:90"))):
            device = api.prepare_function(add_kernel)
            with api.active_async_mode(mode):
                future = api.warmup(add_kernel, args, {"BLOCK": 64}, {"num_warps": 2})
            assert api.is_future(future)
            compiled = api.future_result(future, lock)
            assert not api.is_future(compiled)
            assert api.future_result(compiled, lock) is compiled
            assert api.resolved_future(future) is compiled
            assert api.resolved_future(compiled) is None
            mode.__exit__(None, None, None)
    finally:
        pool.shutdown(wait=True)
    api.drop_device(add_kernel, device)
    assert api.compiled_identity(compiled)[1] == "add_kernel"


# -- the cache -------------------------------------------------------------------------------------


@canary("cache_dir", "cache_dir_scope")
def check_cache_dir(tmp_path: Path, triton_cache: Path) -> None:
    assert api.cache_dir() == str(triton_cache.resolve())
    with api.cache_dir_scope(tmp_path / "other"):
        assert api.cache_dir() == str(tmp_path / "other")
    assert api.cache_dir() == str(triton_cache.resolve())


@canary("cache_invalidating_env")
def check_cache_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    assert "TRITON_DEFAULT_FP_FUSION" not in api.cache_invalidating_env()
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    env = api.cache_invalidating_env()
    assert env["TRITON_DEFAULT_FP_FUSION"] in ("1", "true") and list(env) == sorted(env)


@canary("group_children", "relocate_group_files", "cache_entry_dir")
def check_group_files(tmp_path: Path) -> None:
    compiled, device = aot_compile()
    api.drop_device(add_kernel, device)
    entry = entry_dir(compiled)
    assert entry.is_dir(), f"no entry directory {entry.name} for the compiled hash"
    groups = list(entry.glob(api.GROUP_FILE_GLOB))
    assert len(groups) == 1, sorted(p.name for p in entry.iterdir())
    assert groups[0].name.startswith(api.GROUP_FILE_PREFIX)
    children = api.group_children(groups[0])
    assert any(name.endswith(".cubin") for name in children)
    assert all(Path(p).parent == entry and Path(p).is_file() for p in children.values())
    moved = tmp_path / "moved" / entry.name
    shutil.copytree(entry, moved)
    assert api.relocate_group_files(moved, moved) == [groups[0].name]
    relocated = api.group_children(next(moved.glob(api.GROUP_FILE_GLOB)))
    assert relocated.keys() == children.keys()
    assert all(Path(p).parent == moved and Path(p).is_file() for p in relocated.values())
    bad = tmp_path / "__grp__bad.json"
    bad.write_text("[]")
    with pytest.raises(ValueError, match="child_paths"):
        api.group_children(bad)


@canary("checked_cache_manager", "cache_manager_class", "set_cache_manager_class")
def check_cache_manager() -> None:
    compiled, device = aot_compile()
    api.drop_device(add_kernel, device)
    checked: list[str] = []
    verdict = [True]

    def check(entry: str) -> bool:
        checked.append(entry)
        return verdict[0]

    assert api.cache_manager_class() is None
    api.set_cache_manager_class(api.checked_cache_manager(check))
    hits: list[bool] = []
    saved = api.get_compilation_listener()
    api.set_compilation_listener(lambda **kw: hits.append(bool(kw["cache_hit"])))
    try:
        _, device = aot_compile()  # the entry is on disk: the check runs, then a disk hit
        api.drop_device(add_kernel, device)
        verdict[0] = False
        _, device = aot_compile()  # the check refuses it: Triton compiles again
        api.drop_device(add_kernel, device)
    finally:
        api.set_compilation_listener(saved)
        api.set_cache_manager_class(None)
    assert api.cache_manager_class() is None
    assert checked and all(Path(e) == entry_dir(compiled) for e in checked)
    assert hits == [True, False]


# -- triton_key() ----------------------------------------------------------------------------------


def tritons_own_key() -> Callable[[], str]:
    fn = api.triton_key_function()
    return getattr(fn, "__wrapped_original__", fn)


@canary("triton_key", "triton_key_function", "is_tritons_triton_key")
def check_triton_key() -> None:
    own = tritons_own_key()
    assert api.is_tritons_triton_key(own)
    assert not api.is_tritons_triton_key(lambda: "x")
    assert api.triton_key() == own()
    assert api.triton_key().startswith(triton.__version__)


@canary("libtriton_path", "compose_triton_key")
def check_triton_key_layout() -> None:
    lib = api.libtriton_path()
    assert lib.is_file() and lib.stat().st_size > 10_000_000
    value = tritons_own_key()()
    prefix, suffix = api.compose_triton_key("\x00").split("\x00")
    middle = value[len(prefix) : len(value) - len(suffix)]
    assert value.startswith(prefix) and value.endswith(suffix), "triton_key() is built differently"
    assert re.fullmatch(r"[0-9a-f]{64}", middle)
    assert api.compose_triton_key(middle) == value


@canary("replace_triton_key")
def check_replace_triton_key() -> None:
    import sys

    current = api.triton_key_function()
    holders = [n for n, m in list(sys.modules.items()) if getattr(m, "triton_key", None) is current]
    assert "triton.runtime.cache" in holders

    def other() -> str:
        return "other"

    changed = api.replace_triton_key(current, other, modules=["triton.runtime.cache"])
    try:
        assert changed == ["triton.runtime.cache"] and api.triton_key_function() is other
    finally:
        api.replace_triton_key(other, current)
    assert api.triton_key_function() is current


# -- hooks -----------------------------------------------------------------------------------------


@canary("get_jit_cache_hook", "set_jit_cache_hook", "miss_event")
def check_cache_hook() -> None:
    seen: list[dict] = []

    def hook(**kw):
        seen.append(kw)
        return False

    saved = api.get_jit_cache_hook()
    api.set_jit_cache_hook(hook)
    try:
        assert api.get_jit_cache_hook() is hook
        _compiled, device = aot_compile(options={"num_warps": 2})
    finally:
        api.set_jit_cache_hook(saved)
    api.drop_device(add_kernel, device)
    assert len(seen) == 1, seen
    event = api.miss_event(seen[0])
    assert event.jit_fn is add_kernel and event.name.endswith(".add_kernel")
    assert list(event.signature) == ["x", "y", "out", "n", "BLOCK"]
    assert event.options["num_warps"] == 2
    assert ((4,), 128) in event.constants.items() or 128 in event.constants.values()
    assert isinstance(event.attrs, dict) and event.attrs
    # the in-memory key: str(specialization) + str(launch kwargs), launch options first, in order
    assert isinstance(event.key, str) and event.key.startswith("[(")
    assert "]{'num_warps': 2, 'debug': " in event.key
    # a truthy return skips the compile: warmup returns None
    api.set_jit_cache_hook(lambda **kw: True)
    try:
        with aot_driver(AotDriver(parse_target("cuda:90"))):
            device = api.prepare_function(add_kernel)
            args = (*ARGS[:2], WarmupTensor("float32", (1024,)), 32)
            assert api.warmup(add_kernel, args, {"BLOCK": 128}, {"num_warps": 2}) is None
    finally:
        api.set_jit_cache_hook(saved)
        api.drop_device(add_kernel, device)


@canary("unwrap_constexpr", "dtype_name", "dtype_from_name")
def check_language_values() -> None:
    import triton.language as tl

    assert api.unwrap_constexpr(tl.constexpr(8)) == (True, 8)
    assert api.unwrap_constexpr(8) == (False, 8)
    for dt in (tl.float16, tl.bfloat16, tl.float32, tl.int1, tl.uint8, tl.float8e4nv):
        name = api.dtype_name(dt)
        assert name is not None and api.dtype_from_name(name) == dt, dt
    assert api.dtype_name(tl.pointer_type(tl.float16)) is None
    assert api.dtype_name("fp16") is None


@canary("jit_param_flags", "source_identity")
def check_jit_identity() -> None:
    from ._kernels import flags_kernel

    params = api.jit_param_flags(add_kernel)
    assert [p.name for p in params] == ["x", "y", "out", "n", "BLOCK"]
    assert [p.is_constexpr for p in params] == [False] * 4 + [True]
    flags = {p.name: p for p in api.jit_param_flags(flags_kernel)}
    assert flags["b"].do_not_specialize and not flags["b"].do_not_specialize_on_alignment
    assert flags["c"].do_not_specialize_on_alignment and not flags["a"].do_not_specialize
    text, source = api.source_identity(add_kernel)
    assert text == hashlib.sha256(add_kernel.src.encode()).hexdigest()
    assert source == add_kernel.cache_key and len(source) == 64
    assert api.source_identity(flags_kernel)[1] != source


@canary("get_compilation_listener", "set_compilation_listener", "compile_event")
def check_listener() -> None:
    seen: list[dict] = []
    saved = api.get_compilation_listener()
    api.set_compilation_listener(lambda **kw: seen.append(kw))
    try:
        compiled, device = aot_compile(options={"num_warps": 1})
        api.drop_device(add_kernel, device)
        _again, device = aot_compile(options={"num_warps": 1})  # a disk hit
        api.drop_device(add_kernel, device)
    finally:
        api.set_compilation_listener(saved)
    assert api.get_compilation_listener() is saved
    first, second = (api.compile_event(kw) for kw in seen)
    digest = api.compiled_identity(compiled)[0]
    assert first.jit_fn is add_kernel and first.name == "add_kernel"
    assert (first.hash, first.cache_hit) == (digest, False) and first.seconds > 0
    assert (second.hash, second.cache_hit) == (digest, True)
    assert list(first.signature) == ["x", "y", "out", "n", "BLOCK"]
    assert first.metadata["num_warps"] == 1


@canary("load_hooks")
def check_load_hooks() -> None:
    from triton.compiler.compiler import CompiledKernel

    chains = api.load_hooks()
    assert chains is not None
    start, _end = chains
    calls = []

    def record(module, function, name, metadata_group, hash):
        calls.append((name, hash))

    start.add(record)
    try:
        start(None, None, "k", {}, "h")
    finally:
        start.remove(record)
    assert calls == [("k", "h")]
    src = inspect.getsource(CompiledKernel._init_handles)
    for hook in ("kernel_load_start_hook", "kernel_load_end_hook"):
        assert (
            f"{hook}(self.module, self.function, self.name, self.metadata_group, self.hash)" in src
        )


# -- Autotuner and Heuristics ------------------------------------------------------------------------


class _NotAKernel:
    arg_names = ("B",)


@canary("stack_layers", "is_autotuner", "autotuner_parts", "heuristic_values")
def check_autotune_stack() -> None:
    from ._autotune_kernels import heur_copy_kernel, sum_inplace_kernel

    assert api.stack_layers(add_kernel) is None
    layers, jit = api.stack_layers(sum_inplace_kernel)
    assert [api.is_autotuner(x) for x in layers] == [True, False] and api.is_jit_function(jit)
    parts = api.autotuner_parts(layers[0])
    assert (
        len(parts.configs) == 4 and parts.keys == ["n"] and parts.arg_names[:3] == ["x", "acc", "n"]
    )
    assert parts.cache is layers[0].cache and parts.prunes
    assert callable(parts.pre_hook) and callable(parts.post_hook)
    values, names = api.heuristic_values(api.stack_layers(heur_copy_kernel)[0][0])
    assert list(values) == ["BLOCK", "EVEN"] and names == ["x", "out", "n", "BLOCK", "EVEN"]
    with pytest.raises(TypeError, match="decorator stack contains"):
        api.stack_layers(triton.heuristics({"B": lambda a: 1})(_NotAKernel()))


@canary("prune_configs", "benchmarker", "bench_time")
def check_autotuner_pruning_and_benchmarking() -> None:
    from ._autotune_kernels import sum_inplace_kernel

    tuner = sum_inplace_kernel
    kept = api.prune_configs(tuner, (WarmupTensor("float32", (200,)), None, 200), {})
    assert [c.kwargs["BLOCK"] for c in kept] == [64, 128, 256]
    assert getattr(tuner, "nargs", None) is None  # restored
    assert api.benchmarker(tuner, driver_available=False) is None
    own = triton.autotune([triton.Config({})], key=[], do_bench=lambda fn, quantiles: [1.0])(
        add_kernel
    )
    assert api.benchmarker(own, driver_available=False) is own._do_bench
    assert "bench_time" in inspect.getsource(type(tuner).run)
    assert api.bench_time(own) is None


@canary("function_cache_key")
def check_function_cache_key() -> None:
    from triton.runtime.interpreter import InterpretedFunction

    assert re.fullmatch(r"[0-9a-f]{64}", api.function_cache_key(add_kernel))
    assert re.fullmatch(r"[0-9a-f]{64}", api.function_cache_key(InterpretedFunction(add_kernel.fn)))


@canary("wrap_autotuner_run", "restore_autotuner_run")
def check_autotuner_run_wrapping() -> None:
    from triton.runtime.autotuner import Autotuner

    def wrapper(self, *args, **kwargs):  # pragma: no cover - never called
        return None

    original = api.wrap_autotuner_run(wrapper)
    try:
        assert Autotuner.run is wrapper and "self.fn.run(" in inspect.getsource(original)
    finally:
        assert api.restore_autotuner_run(wrapper, original)
    assert Autotuner.run is original and not api.restore_autotuner_run(wrapper, original)


# -- pinned identity ---------------------------------------------------------------------------------


@canary(
    "jit_dependencies",
    "used_globals",
    "source_sha256",
    "is_constexpr",
    "make_constexpr",
    "save_identity",
    "forget_identity",
    "restore_identity",
)
def check_identity_accessors() -> None:
    from . import _pinned_kernels as K

    deps = api.jit_dependencies(K.dot_kernel)
    assert [f.fn.__name__ for f in deps] == ["dot_kernel", "_scaled"]
    used = {(g.module, g.name): g.value for g in api.used_globals(K.dot_kernel)}
    assert set(used) == {(K.__name__, "PREC"), (K.__name__, "SCALE")}
    assert api.is_constexpr(used[(K.__name__, "SCALE")]) and not api.is_constexpr(2.0)
    assert api.make_constexpr(2.0).value == 2.0
    assert re.fullmatch(r"[0-9a-f]{64}", api.source_sha256(K.dot_kernel))
    before = K.dot_kernel.cache_key
    saved = api.save_identity(deps)
    K.SCALE, scale = api.make_constexpr(3.0), K.SCALE
    try:
        api.forget_identity(deps)
        assert K.dot_kernel.cache_key != before  # the hash folds the global's value in
        assert {g.name: g.value.value for g in api.used_globals(K.dot_kernel)}["SCALE"] == 3.0
    finally:
        K.SCALE = scale
        api.restore_identity(saved)
    assert K.dot_kernel.cache_key == before


# -- the tests -------------------------------------------------------------------------------------


def _accessors() -> list[str]:
    return sorted(n for n in api.__all__ if inspect.isfunction(getattr(api, n)))


@pytest.mark.parametrize("accessor", _accessors())
def test_canary(accessor: str, request: pytest.FixtureRequest) -> None:
    check = CANARIES.get(accessor)
    assert check is not None, f"_triton_api.{accessor} has no canary; add one to this file"
    kwargs = {name: request.getfixturevalue(name) for name in inspect.signature(check).parameters}
    try:
        check(**kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure is reported naming the accessor
        pytest.fail(
            f"warmkit_triton._triton_api.{accessor} no longer works with Triton "
            f"{triton.__version__} ({check.__name__}): {type(exc).__name__}: {exc}. "
            "Update that accessor (the only place warmkit-triton reaches this Triton internal) "
            "and the versions its docstring says it was checked on.",
            pytrace=True,
        )


def test_every_accessor_has_a_canary_and_states_its_versions() -> None:
    defined = set()
    for module in sorted(Path(api.__file__).parent.glob("_*.py")):
        tree = ast.parse(module.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    public = {name for name in defined if not name.startswith("_")}
    assert api.__all__ == sorted(
        api.__all__, key=lambda n: (not n.isupper(), not n[0].isupper(), n)
    )
    assert set(api.__all__) == public, "_triton_api/__init__.py must re-export every public name"
    assert set(CANARIES) == set(_accessors())
    for name in _accessors():
        fn = getattr(api, name)
        if name not in ("on_first_import", "require_triton", "triton_version", "version_tuple"):
            assert "Checked: 3.6.0, 3.9.0" in (fn.__doc__ or ""), name


PLUGIN = Path(api.__file__).parent.parent  # warmkit_triton/, _triton_api/ is a package in it
#: Names of Triton internals; outside ``_triton_api`` they may appear only in docstrings/comments.
PRIVATE = (
    "device_caches",
    "_init_handles",
    "packed_metadata",
    "launch_metadata",
    "_active",
    "_async_compile",
    "native_specialize_impl",
    "get_cache_invalidating_env_vars",
    "child_paths",
    "MockTensor",
    "HookChain",
    "CudaLauncher",
    "jit_cache_hook",
    "knobs",
    "pre_run_hooks",
    "cache_key",
)


def test_no_other_module_reaches_triton_internals() -> None:
    problems = []
    modules = sorted(PLUGIN.glob("*.py"))
    assert len(modules) >= 8, modules
    for path in modules:  # every module of warmkit_triton except the _triton_api package
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module or ""]
            else:
                mods = []
            for mod in mods:
                if mod == "triton" or mod.startswith("triton."):
                    problems.append(f"{path.name}:{node.lineno} imports {mod}")
            through_api = isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "api"
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE and not through_api:
                problems.append(f"{path.name}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.Constant) and node.value in PRIVATE:
                problems.append(f"{path.name}:{node.lineno} names {node.value!r}")
    assert not problems, "use warmkit_triton._triton_api instead:\n" + "\n".join(problems)


@pytest.mark.gpu
def test_canary_launch_on_gpu() -> None:
    """load_handles, launcher_of and direct_launch for real: both launch paths add correctly."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    n = 1000
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    device = api.prepare_function(add_kernel)
    compiled = api.warmup(add_kernel, (x, y, torch.empty_like(x), n), {"BLOCK": 128}, {})
    api.load_handles(compiled)
    launcher = api.launcher_of(compiled)
    assert launcher is not None, "launcher_of: no launcher after load_handles"
    stream = api.active_driver().get_current_stream(device)
    for layout in ("direct", "launcher"):
        out = torch.zeros_like(x)
        go, path = api.direct_launch(compiled, launcher, layout=layout)
        assert path.startswith(layout), (layout, path)
        # every parameter, constexprs included, as TritonExecutor passes them
        go(((n + 127) // 128,), stream, launcher.function, (x, y, out, n, 128))
        torch.cuda.synchronize()
        assert torch.equal(out, x + y), f"direct_launch({layout=}) via {path} computed wrong sums"


def test_entry_directory_is_named_by_the_hash(triton_cache: Path) -> None:
    """The entry directory is the base32 of the hash compiled_identity gives (what AotArtifact relies on)."""
    compiled, device = aot_compile()
    api.drop_device(add_kernel, device)
    assert entry_dir(compiled).is_dir()
    assert len(bytes.fromhex(api.compiled_identity(compiled)[0])) == hashlib.sha256().digest_size
