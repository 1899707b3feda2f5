"""A vectorized pure-torch reference of the slot-mapping kernel.

It computes exactly what :func:`warmkit_blocktable._jit.compute_slot_mapping_kernel`
computes, on any device torch supports, and is the implementation
:class:`~warmkit_blocktable.BlockTable` uses on devices where the Triton kernel
does not run (the CPU).
"""

from __future__ import annotations

import torch

from ._geometry import PAD_SLOT_ID, SlotMappingGeometry

__all__ = [
    "PAD_SLOT_ID",
    "checked_slot_mapping",
    "reference_slot_mapping",
    "unchecked_torch_slot_mapping",
]


def reference_slot_mapping(
    *,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    kv_cache_block_size: int,
    blocks_per_kv_block: int = 1,
    dcp_world_size: int = 1,
    dcp_rank: int = 0,
    cp_kv_cache_interleave_size: int = 1,
    max_num_tokens: int | None = None,
    pad_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compute the slot mapping of one step with plain torch operations.

    Token ``t`` of request ``r`` (``query_start_loc[r] <= t < query_start_loc[r+1]``)
    at position ``p = positions[t]`` gets, with ``V = K * W``::

        o = p % V;  owned = (o // I) % W == R
        lo = (o // (W * I)) * I + o % I
        slot = block_table[r, (p // V) * B + lo // bs] * bs + lo % bs

    or ``pad_id`` if this rank does not own it. ``[num_tokens, max_num_tokens)``
    is filled with ``pad_id``.

    Args:
        query_start_loc: int ``[num_reqs + 1]`` cumulative token offsets; it
            must start at 0, be non-decreasing and end at ``positions.shape[0]``.
        positions: int ``[num_tokens]`` non-negative positions.
        block_table: int ``[rows >= num_reqs, stride]`` table at kernel-block
            granularity.
        block_size: kernel block size ``bs``.
        kv_cache_block_size: allocation block size ``K = B * bs``.
        blocks_per_kv_block: kernel blocks per allocation block ``B``.
        dcp_world_size: decode-context-parallel world size ``W``.
        dcp_rank: this rank ``R``.
        cp_kv_cache_interleave_size: tokens per rank per turn ``I``.
        max_num_tokens: length of the result (default ``num_tokens``).
        pad_id: value for padding and for tokens not owned by this rank.
        out: optional int64 tensor of at least ``max_num_tokens`` elements to
            write into (its first ``max_num_tokens`` elements are written).

    Returns:
        The int64 slot mapping of length ``max_num_tokens`` (``out[:max_num_tokens]``
        when ``out`` is given).

    Raises:
        ValueError: on an inconsistent geometry (as
            :class:`~warmkit_blocktable.SlotMappingGeometry`), a malformed
            ``query_start_loc``, a negative position, a position whose block
            column lies beyond the table row, more requests than table rows,
            or ``max_num_tokens < num_tokens``.
    """
    geometry = SlotMappingGeometry(
        block_size=block_size,
        kv_cache_block_size=kv_cache_block_size,
        blocks_per_kv_block=blocks_per_kv_block,
        dcp_world_size=dcp_world_size,
        dcp_rank=dcp_rank,
        cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
    )
    return checked_slot_mapping(
        geometry,
        query_start_loc=query_start_loc,
        positions=positions,
        block_table=block_table,
        max_num_tokens=max_num_tokens,
        pad_id=pad_id,
        out=out,
    )


def checked_slot_mapping(
    geometry: SlotMappingGeometry,
    *,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    max_num_tokens: int | None = None,
    pad_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`reference_slot_mapping` for a geometry that is already built (and so checked).

    Args:
        geometry: the slot-mapping constants.
        query_start_loc: as :func:`reference_slot_mapping`.
        positions: as :func:`reference_slot_mapping`.
        block_table: as :func:`reference_slot_mapping`.
        max_num_tokens: as :func:`reference_slot_mapping`.
        pad_id: as :func:`reference_slot_mapping`.
        out: as :func:`reference_slot_mapping`.

    Returns:
        As :func:`reference_slot_mapping`.

    Raises:
        ValueError: as :func:`reference_slot_mapping`, the geometry aside.
    """
    if query_start_loc.ndim != 1 or query_start_loc.shape[0] < 1:
        raise ValueError("query_start_loc must be a 1-D tensor of num_reqs + 1 offsets")
    if positions.ndim != 1:
        raise ValueError("positions must be a 1-D tensor")
    if block_table.ndim != 2:
        raise ValueError("block_table must be a 2-D tensor")
    device = positions.device
    num_tokens = positions.shape[0]
    num_reqs = query_start_loc.shape[0] - 1
    if max_num_tokens is None:
        max_num_tokens = num_tokens
    if max_num_tokens < num_tokens:
        raise ValueError(
            f"max_num_tokens ({max_num_tokens}) is smaller than num_tokens ({num_tokens})"
        )
    if num_reqs > block_table.shape[0]:
        raise ValueError(
            f"{num_reqs} requests but the block table has only {block_table.shape[0]} rows"
        )
    requests, columns = geometry.locate(query_start_loc, positions, block_table.shape[1])
    slot = geometry.slots(block_table.to(device), requests, columns, pad_id)

    if out is None:
        result = torch.full((max_num_tokens,), pad_id, dtype=torch.int64, device=device)
    else:
        if out.dtype != torch.int64 or out.ndim != 1 or out.shape[0] < max_num_tokens:
            raise ValueError(
                f"out must be a 1-D int64 tensor of at least {max_num_tokens} elements"
            )
        result = out[:max_num_tokens]
        result[num_tokens:].fill_(pad_id)
    result[:num_tokens] = slot
    return result


def unchecked_torch_slot_mapping(
    *,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    geometry: SlotMappingGeometry,
    out: torch.Tensor,
    pad_id: int = PAD_SLOT_ID,
) -> torch.Tensor:
    """The reference's math with no input checks and no host synchronization.

    For benchmarks only (a fair "plain torch" baseline on a GPU): it trusts its
    inputs completely, like the kernel. Writes ``out`` in full (tail padded).

    Args:
        query_start_loc: int ``[num_reqs + 1]`` offsets, assumed valid.
        positions: int64 ``[num_tokens]``, assumed valid.
        block_table: int32 kernel-block table.
        geometry: the slot-mapping constants.
        out: int64 output buffer of at least ``num_tokens`` elements.
        pad_id: padding value.

    Returns:
        ``out``.
    """
    num_tokens = positions.shape[0]
    num_reqs = query_start_loc.shape[0] - 1
    counts = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)
    requests = torch.repeat_interleave(
        torch.arange(num_reqs, device=positions.device), counts, output_size=num_tokens
    )
    columns = geometry.columns(positions)
    out[:num_tokens] = geometry.slots(block_table, requests, columns, pad_id)
    out[num_tokens:].fill_(pad_id)
    return out
