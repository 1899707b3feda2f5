"""The kernel contract (TileLangKernel), the plugin's entry points, and the real kernel's dispatch."""

from __future__ import annotations

import attrs
import pytest
from warmkit_tilelang import TiledGemm, TileLangBackend, TileLangKernel

import warmkit
from warmkit import KernelDefinitionError
from warmkit._plugin import discovery as plugins
from warmkit.testing import unload_backend


def test_the_plugin_replaces_the_core_stub_without_a_conflict():
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == "tilelang"]
    assert info.distribution == "warmkit-tilelang" and not info.conflicts
    assert info.replaces == "warmkit._plugin.contract:TileLangStubBackend"
    unload_backend("tilelang")
    backend = plugins.get_backend("tilelang")
    assert isinstance(backend, TileLangBackend) and isinstance(backend, warmkit.Backend)
    status = backend.available()
    assert status.ok and status.version == "0.1.15"


def test_the_real_kernel_is_a_warmkit_kernels_entry_point():
    assert plugins.load_kernel("tilelang.gemm") is TiledGemm
    assert plugins.kernel_ref(TiledGemm) == "tilelang.gemm"


def test_dispatch_picks_the_tile_from_the_shape_and_refuses_bad_input():
    g = TiledGemm()
    assert g.dispatch(m=16, n=256, k=128).block_m == 64
    assert g.dispatch(m=512, n=256, k=128).block_m == 128
    assert g.get_warmup_keys(m=[1, 64, 65], n=128, k=64) == [
        g.dispatch(m=m, n=128, k=64) for m in (1, 64, 65)
    ]
    with pytest.raises(ValueError, match="dtype"):
        g.dispatch(m=1, n=1, k=1, dtype="float64")
    with pytest.raises(ValueError, match="positive"):
        g.dispatch(m=0, n=1, k=1)


def test_kernel_definitions_are_checked():
    @attrs.frozen
    class Key:
        n: int

    with pytest.raises(KernelDefinitionError, match="without fn"):

        class NoFn(TileLangKernel):
            CompileKey = Key

            def dispatch(self, *, n):
                return Key(n)

    with pytest.raises(KernelDefinitionError, match="module:attr"):

        class BadPath(TileLangKernel):
            CompileKey = Key
            fn = "no_colon_here"

            def dispatch(self, *, n):
                return Key(n)

    with pytest.raises(KernelDefinitionError, match="compile_args"):

        class NoArgs(TileLangKernel):
            CompileKey = Key
            fn = "x:y"

            def dispatch(self, *, n):
                return Key(n)


def test_an_unresolvable_fn_path_names_the_kernel():
    @attrs.frozen
    class Key:
        n: int

    class Missing(TileLangKernel):
        CompileKey = Key
        fn = "warmkit_tilelang:no_such_program"

        def dispatch(self, *, n):
            return Key(n)

        def compile_args(self, key):
            return (key.n,), {}

    with pytest.raises(LookupError, match="Missing.*no_such_program"):
        Missing.jit_function()


def test_device_compile_without_a_gpu_says_how_to_compile_ahead_of_time():
    if TileLangBackend().default_target() is not None:
        pytest.skip("this host has a GPU: device compiles work here (see test_gpu.py)")
    with pytest.raises(warmkit.WarmupError, match="target='cuda:90'"):
        reg = warmkit.WarmupRegistry()
        reg.add(TiledGemm, m=64, n=128, k=64)
        warmkit.warmup(warmkit.WarmupConfig(progress="off"), reg)
