"""Accessors for what a recorded manifest encodes: ``triton.language`` values and a JITFunction's identity."""

from __future__ import annotations

import hashlib
import inspect
import textwrap
from typing import Any, NamedTuple

from ._import import require_triton


def unwrap_constexpr(value: Any) -> tuple[bool, Any]:
    """``(True, value.value)`` for a ``tl.constexpr`` wrapper, else ``(False, value)``. Checked: 3.6.0, 3.9.0."""
    require_triton()
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        return True, value.value
    return False, value


def dtype_name(value: Any) -> str | None:
    """The name of a (non-pointer) ``tl.dtype`` that ``dtype_from_name`` rebuilds exactly, else None.

    Checked: 3.6.0, 3.9.0 (``str(tl.float16) == "fp16"``, ``tl.dtype("fp16") == tl.float16``).
    """
    require_triton()
    import triton.language as tl

    if not isinstance(value, tl.dtype) or isinstance(value, tl.pointer_type):
        return None
    name = str(value)
    try:
        return name if tl.dtype(name) == value else None
    except Exception:  # noqa: BLE001 - a dtype with no constructible name
        return None


def dtype_from_name(name: str) -> Any:
    """The ``tl.dtype`` named ``name`` (``"fp16"``, ``"bf16"``, ``"int1"`` ...). Checked: 3.6.0, 3.9.0."""
    require_triton()
    import triton.language as tl

    return tl.dtype(name)


class JitParam(NamedTuple):
    """One parameter of a JITFunction, as its binder specializes it."""

    name: str
    is_constexpr: bool
    do_not_specialize: bool
    do_not_specialize_on_alignment: bool


def jit_param_flags(fn: Any) -> list[JitParam]:
    """``fn``'s parameters in order, with their constexpr and specialization flags.

    Checked: 3.6.0, 3.9.0 (``JITFunction.params``: ``KernelParam`` objects).
    """
    return [
        JitParam(
            p.name,
            bool(p.is_constexpr),
            bool(p.do_not_specialize),
            bool(p.do_not_specialize_on_alignment),
        )
        for p in fn.params
    ]


def source_identity(fn: Any) -> tuple[str, str]:
    """``(sha256 of fn's source text, Triton's source hash)`` of a JITFunction.

    Triton's hash (``cache_key``) covers the source, its starting line and the
    functions and globals it uses; it is part of the disk-cache key. An
    ``InterpretedFunction`` (``TRITON_INTERPRET=1``) has neither: its Python
    function's source stands for both. Checked: 3.6.0, 3.9.0.
    """
    src = getattr(fn, "src", None)
    if src is None:
        text = textwrap.dedent(inspect.getsource(fn.fn))
        digest = hashlib.sha256(text.encode()).hexdigest()
        return digest, digest
    return hashlib.sha256(src.encode()).hexdigest(), fn.cache_key


def probe_kernel() -> Any:
    """A small ``@triton.jit`` kernel, ``(src, dst, n, BLOCK: tl.constexpr)``: ``dst = 2 * src``.

    What a compile worker compiles once, into a throwaway cache, to pay the
    compiler's first-run costs early (``_setup.prime_worker``). Checked: 3.6.0, 3.9.0.
    """
    import triton
    import triton.language as tl

    @triton.jit
    def warmkit_prime(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n) * 2.0, mask=offs < n)

    return warmkit_prime
