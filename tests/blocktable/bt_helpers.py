"""Strategies, an independent loop implementation and launch helpers for the block-table tests.

Deliberately imports nothing from warmkit at module level, so that the
interpreter subprocess controls when ``warmkit_blocktable`` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

PAD = -1
KERNEL_BLOCK_SIZES = [1, 3, 16, 32, 64, 128, 256]


@dataclass(frozen=True)
class Geometry:
    """One slot-mapping geometry: K = B * bs, DCP (W, R, I)."""

    bs: int
    B: int
    W: int
    R: int
    I: int

    @property
    def K(self) -> int:
        return self.B * self.bs

    def kernel_kwargs(self) -> dict[str, int]:
        return {
            "block_size": self.bs,
            "kv_cache_block_size": self.K,
            "blocks_per_kv_block": self.B,
            "dcp_world_size": self.W,
            "dcp_rank": self.R,
            "cp_kv_cache_interleave_size": self.I,
        }


@st.composite
def geometries(draw: st.DrawFn) -> Geometry:
    """Block sizes incl. 1 and 3 and 16..256, hybrid factors, DCP 1/2/4 with interleave 1/16/block."""
    bs = draw(st.sampled_from(KERNEL_BLOCK_SIZES))
    b = draw(st.sampled_from([1, 1, 2, 4]))
    w = draw(st.sampled_from([1, 2, 4]))
    r = draw(st.integers(0, w - 1))
    k = b * bs
    interleaves = [1] + ([16] if k % 16 == 0 else []) + [k]
    i = draw(st.sampled_from(interleaves))
    return Geometry(bs=bs, B=b, W=w, R=r, I=i)


@dataclass
class Batch:
    """One step: a kernel-block table and the tokens of ``num_reqs`` requests."""

    geom: Geometry
    num_reqs: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1]
    positions: torch.Tensor  # int64 [num_tokens]
    block_table: torch.Tensor  # int32 [rows, stride]
    max_num_tokens: int

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @property
    def stride(self) -> int:
        return int(self.block_table.shape[1])


@st.composite
def batches(draw: st.DrawFn, geom: Geometry | None = None, *, distinct_ids: bool = False) -> Batch:
    """A random step over ``geom``: empty requests, contiguous or scattered positions, big block ids."""
    if geom is None:
        geom = draw(geometries())
    num_reqs = draw(st.integers(0, 6))
    alloc_per_row = draw(st.integers(1, 6))
    stride = alloc_per_row * geom.B
    rows = num_reqs + draw(st.integers(0, 2))
    max_pos = alloc_per_row * geom.K * geom.W  # every owned column < stride
    lengths = draw(
        st.lists(
            st.sampled_from([0, 0, 1, 2, 5, 17, 40, 1100]), min_size=num_reqs, max_size=num_reqs
        )
    )
    pos_chunks = []
    for n in lengths:
        n = min(n, max_pos)
        if draw(st.booleans()):
            start = draw(st.integers(0, max_pos - n))
            pos_chunks.append(torch.arange(start, start + n, dtype=torch.int64))
        else:
            seed = draw(st.integers(0, 2**31))
            g = torch.Generator().manual_seed(seed)
            pos_chunks.append(torch.randint(0, max_pos, (n,), generator=g, dtype=torch.int64))
    positions = torch.cat(pos_chunks) if pos_chunks else torch.zeros(0, dtype=torch.int64)
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    if num_reqs:
        qsl[1:] = torch.cumsum(torch.tensor([c.shape[0] for c in pos_chunks]), 0)
    seed = draw(st.integers(0, 2**31))
    g = torch.Generator().manual_seed(seed)
    if distinct_ids:
        table = torch.randperm(rows * stride, generator=g).to(torch.int32).reshape(rows, stride)
    else:
        high = draw(st.sampled_from([100, 2**20, 2**31 - 1]))  # 2**31 - 1: slots need int64
        table = torch.randint(0, high, (rows, stride), generator=g, dtype=torch.int64).to(
            torch.int32
        )
    extra = draw(st.sampled_from([0, 1, 7, 1024, 2500]))
    return Batch(geom, num_reqs, qsl, positions, table, positions.shape[0] + extra)


def rank_local_indices(positions: list[int], w: int, i: int) -> dict[int, tuple[int, int]]:
    """For each position: (owner rank, how many earlier positions that owner holds), by dealing.

    Walks positions 0, 1, 2, ... dealing them round-robin to the ``w`` ranks
    in chunks of ``i`` and counting what each rank has received so far.
    """
    needed = set(positions)
    result: dict[int, tuple[int, int]] = {}
    received = [0] * w
    for q in range(max(needed, default=-1) + 1):
        owner = (q // i) % w
        if q in needed:
            result[q] = (owner, received[owner])
        received[owner] += 1
    return result


def loop_slot_mapping(batch: Batch, rank: int | None = None) -> list[int]:
    """A straightforward per-token loop, written from the description, not the formula.

    Positions are dealt round-robin to ranks in chunks of I; each rank packs
    its tokens densely, so a token is the k-th of its owner, and lives at
    ``row[k // bs] * bs + k % bs`` (the row is at kernel-block granularity).
    """
    g = batch.geom
    rank = g.R if rank is None else rank
    out = [PAD] * batch.max_num_tokens
    qsl = batch.query_start_loc.tolist()
    pos = batch.positions.tolist()
    table = batch.block_table.tolist()
    local = rank_local_indices(pos, g.W, g.I)
    for r in range(batch.num_reqs):
        for t in range(qsl[r], qsl[r + 1]):
            owner, k = local[pos[t]]
            if owner == rank:
                out[t] = table[r][k // g.bs] * g.bs + k % g.bs
    return out


def reference(batch: Batch, rank: int | None = None) -> torch.Tensor:
    """``reference_slot_mapping`` on a batch."""
    from warmkit_blocktable import reference_slot_mapping

    kw = batch.geom.kernel_kwargs()
    if rank is not None:
        kw["dcp_rank"] = rank
    return reference_slot_mapping(
        query_start_loc=batch.query_start_loc,
        positions=batch.positions,
        block_table=batch.block_table,
        max_num_tokens=batch.max_num_tokens,
        **kw,
    )


def launch_kwargs(batch: Batch, slot_mapping: torch.Tensor) -> dict[str, object]:
    """Keyword arguments of ``ComputeSlotMappingKernel.__call__`` for a batch."""
    g = batch.geom
    return {
        "num_reqs": batch.num_reqs,
        "num_tokens": batch.num_tokens,
        "max_num_tokens": batch.max_num_tokens,
        "query_start_loc": batch.query_start_loc,
        "positions": batch.positions,
        "block_table": batch.block_table,
        "block_table_stride": batch.stride,
        "block_size": g.bs,
        "slot_mapping": slot_mapping,
        "kv_cache_block_size": g.K,
        "blocks_per_kv_block": g.B,
        "total_cp_world_size": g.W,
        "total_cp_rank": g.R,
        "cp_kv_cache_interleave_size": g.I,
    }
