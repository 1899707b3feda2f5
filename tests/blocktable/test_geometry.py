"""``SlotMappingGeometry``: checked construction, its names, and its slot math against oracles.

The oracles are independent of the formula: ``bt_helpers.rank_local_indices``
deals positions out to the ranks one by one, and ``loop_slot_mapping`` walks
every token. The Triton kernel is held against the same loop in
``interp_kernel.py``.
"""

from __future__ import annotations

import inspect

import attrs
import pytest
import torch
from bt_helpers import Batch, Geometry, batches, geometries, loop_slot_mapping, rank_local_indices
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warmkit_blocktable import (
    BlockTable,
    ComputeSlotMappingKernel,
    SlotMappingGeometry,
    reference_slot_mapping,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def of(geom: Geometry, rank: int | None = None) -> SlotMappingGeometry:
    kwargs = geom.kernel_kwargs()
    if rank is not None:
        kwargs["dcp_rank"] = rank
    return SlotMappingGeometry(**kwargs)


# -- construction ------------------------------------------------------------------------


def test_fields_are_the_reference_parameters() -> None:
    # Same names, order and defaults as reference_slot_mapping's geometry parameters,
    # so that reference_slot_mapping(**attrs.asdict(geometry)) is the same computation.
    params = inspect.signature(reference_slot_mapping).parameters
    fields = attrs.fields(SlotMappingGeometry)
    names = [f.name for f in fields]
    assert names == [n for n in params if n in names]
    assert len(names) == 6
    for f in fields:
        default = params[f.name].default
        assert f.default == (attrs.NOTHING if default is inspect.Parameter.empty else default)


def test_frozen_equal_and_hashable() -> None:
    g = SlotMappingGeometry(block_size=16, kv_cache_block_size=64, blocks_per_kv_block=4)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        g.dcp_rank = 1  # type: ignore[misc]
    same = SlotMappingGeometry(block_size=16, kv_cache_block_size=64, blocks_per_kv_block=4)
    assert g == same and hash(g) == hash(same)
    assert g != attrs.evolve(g, dcp_world_size=2, dcp_rank=1)
    assert {g: 1}[same] == 1
    with pytest.raises(TypeError):
        SlotMappingGeometry(16, 16)  # type: ignore[misc]  # keyword-only


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"block_size": 0, "kv_cache_block_size": 0}, ValueError, "block_size must be a positive"),
        ({"kv_cache_block_size": True}, ValueError, "kv_cache_block_size must be a positive"),
        ({"blocks_per_kv_block": 2.0}, ValueError, "blocks_per_kv_block must be a positive"),
        ({"dcp_world_size": 0}, ValueError, "dcp_world_size must be a positive"),
        ({"cp_kv_cache_interleave_size": -1}, ValueError, "interleave_size must be a positive"),
        ({"dcp_rank": "0"}, TypeError, "dcp_rank must be an int"),
        ({"dcp_rank": False}, TypeError, "dcp_rank must be an int"),
        ({"blocks_per_kv_block": 2}, ValueError, r"\(16\) must equal blocks_per_kv_block \(2\)"),
        ({"dcp_rank": 1}, ValueError, "DCP rank 1 is out of range for DCP world size 1"),
        ({"dcp_world_size": 2, "dcp_rank": -1}, ValueError, "DCP rank -1 is out of range"),
        ({"cp_kv_cache_interleave_size": 3}, ValueError, r"\(3\) must divide the allocation"),
    ],
)
def test_rejects_an_inconsistent_geometry(
    overrides: dict[str, object], error: type[Exception], match: str
) -> None:
    kwargs: dict[str, object] = {"block_size": 16, "kv_cache_block_size": 16}
    kwargs.update(overrides)
    with pytest.raises(error, match=match):
        SlotMappingGeometry(**kwargs)  # type: ignore[arg-type]


