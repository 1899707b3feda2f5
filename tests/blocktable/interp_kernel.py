"""Kernel-vs-reference tests through Triton's interpreter.

Not collected by the normal run (the name does not start with ``test_``):
``test_interpreter.py`` runs this module in a subprocess with
``TRITON_INTERPRET=1`` set before anything imports Triton, because the
interpreter is chosen when ``@triton.jit`` runs.
"""

from __future__ import annotations

import os

import pytest
import torch
from bt_helpers import Batch, Geometry, batches, launch_kwargs, loop_slot_mapping, reference
from hypothesis import HealthCheck, given, settings

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip(
        "run through test_interpreter.py (needs TRITON_INTERPRET=1)", allow_module_level=True
    )

import triton
import triton.language as tl
import warmkit_blocktable

BROKEN = "TRITON-INTERPRETER-BROKEN"


@triton.jit
def _probe(out, n, BLOCK: tl.constexpr):
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        tl.store(out + offs, offs, mask=offs < n)


def _interpreter_works() -> str | None:
    """None if the interpreter runs a loop bounded by a runtime scalar, else why not.

    Triton 3.6's interpreter cannot under NumPy >= 2.4: it calls int() on a
    1-element array for the loop bound ("only 0-dimensional arrays can be
    converted to Python scalars"). That is a Triton bug, not this kernel's.
    """
    out = torch.zeros(5, dtype=torch.int32)
    try:
        _probe[(1,)](out, 5, BLOCK=4)
    except Exception as exc:  # noqa: BLE001 -- reported as the skip reason
        return f"{type(exc).__name__}: {exc}"
    return None if out.tolist() == [0, 1, 2, 3, 4] else f"probe computed {out.tolist()}"


_why = _interpreter_works()
if _why is not None:
    import numpy

    pytest.skip(
        f"{BROKEN}: Triton {triton.__version__}'s interpreter (NumPy {numpy.__version__}) cannot "
        f"run a loop with a runtime bound: {_why}",
        allow_module_level=True,
    )

from warmkit_blocktable import BlockTable, ComputeSlotMappingKernel, SlotMappingGeometry
from warmkit_blocktable._jit import compute_slot_mapping_kernel

GARBAGE = 0x5A5A5A5A

EXAMPLES = int(os.environ.get("BT_INTERP_EXAMPLES", "80"))


def test_interpreter_is_active() -> None:
    assert not isinstance(compute_slot_mapping_kernel, triton.runtime.jit.JITFunction) or type(
        compute_slot_mapping_kernel
    ).__name__.startswith("Interpreted")
    assert "Interpreted" in type(compute_slot_mapping_kernel).__name__
    assert warmkit_blocktable.ComputeSlotMappingKernel.fn is compute_slot_mapping_kernel


def run_kernel(batch: Batch) -> torch.Tensor:
    out = torch.full((batch.max_num_tokens,), GARBAGE, dtype=torch.int64)
    ComputeSlotMappingKernel()(**launch_kwargs(batch, out))
    return out


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=batches())
def test_kernel_matches_reference(batch: Batch) -> None:
    # Three ways: the kernel, the reference, and the geometry's own placement (the
    # helper BlockTable's validation runs: it must accept this step), then a loop
    # that knows no formula.
    got = run_kernel(batch)
    expected = reference(batch)
    assert torch.equal(got, expected), (
        batch.geom,
        (got != expected).nonzero()[:5].flatten().tolist(),
    )
    geometry = SlotMappingGeometry(**batch.geom.kernel_kwargs())
    requests, columns = geometry.locate(batch.query_start_loc, batch.positions, batch.stride)
    placed = geometry.slots(batch.block_table, requests, columns)
    assert torch.equal(got[: batch.num_tokens], placed)
    assert got.tolist() == loop_slot_mapping(batch)


def test_notes_example_two_ranks_interleave_one() -> None:
    # W = 2, I = 1, K = 16: even offsets of each 32-token virtual block go to
    # rank 0, odd ones to rank 1; each rank packs its 16 tokens into one block.
    for rank in (0, 1):
        geom = Geometry(bs=16, B=1, W=2, R=rank, I=1)
        positions = torch.arange(64, dtype=torch.int64)
        table = torch.tensor([[7, 9]], dtype=torch.int32)
        batch = Batch(geom, 1, torch.tensor([0, 64], dtype=torch.int32), positions, table, 70)
        got = run_kernel(batch).tolist()
        for p in range(64):
            if p % 2 == rank:
                local = (p // 32) * 16 + (p % 32) // 2
                assert got[p] == [7, 9][local // 16] * 16 + local % 16
            else:
                assert got[p] == -1
        assert got[64:] == [-1] * 6


def test_padding_only_and_empty_step() -> None:
    geom = Geometry(bs=16, B=1, W=1, R=0, I=1)
    batch = Batch(
        geom,
        0,
        torch.zeros(1, dtype=torch.int32),
        torch.zeros(0, dtype=torch.int64),
        torch.zeros((1, 4), dtype=torch.int32),
        3000,
    )
    assert torch.equal(run_kernel(batch), torch.full((3000,), -1, dtype=torch.int64))


def test_int64_slots() -> None:
    geom = Geometry(bs=256, B=1, W=1, R=0, I=1)
    table = torch.tensor([[2**31 - 1]], dtype=torch.int32)
    batch = Batch(
        geom,
        1,
        torch.tensor([0, 2], dtype=torch.int32),
        torch.tensor([0, 255], dtype=torch.int64),
        table,
        2,
    )
    assert run_kernel(batch).tolist() == [(2**31 - 1) * 256, (2**31 - 1) * 256 + 255]


def test_block_table_kernel_path_matches_reference_path() -> None:
    # BlockTable's own launch through warmkit (dispatch -> get_or_compile -> the
    # backend's interpreted executor) against its reference path.
    common = {
        "block_size": 64,
        "kernel_block_size": 16,
        "max_num_reqs": 4,
        "max_num_blocks_per_req": 8,
        "max_num_batched_tokens": 2048,
        "device": "cpu",
        "dcp_world_size": 2,
        "dcp_rank": 1,
        "cp_kv_cache_interleave_size": 16,
    }
    kernel_table = BlockTable(**common, implementation="triton")
    ref_table = BlockTable(**common, implementation="reference")
    assert kernel_table.implementation == "triton"
    for t in (kernel_table, ref_table):
        t.add_row([3, 1, 4], 0)
        t.add_row([], 1)
        t.add_row([5, 9, 2, 6, 8], 2)
        t.commit(3)
    qsl = torch.tensor([0, 300, 300, 940], dtype=torch.int32)
    positions = torch.cat([torch.arange(0, 300), torch.arange(0, 640)]).to(torch.int64)
    expected = ref_table.compute_slot_mapping(3, qsl, positions)
    assert kernel_table.slot_mapping is not None
    kernel_table.slot_mapping.fill_(GARBAGE)
    got = kernel_table.compute_slot_mapping(3, qsl, positions, validate=True)
    assert got is kernel_table.slot_mapping
    assert torch.equal(got, expected)
