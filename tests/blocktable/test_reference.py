"""``reference_slot_mapping`` against a straightforward loop, and independent invariants."""

from __future__ import annotations

import pytest
import torch
from bt_helpers import Batch, Geometry, batches, geometries, loop_slot_mapping, reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warmkit_blocktable import PAD_SLOT_ID, SlotMappingGeometry, reference_slot_mapping

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_pad_slot_id() -> None:
    assert PAD_SLOT_ID == -1


@SETTINGS
@given(batch=batches())
def test_reference_matches_loop(batch: Batch) -> None:
    assert reference(batch).tolist() == loop_slot_mapping(batch)


@SETTINGS
@given(batch=batches())
def test_each_position_owned_by_exactly_one_rank(batch: Batch) -> None:
    per_rank = torch.stack([reference(batch, rank=r) for r in range(batch.geom.W)])
    owners = (per_rank[:, : batch.num_tokens] != PAD_SLOT_ID).sum(0)
    assert owners.eq(1).all()


@SETTINGS
@given(data=st.data(), geom=geometries())
def test_rank_slot_pairs_unique(data: st.DataObject, geom: Geometry) -> None:
    batch = data.draw(batches(geom, distinct_ids=True))
    # Distinct positions within each request (a request holds a position once).
    qsl = batch.query_start_loc.tolist()
    chunks = [torch.unique(batch.positions[qsl[r] : qsl[r + 1]]) for r in range(batch.num_reqs)]
    positions = torch.cat(chunks) if chunks else batch.positions
    new_qsl = torch.zeros_like(batch.query_start_loc)
    if chunks:
        new_qsl[1:] = torch.cumsum(torch.tensor([c.shape[0] for c in chunks]), 0)
    batch = Batch(geom, batch.num_reqs, new_qsl, positions, batch.block_table, positions.shape[0])
    pairs = set()
    for rank in range(geom.W):
        for slot in reference(batch, rank=rank).tolist():
            if slot != PAD_SLOT_ID:
                assert (rank, slot) not in pairs
                pairs.add((rank, slot))
    assert len(pairs) == batch.num_tokens


@SETTINGS
@given(batch=batches())
def test_padding_fills_the_tail(batch: Batch) -> None:
    out = reference(batch)
    assert out.shape == (batch.max_num_tokens,)
    assert out.dtype == torch.int64
    assert out[batch.num_tokens :].eq(PAD_SLOT_ID).all()


def test_special_case_no_dcp_no_hybrid() -> None:
    # W = 1, I = 1, B = 1: slot = bt[r, p // bs] * bs + p % bs
    bs = 16
    table = torch.tensor([[4, 8, 15], [16, 23, 42]], dtype=torch.int32)
    positions = torch.tensor([0, 17, 47, 5, 33], dtype=torch.int64)
    qsl = torch.tensor([0, 3, 5], dtype=torch.int32)
    got = reference_slot_mapping(
        query_start_loc=qsl,
        positions=positions,
        block_table=table,
        block_size=bs,
        kv_cache_block_size=bs,
        max_num_tokens=7,
    ).tolist()
    assert got == [4 * 16 + 0, 8 * 16 + 1, 15 * 16 + 15, 16 * 16 + 5, 42 * 16 + 1, -1, -1]


def test_out_buffer_is_written_in_place() -> None:
    out = torch.full((10,), 99, dtype=torch.int64)
    res = reference_slot_mapping(
        query_start_loc=torch.tensor([0, 2], dtype=torch.int32),
        positions=torch.tensor([0, 1], dtype=torch.int64),
        block_table=torch.tensor([[3]], dtype=torch.int32),
        block_size=4,
        kv_cache_block_size=4,
        max_num_tokens=6,
        out=out,
    )
    assert res.data_ptr() == out.data_ptr()
    assert out.tolist() == [12, 13, -1, -1, -1, -1, 99, 99, 99, 99]


def _call(**overrides: object) -> torch.Tensor:
    kwargs: dict[str, object] = {
        "query_start_loc": torch.tensor([0, 2, 3], dtype=torch.int32),
        "positions": torch.tensor([0, 1, 2], dtype=torch.int64),
        "block_table": torch.zeros((2, 2), dtype=torch.int32),
        "block_size": 16,
        "kv_cache_block_size": 16,
    }
    kwargs.update(overrides)
    return reference_slot_mapping(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"dcp_world_size": 2, "dcp_rank": 2}, "DCP rank 2 is out of range"),
        ({"dcp_rank": -1}, "DCP rank -1"),
        ({"cp_kv_cache_interleave_size": 3}, "must divide the allocation block"),
        ({"kv_cache_block_size": 32}, "must equal blocks_per_kv_block"),
        ({"block_size": 0, "kv_cache_block_size": 0}, "block_size must be a positive int"),
        (
            {"query_start_loc": torch.tensor([0, 3, 2], dtype=torch.int32)},
            "not monotonic at request 1",
        ),
        ({"query_start_loc": torch.tensor([0, 1, 2], dtype=torch.int32)}, "must span"),
        ({"positions": torch.tensor([0, -1, 2])}, "token 1 has a negative position"),
        (
            {"positions": torch.tensor([0, 1, 32])},
            r"token 2 \(request 1, position 32\) needs block column 2",
        ),
        ({"max_num_tokens": 2}, "smaller than num_tokens"),
        ({"block_table": torch.zeros((1, 2), dtype=torch.int32)}, "only 1 rows"),
    ],
)
def test_reference_rejects(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _call(**overrides)


def test_out_of_row_position_is_fine_when_not_owned() -> None:
    # Rank 1 of 2 (I = 16, K = 16): position 40 is owned by rank 0 (40 // 16 % 2 == 0)
    # and would read column 1 on rank 0; rank 1 never reads it.
    out = _call(
        positions=torch.tensor([0, 16, 40]),
        dcp_world_size=2,
        dcp_rank=1,
        cp_kv_cache_interleave_size=16,
        block_table=torch.zeros((2, 1), dtype=torch.int32),
    )
    assert out.tolist() == [-1, 0, -1]


@SETTINGS
@given(batch=batches())
def test_unchecked_benchmark_baseline_matches_reference(batch: Batch) -> None:
    from warmkit_blocktable._reference import unchecked_torch_slot_mapping

    out = torch.full((batch.max_num_tokens,), 12345, dtype=torch.int64)
    unchecked_torch_slot_mapping(
        query_start_loc=batch.query_start_loc,
        positions=batch.positions,
        block_table=batch.block_table,
        geometry=SlotMappingGeometry(**batch.geom.kernel_kwargs()),
        out=out,
    )
    assert torch.equal(out, reference(batch))