def test_kernel_space_is_what_the_table_registers_and_the_kernel_takes() -> None:
    bt = BlockTable(
        block_size=64,
        kernel_block_size=16,
        max_num_reqs=2,
        max_num_blocks_per_req=5,
        max_num_batched_tokens=8,
        device="cpu",
        dcp_world_size=4,
        dcp_rank=3,
        cp_kv_cache_interleave_size=16,
    )
    space = bt.geometry.kernel_space(bt.row_width)
    assert space == bt.warmup_space()
    assert space == {
        "block_table_stride": 20,
        "block_size": 16,
        "kv_cache_block_size": 64,
        "blocks_per_kv_block": 4,
        "total_cp_world_size": 4,
        "total_cp_rank": 3,
        "cp_kv_cache_interleave_size": 16,
    }
    # exactly the dispatch inputs, and the kernel's __call__ arguments beyond the step's own
    key = ComputeSlotMappingKernel().dispatch(**space)
    assert set(space) == {f.name for f in attrs.fields(type(key))}
    call = inspect.signature(ComputeSlotMappingKernel.__call__).parameters
    step = {"self", "num_reqs", "num_tokens", "max_num_tokens", "query_start_loc"}
    step |= {"positions", "block_table", "slot_mapping"}
    assert set(call) - step == set(space)
    # the table's own attributes read the geometry
    assert (bt.block_size, bt.kernel_block_size, bt.blocks_per_kv_block) == (64, 16, 4)
    assert (bt.dcp_world_size, bt.dcp_rank, bt.cp_kv_cache_interleave_size) == (4, 3, 16)
    with pytest.raises(AttributeError):  # one source of truth: the registration cannot drift
        bt.dcp_rank = 0  # type: ignore[misc]


# -- the slot math -----------------------------------------------------------------------


@SETTINGS
@given(geom=geometries(), positions=st.lists(st.integers(0, 5000), max_size=60))
def test_columns_match_dealing_positions_to_ranks(geom: Geometry, positions: list[int]) -> None:
    # A position that is the k-th its owner holds sits at offset k % K of the owner's
    # allocation block and in kernel-block column k // bs of the row; every other
    # rank does not own it.
    local = rank_local_indices(positions, geom.W, geom.I)
    pos = torch.tensor(positions, dtype=torch.int64)
    for rank in range(geom.W):
        owned, offset, column = of(geom, rank).columns(pos)
        for t, p in enumerate(positions):
            owner, k = local[p]
            assert bool(owned[t]) == (owner == rank)
            if owner == rank:
                assert (int(offset[t]), int(column[t])) == (k % geom.K, k // geom.bs)


@SETTINGS
@given(data=st.data(), batch=batches())
def test_locate_rejects_exactly_the_steps_that_read_beyond_the_row(
    data: st.DataObject, batch: Batch
) -> None:
    # The validation helper against the dealing oracle: an owned token whose column
    # k // bs is at or past the row width is refused, naming it; otherwise every
    # token is placed in its request.
    g = batch.geom
    row_width = data.draw(st.integers(0, batch.stride))
    local = rank_local_indices(batch.positions.tolist(), g.W, g.I)
    beyond = [
        t
        for t, p in enumerate(batch.positions.tolist())
        if local[p][0] == g.R and local[p][1] // g.bs >= row_width
    ]
    geometry = of(g)
    if beyond:
        with pytest.raises(ValueError, match=rf"^token {beyond[0]} \(request \d+, position"):
            geometry.locate(batch.query_start_loc, batch.positions, row_width)
        return
    requests, columns = geometry.locate(batch.query_start_loc, batch.positions, row_width)
    qsl = batch.query_start_loc.tolist()
    assert requests.tolist() == [
        r for r in range(batch.num_reqs) for _ in range(qsl[r], qsl[r + 1])
    ]
    assert torch.equal(columns.column, geometry.columns(batch.positions).column)


@SETTINGS
@given(batch=batches())
def test_slots_reference_and_loop_agree(batch: Batch) -> None:
    geometry = of(batch.geom)
    requests, columns = geometry.locate(batch.query_start_loc, batch.positions, batch.stride)
    slots = geometry.slots(batch.block_table, requests, columns)
    expected = loop_slot_mapping(batch)
    assert slots.tolist() == expected[: batch.num_tokens]
    full = reference_slot_mapping(
        query_start_loc=batch.query_start_loc,
        positions=batch.positions,
        block_table=batch.block_table,
        max_num_tokens=batch.max_num_tokens,
        **attrs.asdict(geometry),
    )
    assert full.tolist() == expected


def test_slots_never_read_a_column_the_rank_does_not_own() -> None:
    # W = 2, I = K = 4: positions 8 and 9 belong to rank 0, which would read column 1
    # of this 1-column row; rank 1 owns 4 and 5 (column 0) and pads 8 and 9 unread.
    g = of(Geometry(bs=4, B=1, W=2, R=1, I=4))
    positions = torch.tensor([8, 9, 4, 5], dtype=torch.int64)
    qsl = torch.tensor([0, 4], dtype=torch.int32)
    requests, columns = g.locate(qsl, positions, 1)
    assert columns.owned.tolist() == [False, False, True, True]
    slots = g.slots(torch.tensor([[9]], dtype=torch.int32), requests, columns)
    assert slots.tolist() == [-1, -1, 36, 37]
    with pytest.raises(ValueError, match="token 0 .* needs block column 1, beyond the row width 1"):
        attrs.evolve(g, dcp_rank=0).locate(qsl, positions, 1)
