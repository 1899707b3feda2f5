"""Registration, the plugin surface, and "warmup matches runtime" (on CPU).

"Matches" is checked three ways for each geometry: ``dispatch`` on the table's
registration equals ``get_warmup_keys`` equals what the registry plans equals
the key ``ComputeSlotMappingKernel.__call__`` computes for the real launch;
and Triton's own binder gives the warmup arguments exactly the specialization
and launch options of the real launch (Triton's in-memory cache key).
"""

from __future__ import annotations

import importlib.metadata
import json
import types
from typing import Any

import attrs
import pytest
import torch
import warmkit_blocktable
from warmkit_blocktable import (
    BlockTable,
    ComputeSlotMappingKernel,
    MultiGroupBlockTable,
    SlotMappingMode,
)

import warmkit

KERNEL = ComputeSlotMappingKernel()
NAME = ComputeSlotMappingKernel.name

# (allocation block K, kernel blocks per allocation block B, kernel block bs)
GEOMETRIES = [(256, 1, 256), (256, 4, 64), (64, 1, 64), (8, 1, 8), (4, 1, 4)]
# (DCP world, rank, interleave)
CP_VARIANTS = [(1, 0, 1), (2, 0, 1), (2, 1, 1), (4, 3, 4)]
STRIDE = 32768


