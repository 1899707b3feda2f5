"""GPU tests of the compiled slot-mapping kernel (skipped without CUDA).

Run on the H200 through the device tool::

    python -m pytest -m gpu tests/blocktable/test_gpu.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Self

import attrs
import pytest
import torch
from bt_helpers import Batch, Geometry, batches, launch_kwargs, reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import warmkit

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# A fixed set of geometries (one compiled variant each, so that the property test
# spends its time on batches, not on compiles): block sizes 1, 3, 16..256, hybrid
# factors, DCP 1/2/4 with interleave 1/16/block.
GPU_GEOMETRIES = [
    Geometry(bs=16, B=1, W=1, R=0, I=1),
    Geometry(bs=1, B=1, W=1, R=0, I=1),
    Geometry(bs=3, B=1, W=2, R=1, I=1),
    Geometry(bs=16, B=4, W=2, R=0, I=16),
    Geometry(bs=64, B=4, W=4, R=3, I=256),
    Geometry(bs=256, B=1, W=1, R=0, I=1),
    Geometry(bs=128, B=2, W=4, R=1, I=16),
    Geometry(bs=32, B=1, W=2, R=1, I=32),
]

GEOMETRIES = [(256, 1, 256), (256, 4, 64), (64, 1, 64), (8, 1, 8), (4, 1, 4)]
CP_VARIANTS = [(1, 0, 1), (2, 0, 1), (2, 1, 1), (4, 3, 4)]
STRIDE = 32768


@pytest.fixture(autouse=True)
def _monitor_off() -> Iterator[None]:
    warmkit.monitor.disarm()
    yield
    warmkit.monitor.disarm()


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), geom=st.sampled_from(GPU_GEOMETRIES))
def test_compiled_kernel_matches_reference(data: st.DataObject, geom: Geometry) -> None:
    from warmkit_blocktable import ComputeSlotMappingKernel

    batch: Batch = data.draw(batches(geom))
    dev = torch.device("cuda")
    gpu = Batch(
        geom,
        batch.num_reqs,
        batch.query_start_loc.to(dev),
        batch.positions.to(dev),
        batch.block_table.to(dev),
        batch.max_num_tokens,
    )
    out = torch.full((batch.max_num_tokens,), 0x5A5A5A5A, dtype=torch.int64, device=dev)
    ComputeSlotMappingKernel()(**launch_kwargs(gpu, out))
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), reference(batch))


class _HookRecorder:
    """Chains onto Triton's ``jit_cache_hook`` and compile listener, recording every event."""

    def __init__(self) -> None:
        from triton import knobs

        self.knobs = knobs
        self.events: list[tuple[str, Any]] = []
        self.prev_hook = knobs.runtime.jit_cache_hook
        self.prev_listener = knobs.compilation.listener

    def hook(self, *args: Any, **kwargs: Any) -> Any:
        self.events.append(("jit_cache_miss", kwargs.get("repr")))
        return self.prev_hook(*args, **kwargs) if self.prev_hook is not None else False

    def listener(self, *args: Any, **kwargs: Any) -> None:
        self.events.append(("compile_listener", kwargs.get("cache_hit")))
        if self.prev_listener is not None:
            self.prev_listener(*args, **kwargs)

    def __enter__(self) -> Self:
        self.knobs.runtime.jit_cache_hook = self.hook
        self.knobs.compilation.listener = self.listener
        return self

    def __exit__(self, *exc: object) -> None:
        self.knobs.runtime.jit_cache_hook = self.prev_hook
        self.knobs.compilation.listener = self.prev_listener


def test_no_new_specialization_after_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    from warmkit_blocktable import BlockTable, ComputeSlotMappingKernel, reference_slot_mapping
    from warmkit_blocktable._kernel import launch_arguments

    # Every launch is also checked against the key's compiled specialization.
    monkeypatch.setattr(ComputeSlotMappingKernel, "verify_launches", True)
    ComputeSlotMappingKernel.clear_executors()  # executors built by earlier tests lack verify
    registry = warmkit.WarmupRegistry()
    tables = []
    with registry.activate():
        for k, b, bs in GEOMETRIES:
            for w, r, i in CP_VARIANTS:
                tables.append(
                    BlockTable(
                        block_size=k,
                        kernel_block_size=bs,
                        max_num_reqs=4,
                        max_num_blocks_per_req=STRIDE // b,
                        max_num_batched_tokens=8192,
                        device="cuda",
                        dcp_world_size=w,
                        dcp_rank=r,
                        cp_kv_cache_interleave_size=i,
                    )
                )
    report = warmkit.warmup(
        warmkit.WarmupConfig(monitor="error", progress="off"), registry=registry
    )
    assert report.ok and len(report.entries) == len(GEOMETRIES) * len(CP_VARIANTS)
    events_before = len(warmkit.monitor.events())

    kernel = ComputeSlotMappingKernel()
    with _HookRecorder() as rec:
        for bt in tables:
            for row in range(3):
                bt.add_row([row * 1000 + j for j in range(40)], row)
            bt.commit(3)
            cap = 40 * bt.block_size * bt.dcp_world_size  # positions every rank holds blocks for
            for num_tokens in (1, 17, 8192):  # batch size never changes the variant
                per = [num_tokens // 3 + (1 if j < num_tokens % 3 else 0) for j in range(3)]
                pos = torch.cat([torch.arange(n) % cap for n in per]).to(torch.int64)
                qsl = torch.tensor([0, per[0], per[0] + per[1], num_tokens], dtype=torch.int32)
                qsl_d, pos_d = qsl.cuda(), pos.cuda()
                got = bt.compute_slot_mapping(3, qsl_d, pos_d, validate=True)
                assert got is not None
                want = reference_slot_mapping(
                    query_start_loc=qsl_d,
                    positions=pos_d,
                    block_table=bt.block_table,
                    max_num_tokens=bt.max_num_batched_tokens,
                    **attrs.asdict(bt.geometry),
                )
                assert torch.equal(got, want)
                # The same arguments through Triton's own JIT entry (binder + in-memory
                # cache) must hit the entry warmup created: no cache-hook call.
                space = bt.warmup_space()
                key = kernel.dispatch(**space)
                args, kwargs = launch_arguments(
                    space,
                    num_tokens=num_tokens,
                    max_num_tokens=bt.max_num_batched_tokens,
                    query_start_loc=qsl_d,
                    positions=pos_d,
                    block_table=bt.block_table,
                    slot_mapping=got,
                )
                kernel.fn[(4,)](*args, **kwargs, **kernel.launch_options(key))
        torch.cuda.synchronize()
    assert rec.events == []
    assert warmkit.monitor.events()[events_before:] == ()
