"""A canary for every TileLang internal that ``warmkit_tilelang._compat`` reaches (tilelang 0.1.15).

A TileLang upgrade that moves one of them fails here, naming the accessor.
"""

from __future__ import annotations

from pathlib import Path

from warmkit_tilelang import _compat

from . import _programs


def test_the_installed_tilelang_is_the_pinned_one():
    assert _compat.tilelang_version() == _compat.PINNED
    assert _compat.tvm_ffi_version() is not None


def test_cuda_target_matches_tilelang_auto_detection_for_hopper_and_blackwell():
    assert _compat.cuda_target((9, 0)) == {"kind": "cuda", "arch": "sm_90a"}
    assert _compat.cuda_target((10, 0)) == {"kind": "cuda", "arch": "sm_100a"}
    assert _compat.cuda_target((8, 0)) == {"kind": "cuda", "arch": "sm_80"}


def test_cache_layout_accessors(tilelang_cache):
    ns = _compat.cache_namespace()
    assert ns.startswith(_compat.PINNED + "/") and ns.count("/") == 1
    assert _compat.kernels_dir() == (tilelang_cache / ns / "kernels").resolve()


def test_redirect_cache_moves_lookups_and_restores_them(tilelang_cache, tmp_path):
    before = _compat.kernels_dir()
    with _compat.redirect_cache(tmp_path / "elsewhere") as kernels:
        assert (
            kernels
            == _compat.kernels_dir()
            == (tmp_path / "elsewhere" / _compat.cache_namespace() / "kernels").resolve()
        )
        assert kernels.is_dir()
    assert _compat.kernels_dir() == before


def test_jit_function_accessors():
    fn = _programs.scale
    assert _compat.is_jit_function(fn) and not _compat.is_jit_function(lambda: None)
    assert _compat.jit_function_name(fn) == f"{_programs.__name__}.scale"
    assert set(_compat.compile_options(fn)) == {
        "out_idx", "execution_backend", "target_host", "verbose", "pass_configs", "compile_flags",
    }  # fmt: skip


def test_fill_jit_cache_makes_a_raw_call_return_that_kernel(tilelang_cache):
    fn = _programs.scale
    fn._kernel_cache.clear()
    fn._call_form_cache.clear()
    sentinel = object()
    _compat.fill_jit_cache(fn, (96, 2.0), {}, sentinel)
    try:
        assert fn(96, 2.0) is sentinel
    finally:
        fn._kernel_cache.clear()
        fn._call_form_cache.clear()


def test_hook_points_exist_with_the_signatures_the_hooks_wrap():
    import inspect

    for point in (
        _compat.kernel_cache_hook_point,
        _compat.disk_load_hook_point,
        _compat.jit_compile_hook_point,
    ):
        owner, attr = point()
        assert callable(owner.__dict__.get(attr)), f"{point.__name__}: {owner}.{attr} is gone"
    owner, attr = _compat.kernel_cache_hook_point()
    assert list(inspect.signature(getattr(owner, attr)).parameters)[:3] == [
        "self",
        "func",
        "out_idx",
    ]
    owner, attr = _compat.disk_load_hook_point()
    assert list(inspect.signature(getattr(owner, attr)).parameters)[:2] == ["self", "key"]


def test_cache_entry_of_and_key_environment(tilelang_cache, monkeypatch):
    import tilelang

    kernel = tilelang.compile(
        _programs.scale.get_tir(160, 2.0), target=_compat.cuda_target((9, 0)), out_idx=[-1]
    )
    key, entry = _compat.cache_entry_of(kernel)
    assert isinstance(key, str) and len(key) == 64
    assert isinstance(entry, Path) and entry.parent.resolve() == _compat.kernels_dir()
    assert _compat.prim_func_name(kernel.prim_func) == "scale_kernel"
    monkeypatch.setenv("TILELANG_LAYOUT_COST_MODEL", "1")
    assert _compat.key_environment() == {"TILELANG_LAYOUT_COST_MODEL": "1"}
    err = _compat.TileLangNotInstalledError("probe")
    assert isinstance(err, ImportError) and err.install_hint == _compat.INSTALL_HINT
    assert _compat.INSTALL_HINT in str(err)
