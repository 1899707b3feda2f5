"""A vectorized pure-torch reference of the slot-mapping kernel.

It computes exactly what :func:`warmkit_blocktable._jit.compute_slot_mapping_kernel`
computes, on any device torch supports, and is the implementation
:class:`~warmkit_blocktable.BlockTable` uses on devices where the Triton kernel
does not run (the CPU).
"""

from __future__ import annotations

import torch

__all__ = [
    "PAD_SLOT_ID",
    "check_geometry",
    "reference_slot_mapping",
    "unchecked_torch_slot_mapping",
]

#: The value written for tokens this rank does not own and for padding.
PAD_SLOT_ID = -1


def check_geometry(
    *,
    block_size: int,
    kv_cache_block_size: int,
    blocks_per_kv_block: int,
    dcp_world_size: int,
    dcp_rank: int,
    cp_kv_cache_interleave_size: int,
) -> None:
    """Check that one slot-mapping geometry is consistent.

    Args:
        block_size: kernel block size ``bs``.
        kv_cache_block_size: allocation block size ``K``.
        blocks_per_kv_block: kernel blocks per allocation block ``B``.
        dcp_world_size: decode-context-parallel world size ``W``.
        dcp_rank: this rank ``R``.
        cp_kv_cache_interleave_size: tokens per rank per round-robin turn ``I``.

    Raises:
        TypeError: ``dcp_rank`` is not an int.
        ValueError: if a size is not positive, ``K != B * bs``, the rank is
            outside ``[0, W)``, or ``I`` does not divide ``K``.
    """
    for name, value in (
        ("block_size", block_size),
        ("kv_cache_block_size", kv_cache_block_size),
        ("blocks_per_kv_block", blocks_per_kv_block),
        ("dcp_world_size", dcp_world_size),
        ("cp_kv_cache_interleave_size", cp_kv_cache_interleave_size),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(dcp_rank, bool) or not isinstance(dcp_rank, int):
        raise TypeError(f"dcp_rank must be an int, got {dcp_rank!r}")
    if kv_cache_block_size != blocks_per_kv_block * block_size:
        raise ValueError(
            f"kv_cache_block_size ({kv_cache_block_size}) must equal "
            f"blocks_per_kv_block ({blocks_per_kv_block}) * block_size ({block_size})"
        )
    if not 0 <= dcp_rank < dcp_world_size:
        raise ValueError(
            f"DCP rank {dcp_rank} is out of range for DCP world size {dcp_world_size}: need 0 <= rank < world size"
        )
    if kv_cache_block_size % cp_kv_cache_interleave_size != 0:
        raise ValueError(
            f"cp_kv_cache_interleave_size ({cp_kv_cache_interleave_size}) must divide the "
            f"allocation block size ({kv_cache_block_size})"
        )


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
        ValueError: on an inconsistent geometry, a malformed
            ``query_start_loc``, a negative position, a position whose block
            column lies beyond the table row, more requests than table rows,
            or ``max_num_tokens < num_tokens``.
    """
    check_geometry(
        block_size=block_size,
        kv_cache_block_size=kv_cache_block_size,
        blocks_per_kv_block=blocks_per_kv_block,
        dcp_world_size=dcp_world_size,
        dcp_rank=dcp_rank,
        cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
    )
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

    qsl = query_start_loc.to(device=device, dtype=torch.int64)
    counts = qsl[1:] - qsl[:-1]
    bad = torch.nonzero(counts < 0)
    if bad.numel():
        r = int(bad[0, 0])
        raise ValueError(
            f"query_start_loc is not monotonic at request {r}: {int(qsl[r])} > {int(qsl[r + 1])}"
        )
    if int(qsl[0]) != 0 or int(qsl[-1]) != num_tokens:
        raise ValueError(
            f"query_start_loc must span [0, num_tokens={num_tokens}], got [{int(qsl[0])}, {int(qsl[-1])}]"
        )

    pos = positions.to(torch.int64)
    negative = torch.nonzero(pos < 0)
    if negative.numel():
        t = int(negative[0, 0])
        raise ValueError(f"token {t} has a negative position {int(pos[t])}")

    req = torch.repeat_interleave(torch.arange(num_reqs, device=device), counts)
    owned, lo, col = _columns(
        pos,
        block_size=block_size,
        kv_cache_block_size=kv_cache_block_size,
        blocks_per_kv_block=blocks_per_kv_block,
        dcp_world_size=dcp_world_size,
        dcp_rank=dcp_rank,
        cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
    )
    stride = block_table.shape[1]
    beyond = torch.nonzero(owned & (col >= stride))
    if beyond.numel():
        t = int(beyond[0, 0])
        raise ValueError(
            f"token {t} (request {int(req[t])}, position {int(pos[t])}) needs block column "
            f"{int(col[t])}, beyond the row width {stride}"
        )
    slot = _gather(block_table.to(device), req, owned, lo, col, block_size, pad_id)

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


def _columns(
    pos: torch.Tensor,
    *,
    block_size: int,
    kv_cache_block_size: int,
    blocks_per_kv_block: int,
    dcp_world_size: int,
    dcp_rank: int,
    cp_kv_cache_interleave_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ownership, rank-local offset and table column of every position (int64 math)."""
    k, b, w, r, i = (
        kv_cache_block_size,
        blocks_per_kv_block,
        dcp_world_size,
        dcp_rank,
        cp_kv_cache_interleave_size,
    )
    virtual = k * w
    vb = torch.div(pos, virtual, rounding_mode="floor")
    o = pos - vb * virtual
    owned = torch.remainder(torch.div(o, i, rounding_mode="floor"), w) == r
    lo = torch.div(o, w * i, rounding_mode="floor") * i + torch.remainder(o, i)
    col = vb * b + torch.div(lo, block_size, rounding_mode="floor")
    return owned, lo, col


def _gather(
    table: torch.Tensor,
    req: torch.Tensor,
    owned: torch.Tensor,
    lo: torch.Tensor,
    col: torch.Tensor,
    block_size: int,
    pad_id: int,
) -> torch.Tensor:
    """The slots: table entries read only where owned (column 0 elsewhere, then masked)."""
    safe_col = torch.where(owned, col, torch.zeros_like(col))
    block_id = table[req, safe_col].to(torch.int64)
    slot = block_id * block_size + torch.remainder(lo, block_size)
    return torch.where(owned, slot, torch.full_like(slot, pad_id))


def unchecked_torch_slot_mapping(
    *,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    kv_cache_block_size: int,
    blocks_per_kv_block: int,
    dcp_world_size: int,
    dcp_rank: int,
    cp_kv_cache_interleave_size: int,
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
        block_size: kernel block size.
        kv_cache_block_size: allocation block size.
        blocks_per_kv_block: kernel blocks per allocation block.
        dcp_world_size: DCP world size.
        dcp_rank: DCP rank.
        cp_kv_cache_interleave_size: DCP interleave size.
        out: int64 output buffer of at least ``num_tokens`` elements.
        pad_id: padding value.

    Returns:
        ``out``.
    """
    num_tokens = positions.shape[0]
    num_reqs = query_start_loc.shape[0] - 1
    counts = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)
    req = torch.repeat_interleave(
        torch.arange(num_reqs, device=positions.device), counts, output_size=num_tokens
    )
    owned, lo, col = _columns(
        positions,
        block_size=block_size,
        kv_cache_block_size=kv_cache_block_size,
        blocks_per_kv_block=blocks_per_kv_block,
        dcp_world_size=dcp_world_size,
        dcp_rank=dcp_rank,
        cp_kv_cache_interleave_size=cp_kv_cache_interleave_size,
    )
    out[:num_tokens] = _gather(block_table, req, owned, lo, col, block_size, pad_id)
    out[num_tokens:].fill_(pad_id)
    return out
