"""A canary for every TileLang internal that ``warmkit_tilelang._tilelang_api`` reaches (tilelang 0.1.15).

A TileLang upgrade that moves one of them fails here, naming the accessor.
"""

from __future__ import annotations

from pathlib import Path

from warmkit_tilelang import _tilelang_api as api

from . import _programs


def test_the_installed_tilelang_is_the_pinned_one():
    assert api.tilelang_version() == api.PINNED
    assert api.tvm_ffi_version() is not None


def test_cuda_target_matches_tilelang_auto_detection_for_hopper_and_blackwell():
    assert api.cuda_target((9, 0)) == {"kind": "cuda", "arch": "sm_90a"}
    assert api.cuda_target((10, 0)) == {"kind": "cuda", "arch": "sm_100a"}
    assert api.cuda_target((8, 0)) == {"kind": "cuda", "arch": "sm_80"}


def test_cache_layout_accessors(tilelang_cache):
    ns = api.cache_namespace()
    assert ns.startswith(api.PINNED + "/") and ns.count("/") == 1
    assert api.kernels_dir() == (tilelang_cache / ns / "kernels").resolve()


def test_redirect_cache_moves_lookups_and_restores_them(tilelang_cache, tmp_path):
    before = api.kernels_dir()
    with api.redirect_cache(tmp_path / "elsewhere") as kernels:
        assert (
            kernels
            == api.kernels_dir()
            == (tmp_path / "elsewhere" / api.cache_namespace() / "kernels").resolve()
        )
        assert kernels.is_dir()
    assert api.kernels_dir() == before


def test_jit_function_accessors():
    fn = _programs.scale
    assert api.is_jit_function(fn) and not api.is_jit_function(lambda: None)
    assert api.jit_function_name(fn) == f"{_programs.__name__}.scale"
    prim = fn.get_tir(96, 2.0)
    options = api.compile_options(fn, prim)
    assert set(options) == {
        "out_idx", "execution_backend", "target_host", "verbose", "pass_configs", "compile_flags",
    }  # fmt: skip
    # A fresh non-negative copy: TileLang rewrites the list it is given in place.
    declared = fn.out_idx
    assert options["out_idx"] == [i + len(prim.params) if i < 0 else i for i in declared]
    assert options["out_idx"] is not declared


def test_fill_jit_cache_makes_a_raw_call_return_that_kernel(tilelang_cache):
    fn = _programs.scale
    fn._kernel_cache.clear()
    fn._call_form_cache.clear()
    sentinel = object()
    api.fill_jit_cache(fn, (96, 2.0), {}, sentinel)
    try:
        assert fn(96, 2.0) is sentinel
    finally:
        fn._kernel_cache.clear()
        fn._call_form_cache.clear()


def test_hook_points_exist_with_the_signatures_the_hooks_wrap():
    import inspect

    for point in (
        api.kernel_cache_hook_point,
        api.disk_load_hook_point,
        api.jit_compile_hook_point,
    ):
        owner, attr = point()
        assert callable(owner.__dict__.get(attr)), f"{point.__name__}: {owner}.{attr} is gone"
    owner, attr = api.kernel_cache_hook_point()
    assert list(inspect.signature(getattr(owner, attr)).parameters)[:3] == [
        "self",
        "func",
        "out_idx",
    ]
    owner, attr = api.disk_load_hook_point()
    assert list(inspect.signature(getattr(owner, attr)).parameters)[:2] == ["self", "key"]


def test_cache_entry_of_and_key_environment(tilelang_cache, monkeypatch):
    import tilelang

    kernel = tilelang.compile(
        _programs.scale.get_tir(160, 2.0), target=api.cuda_target((9, 0)), out_idx=[-1]
    )
    key, entry = api.cache_entry_of(kernel)
    assert isinstance(key, str) and len(key) == 64
    assert isinstance(entry, Path) and entry.parent.resolve() == api.kernels_dir()
    assert api.prim_func_name(kernel.prim_func) == "scale_kernel"
    monkeypatch.setenv("TILELANG_LAYOUT_COST_MODEL", "1")
    assert api.key_environment() == {"TILELANG_LAYOUT_COST_MODEL": "1"}
    err = api.TileLangNotInstalledError("probe")
    assert isinstance(err, ImportError) and err.install_hint == api.INSTALL_HINT
    assert api.INSTALL_HINT in str(err)