def table(k: int, b: int, bs: int, w: int = 1, r: int = 0, i: int = 1, **kw: Any) -> BlockTable:
    assert k == b * bs
    return BlockTable(
        block_size=k,
        kernel_block_size=bs,
        max_num_reqs=kw.pop("max_num_reqs", 2),
        max_num_blocks_per_req=kw.pop("max_num_blocks_per_req", STRIDE // b),
        max_num_batched_tokens=kw.pop("max_num_batched_tokens", 8192),
        device="cpu",
        dcp_world_size=w,
        dcp_rank=r,
        cp_kv_cache_interleave_size=i,
        **kw,
    )


# -- the plugin surface ------------------------------------------------------------------


#: The names code outside this repository imports (issue #8: they stay, same behaviour).
CONTRACT_NAMES = {
    "BlockTable",
    "ComputeSlotMappingKernel",
    "MultiGroupBlockTable",
    "PAD_SLOT_ID",
    "SlotMappingMode",
    "reference_slot_mapping",
}


def _isort_order(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then the rest."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


def test_public_names() -> None:
    # Derived from the package, as httpx does: every public name bound in
    # ``warmkit_blocktable`` (imported from its private modules) is in ``__all__``,
    # and nothing else is (a constant has no ``__module__``: it counts as the package's).
    defined = {
        name
        for name, value in vars(warmkit_blocktable).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", warmkit_blocktable.__name__).startswith(
            "warmkit_blocktable"
        )
    }
    assert set(warmkit_blocktable.__all__) == defined
    assert warmkit_blocktable.__all__ == sorted(warmkit_blocktable.__all__, key=_isort_order)
    assert CONTRACT_NAMES <= set(warmkit_blocktable.__all__)
    for name in warmkit_blocktable.__all__:
        assert hasattr(warmkit_blocktable, name)
    # a stable name, independent of the private module layout
    assert ComputeSlotMappingKernel.name == "warmkit_blocktable.ComputeSlotMappingKernel"


def test_entry_point() -> None:
    eps = importlib.metadata.entry_points(group="warmkit.kernels", name="blocktable.slot_mapping")
    (ep,) = eps
    assert ep.value == "warmkit_blocktable:ComputeSlotMappingKernel"
    assert ep.load() is ComputeSlotMappingKernel
    assert ep.dist is not None and ep.dist.name == "warmkit-blocktable"


def test_compile_key() -> None:
    key_cls = ComputeSlotMappingKernel.CompileKey
    assert [f.name for f in attrs.fields(key_cls)] == [
        "kv_cache_block_size",
        "blocks_per_kv_block",
        "total_cp_world_size",
        "total_cp_rank",
        "cp_kv_cache_interleave_size",
        "block_table_stride",
        "block_size",
    ]
    key = KERNEL.dispatch(**table(64, 1, 64).warmup_space())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        key.block_size = 3  # type: ignore[misc]
    assert hash(key) == hash(KERNEL.dispatch(**table(64, 1, 64).warmup_space()))


def test_dispatch_maps_specialized_scalars_and_forwards_the_rest() -> None:
    fields = {
        "kv_cache_block_size": 48,
        "blocks_per_kv_block": 16,
        "total_cp_world_size": 2,
        "total_cp_rank": 1,
        "cp_kv_cache_interleave_size": 3,
    }
    for stride, bs, rep_stride, rep_bs in [
        (32768, 256, 16, 16),
        (32767, 3, 2, 2),
        (1, 1, 1, 1),
        (2**31, 16, 2**31, 16),
    ]:
        key = KERNEL.dispatch(block_table_stride=stride, block_size=bs, **fields)
        assert (key.block_table_stride, key.block_size) == (rep_stride, rep_bs)
        assert {f: getattr(key, f) for f in fields} == fields
    with pytest.raises(TypeError):
        KERNEL.dispatch(block_table_stride=16, block_size=16, **fields, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        KERNEL.dispatch(block_table_stride=16, block_size=16)


# -- registration ---------------------------------------------------------------------------


def test_registers_under_activate_only() -> None:
    outside = warmkit.WarmupRegistry()
    before = len(warmkit.default_registry())
    table(64, 1, 64)  # no active registry: nothing recorded anywhere
    assert len(outside) == 0
    assert len(warmkit.default_registry()) == before

    reg = warmkit.WarmupRegistry()
    with reg.activate():
        bt = table(64, 1, 64)
    assert len(reg) == 1
    (registration,) = list(reg)
    assert registration.kernel == NAME
    assert dict(registration.space) == bt.warmup_space()
    # plain scalars only, never tensors
    assert all(type(v) is int for v in registration.space.values())
    assert reg.plan() == {NAME: [KERNEL.dispatch(**bt.warmup_space())]}


def test_none_mode_registers_nothing() -> None:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        table(64, 1, 64, mode=SlotMappingMode.NONE)
    assert len(reg) == 0
    assert reg.plan() == {}


def test_placeholder_and_real_tables_deduplicate() -> None:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        placeholder = MultiGroupBlockTable(
            block_sizes=[16],
            max_num_reqs=8,
            max_model_len=4096,
            max_num_batched_tokens=512,
            device="cpu",
            dcp_world_size=2,
        )
        real = MultiGroupBlockTable(
            block_sizes=[16, 64, 32],
            kernel_block_sizes=[None, 16, None],
            modes=[SlotMappingMode.TOKEN_TO_KV_SLOT] * 2 + [SlotMappingMode.NONE],
            max_num_reqs=8,
            max_model_len=4096,
            max_num_batched_tokens=512,
            device="cpu",
            dcp_world_size=2,
        )
        # a second placeholder of another stride in the same specialization class
        MultiGroupBlockTable(
            block_sizes=[16],
            max_num_reqs=8,
            max_model_len=2048,
            max_num_batched_tokens=512,
            device="cpu",
            dcp_world_size=2,
        )
    # identical registrations stored once: placeholder == real group 0
    assert placeholder[0].warmup_space() == real[0].warmup_space()
    assert len(reg) == 3  # real group 0 (== placeholder), real group 1, the 2048 placeholder
    keys = reg.plan()[NAME]
    assert keys == [
        KERNEL.dispatch(**real[0].warmup_space()),
        KERNEL.dispatch(**real[1].warmup_space()),
    ]


def test_groups_sharing_a_geometry_share_one_registration() -> None:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        mg = MultiGroupBlockTable(
            block_sizes=[16, 16, 32],
            max_num_reqs=4,
            max_model_len=1024,
            max_num_batched_tokens=64,
            device="cpu",
        )
    assert len(mg) == 3
    assert len(reg) == 2
    assert len(reg.plan()[NAME]) == 2


def test_a_group_that_fails_leaves_no_group_registered() -> None:
    registry = warmkit.WarmupRegistry()
    with registry.activate(), pytest.raises(ValueError):
        MultiGroupBlockTable(
            block_sizes=[16, 16],
            kernel_block_sizes=[None, 5],  # 5 does not divide 16: the second group fails
            max_num_reqs=4,
            max_model_len=256,
            max_num_batched_tokens=64,
            device="cpu",
        )
    assert len(registry) == 0
    with registry.activate():
        MultiGroupBlockTable(
            block_sizes=[16, 64],
            max_num_reqs=4,
            max_model_len=256,
            max_num_batched_tokens=64,
            device="cpu",
        )
    assert len(registry) == 2  # a successful build passes every group on


def test_manifest_round_trip(tmp_path: Any) -> None:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        for geom in GEOMETRIES:
            table(*geom)
    path = reg.save(tmp_path / "manifest.json")
    data = json.loads(path.read_text())
    assert {r["kernel"] for r in data["registrations"]} == {"blocktable.slot_mapping"}
    loaded = warmkit.WarmupRegistry.load(path)
    assert loaded.plan() == reg.plan()
    assert len(reg.plan()[NAME]) == 5


# -- warmup matches runtime ----------------------------------------------------------------


class _Recorder:
    """Replaces ``ComputeSlotMappingKernel.run``: records what would be launched."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, kernel: Any, key: Any, grid: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append((key, grid, args, kwargs))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setattr(
        ComputeSlotMappingKernel,
        "run",
        lambda self, key, grid, *a, **kw: rec(self, key, grid, *a, **kw),
    )
    return rec


def _binder() -> Any:
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import create_function_from_signature

    fn = ComputeSlotMappingKernel.fn
    return create_function_from_signature(fn.signature, fn.params, BaseBackend)


def _triton_cache_key(
    binder: Any, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]
) -> str:
    """What Triton's in-memory cache is keyed on: the specialization and str(options)."""
    _bound, specialization, opts = binder(*args, **kwargs, **options)
    return f"{specialization}{opts}"


def _runtime_step(bt: BlockTable, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    bt.add_row([0, 1], 0)
    bt.commit(1)
    qsl = torch.tensor([0, num_tokens], dtype=torch.int32)
    positions = torch.arange(num_tokens, dtype=torch.int64) % (2 * bt.block_size)
    return qsl, positions


@pytest.mark.parametrize("cp", CP_VARIANTS, ids=lambda c: "cp{}-{}-{}".format(*c))
@pytest.mark.parametrize("geom", GEOMETRIES, ids=lambda g: "K{}-B{}-bs{}".format(*g))
def test_warmup_matches_runtime(
    geom: tuple[int, int, int], cp: tuple[int, int, int], recorder: _Recorder
) -> None:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        bt = table(*geom, *cp)
    assert bt.row_width == STRIDE
    space = bt.warmup_space()
    dispatched = KERNEL.dispatch(**space)
    assert KERNEL.get_warmup_keys(**space) == [dispatched]
    assert reg.plan() == {NAME: [dispatched]}

    binder = _binder()
    w_args, w_kwargs = KERNEL.warmup_args(dispatched)
    warm = _triton_cache_key(binder, w_args, w_kwargs, KERNEL.launch_options(dispatched))
    for num_tokens in (1, 16, 17, 4096):  # batch size never changes the variant
        recorder.calls.clear()
        qsl, positions = _runtime_step(bt, num_tokens)
        bt._launch_kernel(1, qsl, positions)
        ((key, grid, args, kwargs),) = recorder.calls
        assert key == dispatched
        assert grid == (2,)
        assert _triton_cache_key(binder, args, kwargs, KERNEL.launch_options(key)) == warm


def test_block_size_one_and_three_specialize_differently(recorder: _Recorder) -> None:
    # block_size 1 is a Triton constexpr and 3 an unaligned i32: different variants, and
    # dispatch knows it.
    keys = {KERNEL.dispatch(**table(k, 1, k).warmup_space()) for k in (1, 3, 5, 16, 32)}
    assert {k.block_size for k in keys} == {1, 2, 16}


def test_misaligned_tensor_is_refused() -> None:
    bt = table(16, 1, 16)
    qsl, _ = _runtime_step(bt, 4)
    unaligned = torch.zeros(5, dtype=torch.int64)[1:]
    with pytest.raises(ValueError, match="positions is not 16-byte aligned"):
        KERNEL(
            num_reqs=1,
            num_tokens=4,
            max_num_tokens=8192,
            query_start_loc=qsl,
            positions=unaligned,
            block_table=bt.block_table,
            block_table_stride=bt.row_width,
            block_size=16,
            slot_mapping=bt.slot_mapping,
            kv_cache_block_size=16,
            blocks_per_kv_block=1,
            total_cp_world_size=1,
            total_cp_rank=0,
            cp_kv_cache_interleave_size=1,
        )
