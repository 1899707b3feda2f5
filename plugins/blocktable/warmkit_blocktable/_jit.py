"""The raw ``@triton.jit`` slot-mapping kernel.

This module holds only the Triton function, so that it can be imported (and
run under ``TRITON_INTERPRET=1``) without the warmkit wrapper around it. The
math is described in ``docs/blocktable.md``; in short, for each token ``t``
of request ``r``::

    p     = positions[t]
    V     = KV_CACHE_BLOCK_SIZE * TOTAL_CP_WORLD_SIZE
    vb, o = p // V, p % V
    owned = (o // I) % W == R
    lo    = (o // (W * I)) * I + o % I
    col   = vb * BLOCKS_PER_KV_BLOCK + lo // block_size
    slot  = block_table[r, col] * block_size + lo % block_size   (int64)
    slot_mapping[t] = slot if owned else PAD_ID

and the last program (``program_id == num_reqs``) writes ``PAD_ID`` to
``slot_mapping[num_tokens:max_num_tokens]``.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["TILE", "compute_slot_mapping_kernel"]

#: Triton tile width (the ``BLOCK_SIZE`` constexpr): tokens handled per loop
#: iteration of one program.
TILE = 1024


@triton.jit(do_not_specialize=["num_tokens", "max_num_tokens"])
def compute_slot_mapping_kernel(
    num_tokens,  # tokens scheduled this step (not specialized)
    max_num_tokens,  # capacity of slot_mapping (not specialized)
    query_start_loc,  # int32 [num_reqs + 1]
    positions,  # int64 [num_tokens]
    block_table,  # int32 [max_num_reqs, block_table_stride]
    block_table_stride,  # row stride of block_table (specialized)
    block_size,  # kernel block size (specialized)
    slot_mapping,  # int64 [max_num_tokens], output
    KV_CACHE_BLOCK_SIZE: tl.constexpr,
    BLOCKS_PER_KV_BLOCK: tl.constexpr,
    TOTAL_CP_WORLD_SIZE: tl.constexpr,
    TOTAL_CP_RANK: tl.constexpr,
    CP_KV_CACHE_INTERLEAVE_SIZE: tl.constexpr,
    PAD_ID: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    req_idx = tl.program_id(0)
    num_reqs = tl.num_programs(0) - 1

    if req_idx == num_reqs:
        # Last program: pad [num_tokens, max_num_tokens) so that the fixed
        # buffer stays valid for CUDA-graph replay.
        for i in range(num_tokens, max_num_tokens, BLOCK_SIZE):
            offsets = i + tl.arange(0, BLOCK_SIZE)
            tl.store(slot_mapping + offsets, PAD_ID, mask=offsets < max_num_tokens)
        return

    row = block_table + req_idx.to(tl.int64) * block_table_stride
    start = tl.load(query_start_loc + req_idx)
    end = tl.load(query_start_loc + req_idx + 1)
    VIRTUAL_BLOCK: tl.constexpr = KV_CACHE_BLOCK_SIZE * TOTAL_CP_WORLD_SIZE
    for i in range(start, end, BLOCK_SIZE):
        offsets = i + tl.arange(0, BLOCK_SIZE)
        in_req = offsets < end
        pos = tl.load(positions + offsets, mask=in_req, other=0).to(tl.int64)
        vb = pos // VIRTUAL_BLOCK
        o = pos - vb * VIRTUAL_BLOCK
        if TOTAL_CP_WORLD_SIZE > 1:
            owned = ((o // CP_KV_CACHE_INTERLEAVE_SIZE) % TOTAL_CP_WORLD_SIZE) == TOTAL_CP_RANK
            lo = (
                o // (TOTAL_CP_WORLD_SIZE * CP_KV_CACHE_INTERLEAVE_SIZE)
            ) * CP_KV_CACHE_INTERLEAVE_SIZE + (o % CP_KV_CACHE_INTERLEAVE_SIZE)
            read = in_req & owned
        else:
            lo = o
            read = in_req
        col = vb * BLOCKS_PER_KV_BLOCK + lo // block_size
        # The table entry is read only for tokens this rank owns.
        block_id = tl.load(row + col, mask=read, other=0).to(tl.int64)
        slot = block_id * block_size + lo % block_size
        if TOTAL_CP_WORLD_SIZE > 1:
            slot = tl.where(owned, slot, PAD_ID)
        tl.store(slot_mapping + offsets, slot, mask=in_req)
