"""``ComputeSlotMappingKernel``: the slot-mapping Triton kernel as a warmkit kernel.

Its compiled variants are named by :class:`ComputeSlotMappingKernel.CompileKey`:
the five constexprs that shape the code (allocation block size, kernel blocks
per allocation block, DCP world size, rank and interleave size) and the
Triton specialization class of the two specialized scalars
(``block_table_stride`` and ``block_size``). ``num_tokens`` and
``max_num_tokens`` are ``do_not_specialize``, so batch size never causes a
recompile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import attrs
import torch
from warmkit_triton import TritonKernel, WarmupTensor, specialization_rep

from ._geometry import PAD_SLOT_ID
from ._jit import TILE, compute_slot_mapping_kernel

__all__ = ["ComputeSlotMappingKernel", "get_kernel", "launch_arguments"]

logger = logging.getLogger(__name__)

#: Launch options of every variant, at warmup and at runtime alike (Triton's
#: in-memory cache key includes the exact launch kwargs).
_LAUNCH_OPTIONS: dict[str, Any] = {"num_warps": 4}

# Representative values of the two do_not_specialize scalars for warmup: any
# int32 gives the same specialization ('i32', None).
_REP_NUM_TOKENS = 1024
_REP_NUM_REQS = 2


def launch_arguments(
    space: Mapping[str, int],
    *,
    num_tokens: Any,
    max_num_tokens: Any,
    query_start_loc: Any,
    positions: Any,
    block_table: Any,
    slot_mapping: Any,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The ``(args, kwargs)`` of one launch of the raw kernel, launch options excluded.

    Warmup (:meth:`ComputeSlotMappingKernel.warmup_args`) and runtime
    (:meth:`ComputeSlotMappingKernel.__call__`) both build their launch here,
    so the argument structure can never differ between them. Every parameter,
    the constexprs included, is positional and ``kwargs`` is empty: Triton
    specializes the same way either way, and a launch with exactly one
    positional argument per parameter lets ``warmkit_triton``'s executor skip
    binding keyword arguments on every call.

    Args:
        space: the seven scalars that shape the code, under the kernel's
            names: a ``CompileKey``'s fields, ``BlockTable.warmup_space()`` or
            ``SlotMappingGeometry.kernel_space(stride)``.
        num_tokens: tokens this step.
        max_num_tokens: size of ``slot_mapping``.
        query_start_loc: int32 ``[>= num_reqs + 1]``.
        positions: int64 ``[num_tokens]``.
        block_table: int32 ``[rows, block_table_stride]``.
        slot_mapping: int64 ``[max_num_tokens]`` output.

    Returns:
        The 15 arguments of ``compute_slot_mapping_kernel``, in order, and ``{}``.
    """
    args = (
        num_tokens,
        max_num_tokens,
        query_start_loc,
        positions,
        block_table,
        space["block_table_stride"],
        space["block_size"],
        slot_mapping,
        space["kv_cache_block_size"],  # KV_CACHE_BLOCK_SIZE
        space["blocks_per_kv_block"],  # BLOCKS_PER_KV_BLOCK
        space["total_cp_world_size"],  # TOTAL_CP_WORLD_SIZE
        space["total_cp_rank"],  # TOTAL_CP_RANK
        space["cp_kv_cache_interleave_size"],  # CP_KV_CACHE_INTERLEAVE_SIZE
        PAD_SLOT_ID,  # PAD_ID
        TILE,  # BLOCK_SIZE
    )
    return args, {}


