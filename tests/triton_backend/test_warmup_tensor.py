"""WarmupTensor: the descriptor API, Triton treats it as the tensor it describes, kernels that read shapes."""

from __future__ import annotations

import pytest
import torch
from triton.backends.compiler import BaseBackend
from triton.runtime import jit as triton_jit
from warmkit_triton import TritonBackend, WarmupTensor

import warmkit

from ._kernels import ScaleRows, scale_rows_kernel

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")


def spec(arg):
    return tuple(triton_jit.native_specialize_impl(BaseBackend, arg, False, True, True))


def test_descriptor_api_matches_torch():
    real = torch.empty((3, 5, 7), dtype=torch.float16)
    fake = WarmupTensor(torch.float16, (3, 5, 7))
    assert fake.dtype == real.dtype
    assert fake.shape == real.shape and isinstance(fake.shape, torch.Size)
    assert fake.size() == real.size() and fake.size(1) == real.size(1) and fake.size(-1) == 7
    assert (
        fake.stride() == real.stride() and fake.stride(0) == real.stride(0) and fake.stride(-1) == 1
    )
    assert fake.ndim == real.ndim == fake.dim() == 3
    assert fake.numel() == real.numel() == fake.nelement()
    assert fake.element_size() == real.element_size() == fake.itemsize
    assert fake.nbytes == real.nbytes
    assert fake.is_contiguous() and len(fake) == 3
    assert fake.device == torch.device("cuda") and fake.is_cuda
    assert fake.storage_offset() == 0
    with pytest.raises(IndexError):
        fake.size(3)


def test_strided_and_transposed():
    real = torch.empty((4, 6), dtype=torch.float32).t()
    fake = WarmupTensor("float32", real.shape, real.stride())
    assert fake.stride() == real.stride() == (1, 6)
    assert fake.is_contiguous() is real.is_contiguous() is False
    assert fake.contiguous().is_contiguous() and fake.contiguous().shape == fake.shape
    assert fake.nbytes == 4 * 6 * 4
    padded = WarmupTensor("float16", (4, 60), strides=(64, 1))
    assert not padded.is_contiguous() and padded.nbytes == (3 * 64 + 60) * 2
    # size-1 dimensions are ignored by torch's contiguity check, and by ours
    assert WarmupTensor("float32", (1, 8), strides=(99, 1)).is_contiguous()


@pytest.mark.parametrize(
    "dtype,torch_dtype",
    [
        (torch.bfloat16, torch.bfloat16),
        ("float16", torch.float16),
        ("fp16", torch.float16),
        ("bf16", torch.bfloat16),
        ("torch.int64", torch.int64),
        ("i32", torch.int32),
        ("float8_e4m3fn", torch.float8_e4m3fn),
    ],
)
def test_dtype_forms(dtype, torch_dtype):
    t = WarmupTensor(dtype, (2,))
    assert t.dtype is torch_dtype
    assert spec(t) == spec(torch.empty(2, dtype=torch_dtype))


def test_triton_language_dtype():
    import triton.language as tl

    t = WarmupTensor(tl.float16, (2,))
    assert t.dtype is torch.float16 and spec(t) == ("*fp16", "D")


def test_alignment_is_what_triton_specializes_on():
    aligned = WarmupTensor(torch.float32, (8,))
    unaligned = WarmupTensor(torch.float32, (8,), aligned=False)
    base = torch.empty(16, dtype=torch.float32)
    assert spec(aligned) == spec(base) == ("*fp32", "D")
    assert spec(unaligned) == spec(base[1:]) == ("*fp32", "")
    assert aligned.data_ptr() % 16 == 0 and unaligned.data_ptr() % 16 != 0
    assert "aligned=False" in repr(unaligned)


def test_bad_arguments():
    with pytest.raises(TypeError, match="unknown dtype"):
        WarmupTensor("float13")
    with pytest.raises(TypeError, match="dtype"):
        WarmupTensor(3.5)
    with pytest.raises(ValueError, match=">= 0"):
        WarmupTensor("float32", (-1,))
    with pytest.raises(TypeError, match="ints"):
        WarmupTensor("float32", (2.0,))
    with pytest.raises(ValueError, match="one entry per dimension"):
        WarmupTensor("float32", (2, 3), strides=(1,))
    with pytest.raises(TypeError, match="0-d"):
        len(WarmupTensor("float32", ()))


def test_equality_and_hash():
    assert WarmupTensor("fp16", (2, 3)) == WarmupTensor(torch.float16, (2, 3))
    assert WarmupTensor("fp16", (2, 3)) != WarmupTensor("fp16", (2, 3), aligned=False)
    assert len({WarmupTensor("fp16", (2, 3)), WarmupTensor(torch.float16, [2, 3])}) == 1


def test_kernel_whose_wrapper_reads_shapes_and_strides_compiles(triton_cache):
    """ScaleRows.warmup_args reads ndim, size(), numel(), stride(), device ...: an AOT compile for sm_90."""
    backend = TritonBackend()
    kernel = ScaleRows()
    key = kernel.dispatch(dtype="float16", n_cols=100, stride=128)
    with backend.compile_scope("cuda:90", 1):
        art = backend.compile(kernel, key, "cuda:90")
    assert art.target == "cuda:90" and not art.cache_hit
    assert any(p.suffix == ".cubin" for p in triton_cache.rglob("*"))


def test_warmup_tensor_and_a_real_tensor_hit_the_same_cache_entry(triton_cache):
    """The same launch with real CPU tensors (aligned allocations) has the same hash as with descriptors."""
    backend = TritonBackend()
    kernel = ScaleRows()
    key = kernel.dispatch(dtype="float32", n_cols=64, stride=64)
    with backend.compile_scope("cuda:90", 1):
        art = backend.compile(kernel, key, "cuda:90")
    x = torch.empty((4, 64), dtype=torch.float32)
    out = torch.empty_like(x)
    from warmkit_triton._aot import AotDriver, aot_driver, parse_target

    with aot_driver(AotDriver(parse_target("cuda:90"))):
        compiled = scale_rows_kernel.warmup(
            *ScaleRows._args(x, out, 3.0), grid=(1,), BLOCK_N=key.block_n
        )
    assert compiled.hash == art.hash


def test_warmup_through_warmkit(triton_cache):
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        ScaleRows().register_warmup(dtype="float16", n_cols=[48, 100], stride=128)
    report = warmkit.warmup(
        warmkit.WarmupConfig(target="cuda:90", progress="off", monitor="off", jobs=1), registry=reg
    )
    assert [e.status for e in report.entries] == ["compiled", "compiled"]
