"""``BlockTable`` / ``MultiGroupBlockTable``: storage, validation, and the CPU (reference) path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bt_helpers import rank_local_indices
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warmkit_blocktable import PAD_SLOT_ID, BlockTable, MultiGroupBlockTable, SlotMappingMode


def make(**overrides: object) -> BlockTable:
    kwargs: dict[str, object] = {
        "block_size": 16,
        "max_num_reqs": 4,
        "max_num_blocks_per_req": 8,
        "max_num_batched_tokens": 64,
        "device": "cpu",
    }
    kwargs.update(overrides)
    return BlockTable(**kwargs)  # type: ignore[arg-type]


def step(*lengths_and_starts: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """qsl and positions of requests given as (start position, token count)."""
    qsl = [0]
    pos: list[int] = []
    for start, n in lengths_and_starts:
        pos.extend(range(start, start + n))
        qsl.append(len(pos))
    return torch.tensor(qsl, dtype=torch.int32), torch.tensor(pos, dtype=torch.int64)


# -- storage -----------------------------------------------------------------------------


def test_buffers_dtypes_shapes_and_implementation() -> None:
    bt = make(kernel_block_size=4)
    assert bt.blocks_per_kv_block == 4
    assert bt.row_width == 32
    assert bt.block_table.shape == (4, 32) and bt.block_table.dtype == torch.int32
    assert bt.block_table_cpu.device.type == "cpu"
    assert bt.slot_mapping is not None
    assert bt.slot_mapping.shape == (64,) and bt.slot_mapping.dtype == torch.int64
    assert bt.implementation == "reference"  # CPU device: the torch reference, explicitly


def test_triton_implementation_needs_cuda() -> None:
    with pytest.raises(ValueError, match="needs a CUDA device"):
        make(implementation="triton")
    with pytest.raises(ValueError, match="implementation must be"):
        make(implementation="fast")


def test_rows_are_stored_expanded_for_hybrid_blocks() -> None:
    bt = make(block_size=64, kernel_block_size=16)
    bt.add_row([3, 0], 1)
    assert bt.row(1).tolist() == [12, 13, 14, 15, 0, 1, 2, 3]
    bt.append_row([5], 1)
    assert bt.row(1).tolist()[-4:] == [20, 21, 22, 23]
    assert bt.num_blocks_per_row[1] == 12


def test_row_methods() -> None:
    bt = make()
    bt.add_row([1, 2], 0)
    bt.add_row([7], 1)
    bt.append_row([3], 0)
    assert bt.row(0).tolist() == [1, 2, 3]
    bt.move_row(0, 2)
    assert bt.row(2).tolist() == [1, 2, 3]
    bt.swap_row(1, 2)
    assert bt.row(1).tolist() == [1, 2, 3] and bt.row(2).tolist() == [7]
    bt.add_row([9], 1)  # add replaces
    assert bt.row(1).tolist() == [9]
    bt.clear_row(1)
    assert bt.row(1).tolist() == []
    assert bt.num_blocks_per_row[1] == 0


def test_commit_is_explicit() -> None:
    bt = make()
    bt.add_row([5, 6], 0)
    bt.add_row([8], 1)
    assert bt.block_table.eq(0).all()  # nothing on the device before commit
    bt.commit(1)
    assert bt.block_table[0, :2].tolist() == [5, 6]
    assert bt.block_table[1].eq(0).all()
    bt.commit(2)
    assert bt.block_table[1, 0] == 8


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda bt: bt.add_row(list(range(9)), 0), "exceed max_num_blocks_per_req"),
        (lambda bt: bt.add_row([-1], 0), "block ids must lie in"),
        (lambda bt: bt.add_row([2**31], 0), "block ids must lie in"),
        (lambda bt: bt.add_row([1], 4), "row 4 is out of range"),
        (lambda bt: bt.move_row(0, -1), "row -1 is out of range"),
        (lambda bt: bt.commit(5), "outside"),
    ],
)
def test_row_errors(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(make())  # type: ignore[operator]


def test_failed_row_update_leaves_the_row_unchanged() -> None:
    bt = make()
    bt.add_row([1, 2], 0)
    for bad in (list(range(9)), [-1], [2**31]):
        with pytest.raises(ValueError):
            bt.add_row(bad, 0)
        with pytest.raises(ValueError):
            bt.append_row(bad + list(range(8)), 0)
        assert bt.row(0).tolist() == [1, 2]


# -- construction errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"dcp_world_size": 2, "dcp_rank": 2}, "DCP rank 2 is out of range for DCP world size 2"),
        (
            {"dcp_world_size": 4, "cp_kv_cache_interleave_size": 3},
            "must divide the allocation block",
        ),
        ({"kernel_block_size": 5}, "must divide the allocation block_size"),
        ({"block_size": 0}, "block_size must be an int >= 1"),
        ({"max_num_reqs": 0}, "max_num_reqs"),
    ],
)
def test_construction_errors(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(**overrides)


def test_type_errors() -> None:
    with pytest.raises(TypeError, match="mode must be a SlotMappingMode"):
        make(mode="none")
    with pytest.raises(TypeError, match="row index must be an int"):
        make().add_row([1], 0.5)  # type: ignore[arg-type]


# -- compute_slot_mapping: input validation ------------------------------------------------


def ready_table(**overrides: object) -> BlockTable:
    bt = make(**overrides)
    bt.add_row([1, 2], 0)
    bt.add_row([3], 1)
    bt.commit(2)
    return bt


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((5, *step((0, 1))), r"num_reqs 5 is outside \[0, max_num_reqs=4\]"),
        (
            (1, torch.tensor([0, 65], dtype=torch.int32), torch.zeros(65, dtype=torch.int64)),
            "65 tokens exceed",
        ),
        (
            (1, torch.tensor([0, 1], dtype=torch.int64), torch.zeros(1, dtype=torch.int64)),
            "query_start_loc must be int32",
        ),
        (
            (1, torch.tensor([0, 1], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)),
            "positions must be int64",
        ),
        (
            (2, torch.tensor([0, 1], dtype=torch.int32), torch.zeros(1, dtype=torch.int64)),
            "at least num_reqs \\+ 1 = 3",
        ),
        (
            (
                1,
                torch.tensor([0, 1], dtype=torch.int32),
                torch.zeros(1, dtype=torch.int64, device="meta"),
            ),
            "positions is on meta",
        ),
    ],
)
def test_cheap_checks_always_run(args: tuple[object, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ready_table().compute_slot_mapping(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("qsl", "positions", "match"),
    [
        (
            [0, 3, 2],
            [0, 1, 2],
            r"not monotonic at request 1: query_start_loc\[1\] = 3 > query_start_loc\[2\] = 2",
        ),
        ([1, 2, 3], [0, 1, 2], r"query_start_loc\[0\] must be 0"),
        ([0, 1, 2], [0, 1, 2], r"query_start_loc\[num_reqs=2\] = 2 but there are 3 tokens"),
        ([0, 2, 3], [0, -4, 2], "token 1 has a negative position -4"),
        (
            [0, 2, 3],
            [0, 1, 8 * 16],
            r"token 2 \(request 1, position 128\) needs block column 8, beyond the row width 8",
        ),
        (
            [0, 2, 3],
            [0, 1, 16],
            r"token 2 \(request 1, position 16\) needs block column 1, but row 1 holds only 1",
        ),
    ],
)
def test_complete_checks_behind_validate(qsl: list[int], positions: list[int], match: str) -> None:
    bt = ready_table()
    q = torch.tensor(qsl, dtype=torch.int32)
    p = torch.tensor(positions, dtype=torch.int64)
    with pytest.raises(ValueError, match=match):
        bt.compute_slot_mapping(2, q, p, validate=True)
    with pytest.raises(ValueError, match=match):
        ready_table(validate=True).compute_slot_mapping(2, q, p)


def test_validate_accepts_good_input_and_not_owned_positions() -> None:
    bt = ready_table(dcp_world_size=2, dcp_rank=0)
    # position 17 is owned by rank 1 (17 % 2): no column check for it on rank 0
    q, p = torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 17, 2], dtype=torch.int64)
    out = bt.compute_slot_mapping(2, q, p, validate=True)
    assert out is not None and out[:3].tolist() == [16, -1, 3 * 16 + 1]


# -- compute_slot_mapping: the CPU path against an allocation-level loop -------------------


@st.composite
def table_and_step(draw: st.DrawFn) -> tuple[BlockTable, list[list[int]], list[tuple[int, int]]]:
    bs = draw(st.sampled_from([1, 3, 16, 64]))
    b = draw(st.sampled_from([1, 2, 4]))
    w = draw(st.sampled_from([1, 2, 4]))
    k = b * bs
    i = draw(st.sampled_from([1, k] + ([16] if k % 16 == 0 else [])))
    bt = BlockTable(
        block_size=k,
        kernel_block_size=bs,
        max_num_reqs=6,
        max_num_blocks_per_req=5,
        max_num_batched_tokens=400,
        device="cpu",
        dcp_world_size=w,
        dcp_rank=draw(st.integers(0, w - 1)),
        cp_kv_cache_interleave_size=i,
    )
    num_reqs = draw(st.integers(0, 6))
    rows = [draw(st.lists(st.integers(0, 10_000), min_size=5, max_size=5)) for _ in range(num_reqs)]
    reqs = []
    budget = 400
    for _ in range(num_reqs):
        n = draw(st.integers(0, min(60, budget, 5 * k * w)))
        budget -= n
        reqs.append((draw(st.integers(0, 5 * k * w - n)), n))
    return bt, rows, reqs


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(case=table_and_step())
def test_compute_slot_mapping_matches_allocation_level_loop(case) -> None:
    bt, rows, reqs = case
    for r, ids in enumerate(rows):
        bt.add_row(ids, r)
    bt.commit(len(rows))
    qsl, positions = step(*reqs)
    out = bt.compute_slot_mapping(len(rows), qsl, positions, validate=True)
    assert out is bt.slot_mapping
    # Loop over *allocation* blocks: the k-th token of its owner lives at row[k // K] * K + k % K.
    local = rank_local_indices(
        positions.tolist(), bt.dcp_world_size, bt.cp_kv_cache_interleave_size
    )
    expected = [PAD_SLOT_ID] * bt.max_num_batched_tokens
    t = 0
    for r, (start, n) in enumerate(reqs):
        for p in range(start, start + n):
            owner, k = local[p]
            if owner == bt.dcp_rank:
                expected[t] = rows[r][k // bt.block_size] * bt.block_size + k % bt.block_size
            t += 1
    assert out.tolist() == expected


def test_slot_mapping_buffer_is_reused_and_padded() -> None:
    bt = ready_table()
    first = bt.compute_slot_mapping(2, *step((0, 20), (0, 5)))
    second = bt.compute_slot_mapping(1, *step((3, 2)))
    assert first is second is bt.slot_mapping
    assert second[:2].tolist() == [16 + 3, 16 + 4]
    assert second[2:].eq(PAD_SLOT_ID).all()


def test_none_mode_computes_nothing() -> None:
    bt = make(mode=SlotMappingMode.NONE)
    assert bt.slot_mapping is None
    bt.add_row([1], 0)
    bt.commit(1)
    assert bt.compute_slot_mapping(1, *step((0, 3))) is None


# -- MultiGroupBlockTable ---------------------------------------------------------------------


def test_multi_group() -> None:
    mg = MultiGroupBlockTable(
        block_sizes=[16, 64, 32],
        kernel_block_sizes=[None, 16, None],
        modes=[
            SlotMappingMode.TOKEN_TO_KV_SLOT,
            SlotMappingMode.TOKEN_TO_KV_SLOT,
            SlotMappingMode.NONE,
        ],
        max_num_reqs=3,
        max_model_len=1024,
        max_num_batched_tokens=32,
        device="cpu",
        dcp_world_size=2,
    )
    assert len(mg) == 3
    assert [t.row_width for t in mg] == [32, 32, 16]  # cdiv(1024, K * 2) * B
    assert [t.blocks_per_kv_block for t in mg] == [1, 4, 1]
    mg.add_row([[1, 2], [3], [9]], 0)
    mg.append_row([[4], [], []], 0)
    mg.add_row([[5], [6], [7]], 1)
    mg.swap_row(0, 1)
    mg.move_row(0, 2)
    mg.clear_row(0)
    assert [t.row(1).tolist() for t in mg] == [[1, 2, 4], [12, 13, 14, 15], [9]]
    assert [t.row(2).tolist() for t in mg] == [[5], [24, 25, 26, 27], [7]]
    mg.commit(3)
    outs = mg.compute_slot_mapping(3, *step((0, 0), (0, 4), (0, 2)))
    assert outs[2] is None
    assert outs[0] is not None and outs[0][:6].tolist() == [16, -1, 17, -1, 80, -1]
    assert outs[1] is not None and outs[1][:6].tolist() == [
        12 * 16,
        -1,
        12 * 16 + 1,
        -1,
        24 * 16,
        -1,
    ]
    with pytest.raises(ValueError, match="one block-id list per group"):
        mg.add_row([[1]], 0)


def test_multi_group_failed_row_update_changes_no_group() -> None:
    mg = MultiGroupBlockTable(
        block_sizes=[16, 64],
        max_num_reqs=2,
        max_model_len=128,
        max_num_batched_tokens=8,
        device="cpu",
    )
    mg.add_row([[1], [2]], 0)
    with pytest.raises(ValueError, match="exceed max_num_blocks_per_req"):
        mg.append_row([[3], [4, 5, 6]], 0)  # the second group holds 2 blocks per row
    with pytest.raises(ValueError, match="exceed max_num_blocks_per_req"):
        mg.add_row([[7], [4, 5, 6]], 0)
    assert [t.row(0).tolist() for t in mg] == [[1], [2]]


def test_multi_group_length_mismatch() -> None:
    with pytest.raises(ValueError, match="one entry per KV-cache group"):
        MultiGroupBlockTable(
            block_sizes=[16, 32],
            kernel_block_sizes=[None],
            max_num_reqs=1,
            max_model_len=16,
            max_num_batched_tokens=1,
            device="cpu",
        )
    with pytest.raises(ValueError, match="at least one"):
        MultiGroupBlockTable(
            block_sizes=[], max_num_reqs=1, max_model_len=16, max_num_batched_tokens=1, device="cpu"
        )


def test_numpy_block_ids_accepted() -> None:
    bt = make()
    bt.add_row(np.array([4, 5], dtype=np.int32), np.int64(0))
    assert bt.row(0).tolist() == [4, 5]