class ComputeSlotMappingKernel(TritonKernel):
    """The slot-mapping kernel (see ``docs/blocktable.md`` for the math).

    Launch it through ``__call__`` with keyword arguments; it computes the
    key with :meth:`dispatch` and launches that key's warmed variant on the
    grid ``(num_reqs + 1,)``.
    """

    #: Stable across refactors of the private module layout (reports, monitor events).
    name = "warmkit_blocktable.ComputeSlotMappingKernel"
    fn = compute_slot_mapping_kernel

    @attrs.frozen
    class CompileKey:
        """One compiled variant of the slot-mapping kernel."""

        kv_cache_block_size: int
        blocks_per_kv_block: int
        total_cp_world_size: int
        total_cp_rank: int
        cp_kv_cache_interleave_size: int
        block_table_stride: int
        block_size: int

    def dispatch(self, *, block_table_stride: int, block_size: int, **fields: int) -> CompileKey:
        """The key of one call site.

        ``block_table_stride`` and ``block_size`` are mapped to the
        representative of their Triton specialization class; the five
        constexpr fields are forwarded unchanged.

        Args:
            block_table_stride: the block table's row stride.
            block_size: the kernel block size.
            **fields: ``kv_cache_block_size``, ``blocks_per_kv_block``,
                ``total_cp_world_size``, ``total_cp_rank``,
                ``cp_kv_cache_interleave_size``.

        Raises:
            TypeError: a missing or unknown field.
        """
        return self.CompileKey(
            block_table_stride=specialization_rep(block_table_stride),
            block_size=specialization_rep(block_size),
            **fields,
        )

    def warmup_args(self, key: CompileKey) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Storage-less arguments of a launch with exactly ``key``'s specialization.

        The tensors are 16-byte-aligned ``WarmupTensor``s of the runtime dtypes;
        the specialized scalars are the key's representatives.

        Args:
            key: the variant.

        Returns:
            ``(args, kwargs)`` for ``fn.warmup``.
        """
        stride = key.block_table_stride
        return launch_arguments(
            attrs.asdict(key),
            num_tokens=specialization_rep(_REP_NUM_TOKENS, specialize=False),
            max_num_tokens=specialization_rep(_REP_NUM_TOKENS, specialize=False),
            query_start_loc=WarmupTensor(torch.int32, (_REP_NUM_REQS + 1,)),
            positions=WarmupTensor(torch.int64, (_REP_NUM_TOKENS,)),
            block_table=WarmupTensor(torch.int32, (_REP_NUM_REQS, stride), (stride, 1)),
            slot_mapping=WarmupTensor(torch.int64, (_REP_NUM_TOKENS,)),
        )

    def launch_options(self, key: CompileKey) -> dict[str, Any]:
        """Launch options (the same for every key, at warmup and at runtime).

        Args:
            key: the variant.
        """
        return dict(_LAUNCH_OPTIONS)

    def __call__(
        self,
        *,
        num_reqs: int,
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc: Any,
        positions: Any,
        block_table: Any,
        block_table_stride: int,
        block_size: int,
        slot_mapping: Any,
        kv_cache_block_size: int,
        blocks_per_kv_block: int,
        total_cp_world_size: int,
        total_cp_rank: int,
        cp_kv_cache_interleave_size: int,
    ) -> Any:
        """Launch the slot-mapping kernel on the grid ``(num_reqs + 1,)``.

        The four tensors must start at 16-byte-aligned addresses: that is the
        specialization warmup compiles, and a misaligned one would be a
        different (unwarmed) Triton variant.

        Args:
            num_reqs: requests in this step.
            num_tokens: tokens in this step (``positions.shape[0]``).
            max_num_tokens: size of ``slot_mapping``.
            query_start_loc: int32 ``[>= num_reqs + 1]``.
            positions: int64 ``[num_tokens]``.
            block_table: int32 ``[max_num_reqs, block_table_stride]``.
            block_table_stride: the table's row stride.
            block_size: kernel block size.
            slot_mapping: int64 ``[max_num_tokens]`` output.
            kv_cache_block_size: allocation block size.
            blocks_per_kv_block: kernel blocks per allocation block.
            total_cp_world_size: DCP world size.
            total_cp_rank: DCP rank.
            cp_kv_cache_interleave_size: DCP interleave size.

        Raises:
            ValueError: a tensor that is not 16-byte aligned.
            warmkit.RuntimeCompileError: in monitor ``"error"`` mode, when the
                key was not warmed up.
        """
        for name, tensor in (
            ("query_start_loc", query_start_loc),
            ("positions", positions),
            ("block_table", block_table),
            ("slot_mapping", slot_mapping),
        ):
            if tensor.data_ptr() % 16:
                raise ValueError(
                    f"{name} is not 16-byte aligned (data_ptr {tensor.data_ptr():#x}); the "
                    "slot-mapping kernel is warmed up for aligned tensors only"
                )
        space = {
            "block_table_stride": block_table_stride,
            "block_size": block_size,
            "kv_cache_block_size": kv_cache_block_size,
            "blocks_per_kv_block": blocks_per_kv_block,
            "total_cp_world_size": total_cp_world_size,
            "total_cp_rank": total_cp_rank,
            "cp_kv_cache_interleave_size": cp_kv_cache_interleave_size,
        }
        args, kwargs = launch_arguments(
            space,
            num_tokens=num_tokens,
            max_num_tokens=max_num_tokens,
            query_start_loc=query_start_loc,
            positions=positions,
            block_table=block_table,
            slot_mapping=slot_mapping,
        )
        key = self.dispatch(**space)
        return self.run(key, (num_reqs + 1,), *args, **kwargs)


_kernel: ComputeSlotMappingKernel | None = None
_kernel_lock = threading.Lock()


def get_kernel() -> ComputeSlotMappingKernel:
    """The process-wide ``ComputeSlotMappingKernel`` instance (instances are interchangeable)."""
    global _kernel
    if _kernel is None:
        with _kernel_lock:
            if _kernel is None:
                _kernel = ComputeSlotMappingKernel()
    return _kernel
