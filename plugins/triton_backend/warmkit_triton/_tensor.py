"""``WarmupTensor``: a storage-less stand-in for a tensor argument during warmup.

Triton specializes a tensor argument only on its element type and on whether
``data_ptr()`` is divisible by 16, so a warmup never needs memory. But the
Python around a launch (a kernel wrapper's ``warmup_args``, a grid function, a
heuristic) often reads ``shape``, ``stride()``, ``numel()``, ``ndim`` or
``device``; vLLM's fake tensors lacked these and warmups crashed. This class
implements that descriptor API and nothing that touches data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["WarmupTensor"]

# A fake device address: 256-byte aligned like a CUDA allocation, far from 0.
_BASE_ADDRESS = 1 << 40

# Element sizes for dtypes given by name when torch is not importable.
_NAME_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
}
_ALIASES = {
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "float": "float32",
    "fp64": "float64",
    "double": "float64",
    "i8": "int8",
    "u8": "uint8",
    "i16": "int16",
    "u16": "uint16",
    "i32": "int32",
    "int": "int32",
    "u32": "uint32",
    "i64": "int64",
    "long": "int64",
    "u64": "uint64",
    "i1": "bool",
    "u1": "bool",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
}


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _normalize_dtype(dtype: Any) -> tuple[Any, str, int]:
    """Return ``(dtype object, canonical name, element size)``."""
    torch = _torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        return dtype, str(dtype).removeprefix("torch."), dtype.itemsize
    if isinstance(dtype, str):
        name = dtype.strip().removeprefix("torch.").removeprefix("tl.")
    elif hasattr(dtype, "primitive_bitwidth") or type(dtype).__module__.startswith("triton"):
        # a triton.language dtype such as tl.float16: its str() is "fp16"
        name = str(dtype)
    else:
        raise TypeError(
            f"WarmupTensor dtype must be a torch.dtype, a triton.language dtype or a name "
            f"such as 'float16', got {type(dtype).__name__} {dtype!r}"
        )
    name = _ALIASES.get(name, name)
    if torch is not None:
        resolved = getattr(torch, name, None)
        if isinstance(resolved, torch.dtype):
            return resolved, name, resolved.itemsize
    if name not in _NAME_SIZES:
        raise TypeError(f"WarmupTensor: unknown dtype name {dtype!r}")
    return name, name, _NAME_SIZES[name]


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = []
    running = 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


class WarmupTensor:
    """A tensor descriptor without storage, for building warmup arguments.

    Triton treats it as a pointer argument (it has ``data_ptr()`` and
    ``dtype``): ``*fp16`` with the divisible-by-16 attribute when ``aligned``,
    without it otherwise, exactly like a real tensor at such an address.

    Args:
        dtype: a ``torch.dtype`` (e.g. ``torch.float16``), a
            ``triton.language`` dtype, or a name (``"float16"``, ``"fp16"``,
            ``"bf16"`` ...). With torch installed, ``.dtype`` is the torch dtype.
        shape: the sizes, default ``(1,)``.
        strides: element strides; default contiguous (row-major).
        aligned: whether ``data_ptr()`` is 16-byte aligned (the common case:
            allocations are). False models a view at an unaligned offset, which
            Triton compiles as a *different* variant.
        device: the device it claims to live on, default ``"cuda"``.

    Raises:
        TypeError: an unknown dtype, or a shape/stride entry that is not an int.
        ValueError: negative sizes, or strides of another length than shape.
    """

    __slots__ = ("_device", "_dtype", "_dtype_name", "_itemsize", "_shape", "_strides", "aligned")

    def __init__(
        self,
        dtype: Any,
        shape: Iterable[int] = (1,),
        strides: Iterable[int] | None = None,
        aligned: bool = True,
        *,
        device: Any = "cuda",
    ) -> None:
        self._dtype, self._dtype_name, self._itemsize = _normalize_dtype(dtype)
        shape_t = tuple(shape)
        for s in shape_t:
            if isinstance(s, bool) or not isinstance(s, int):
                raise TypeError(f"WarmupTensor shape entries must be ints, got {shape_t!r}")
            if s < 0:
                raise ValueError(f"WarmupTensor shape entries must be >= 0, got {shape_t!r}")
        if strides is None:
            strides_t = _contiguous_strides(shape_t)
        else:
            strides_t = tuple(strides)
            if len(strides_t) != len(shape_t):
                raise ValueError(
                    f"WarmupTensor strides {strides_t!r} must have one entry per dimension of shape {shape_t!r}"
                )
            for s in strides_t:
                if isinstance(s, bool) or not isinstance(s, int):
                    raise TypeError(f"WarmupTensor strides must be ints, got {strides_t!r}")
        self._shape = shape_t
        self._strides = strides_t
        self.aligned = bool(aligned)
        torch = _torch()
        self._device = torch.device(device) if torch is not None else device

    # -- what Triton reads ---------------------------------------------------------------

    @property
    def dtype(self) -> Any:
        """The element type (a ``torch.dtype`` when torch is installed)."""
        return self._dtype

    def data_ptr(self) -> int:
        """A fake address: 16-byte aligned when ``aligned``, else 4 bytes past an aligned one."""
        return _BASE_ADDRESS if self.aligned else _BASE_ADDRESS + 4

    def ptr_range(self) -> int:
        """The byte span the tensor covers (Triton's AMD backend reads it)."""
        return self.nbytes

    # -- the descriptor API ----------------------------------------------------------------

    @property
    def shape(self) -> Any:
        """The sizes, a ``torch.Size`` when torch is installed, else a tuple."""
        torch = _torch()
        return torch.Size(self._shape) if torch is not None else self._shape

    def size(self, dim: int | None = None) -> Any:
        """``shape``, or one size.

        Raises:
            IndexError: ``dim`` out of range.
        """
        if dim is None:
            return self.shape
        return self._shape[self._dim_index(dim)]

    def stride(self, dim: int | None = None) -> Any:
        """The strides in elements (a tuple), or one stride.

        Raises:
            IndexError: ``dim`` out of range.
        """
        if dim is None:
            return self._strides
        return self._strides[self._dim_index(dim)]

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    def dim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self._shape)

    nelement = numel

    def element_size(self) -> int:
        """Bytes per element."""
        return self._itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._itemsize

    @property
    def nbytes(self) -> int:
        """Bytes spanned: ``numel() * element_size()`` for a contiguous tensor."""
        if self.numel() == 0:
            return 0
        span = 1 + sum((s - 1) * abs(st) for s, st in zip(self._shape, self._strides))
        return span * self._itemsize

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Whether the strides are row-major contiguous (size-1 dims are ignored, as in torch)."""
        expected = 1
        for size, stride in zip(reversed(self._shape), reversed(self._strides)):
            if size == 1:
                continue
            if stride != expected:
                return False
            expected *= size
        return True

    def contiguous(self) -> WarmupTensor:
        """A contiguous descriptor of the same shape (itself when already contiguous)."""
        if self.is_contiguous():
            return self
        return WarmupTensor(self._dtype, self._shape, None, self.aligned, device=self._device)

    def storage_offset(self) -> int:
        """Always 0: an unaligned descriptor models the address, not an offset."""
        return 0

    @property
    def device(self) -> Any:
        """The device (a ``torch.device`` when torch is installed)."""
        return self._device

    @property
    def is_cuda(self) -> bool:
        """Whether ``device`` is a CUDA device."""
        return getattr(self._device, "type", str(self._device).split(":")[0]) == "cuda"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d WarmupTensor")
        return self._shape[0]

    def __repr__(self) -> str:
        extra = "" if self.aligned else ", aligned=False"
        strides = "" if self.is_contiguous() else f", strides={self._strides}"
        return f"WarmupTensor({self._dtype_name}, shape={self._shape}{strides}{extra})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WarmupTensor):
            return NotImplemented
        return (self._dtype_name, self._shape, self._strides, self.aligned, str(self._device)) == (
            other._dtype_name,
            other._shape,
            other._strides,
            other.aligned,
            str(other._device),
        )

    def __hash__(self) -> int:
        return hash((self._dtype_name, self._shape, self._strides, self.aligned, str(self._device)))

    def _dim_index(self, dim: int) -> int:
        n = len(self._shape)
        if not -n <= dim < n:
            raise IndexError(f"dimension {dim} out of range for a {n}-d WarmupTensor")
        return dim % n
