"""Slot-mapping throughput: the warmed Triton kernel against the torch reference.

    python benchmarks/slot_mapping_throughput.py [--out results.json] [--tiny] [--runs N]
                                                 [--sizes 1 256 8192 65536]

For each batch size (tokens per step) and two geometries (plain attention,
and a hybrid 64/16 group under DCP 2), it times, per call:

* ``table``: ``BlockTable.compute_slot_mapping`` on a CUDA table, i.e. the
  cheap input checks, ``dispatch`` and the warmed kernel's launch (warmed up
  through ``warmkit.warmup`` first; the monitor is in ``"error"`` mode, so a
  compile during timing would abort the run);
* ``kernel``: ``ComputeSlotMappingKernel.__call__`` alone (``dispatch`` plus
  the launch, without the table's checks);
* ``gpu``: the kernel's time on the GPU alone: 50 launches captured in a CUDA
  graph, replayed, divided by 50 (launch overhead excluded);
* ``reference``: ``reference_slot_mapping`` as shipped: it validates its
  inputs, which reads values back to the host (synchronizes) on a GPU;
* ``torch``: the same math with no checks and no host synchronization
  (``unchecked_torch_slot_mapping``), the fair plain-torch baseline.

Each measurement is the mean per call over a loop of back-to-back calls
(synchronized at the end), repeated ``--runs`` times: the table gives the
median and min-max of those. On a host without CUDA only the two torch
variants run, on CPU tensors, and the output says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from _common import emit, parser, stats, table
from warmkit_blocktable import BlockTable, ComputeSlotMappingKernel, reference_slot_mapping
from warmkit_blocktable._reference import unchecked_torch_slot_mapping

import warmkit

SIZES = (1, 256, 8192, 65536)
# name -> (allocation block, kernel block, DCP world, DCP rank, interleave)
GEOMETRIES = {
    "attn K16": (16, 16, 1, 0, 1),
    "hybrid K64/bs16 DCP2": (64, 16, 2, 1, 1),
}
MAX_NUM_REQS = 256
MAX_MODEL_LEN = 131072


def make_step(
    bt: BlockTable, num_tokens: int, device: torch.device, gen: torch.Generator
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """A step of ``num_tokens`` tokens over up to 256 requests with filled rows.

    One token per request up to 256 tokens (decodes); beyond, 256 requests
    each with a contiguous chunk (prefill chunks), at random context offsets.
    """
    num_reqs = max(1, min(MAX_NUM_REQS, num_tokens))
    per_req = [
        num_tokens // num_reqs + (1 if r < num_tokens % num_reqs else 0) for r in range(num_reqs)
    ]
    blocks = bt.max_num_blocks_per_req
    ids = torch.randint(0, 2**20, (num_reqs, blocks), generator=gen).numpy()
    for r in range(num_reqs):
        bt.add_row(ids[r], r)
    bt.commit(num_reqs)
    per_rank_capacity = blocks * bt.block_size * bt.dcp_world_size
    starts = torch.randint(0, per_rank_capacity - max(per_req) - 1, (num_reqs,), generator=gen)
    positions = torch.cat([torch.arange(int(s), int(s) + n) for s, n in zip(starts, per_req)])
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(per_req), 0)
    return num_reqs, qsl.to(device), positions.to(torch.int64).to(device)


def time_per_call(
    fn: Callable[[], Any], device: torch.device, runs: int, min_seconds: float
) -> dict[str, float]:
    """Mean seconds per call over a loop, ``runs`` times; median/min/max of those means."""
    fn()  # warm caches, allocator
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, min(2000, int(min_seconds / once)))
    samples = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / iters)
    return stats(samples) | {"iters": iters}


def gpu_time(fn: Callable[[], Any], runs: int, launches: int = 50) -> dict[str, float] | None:
    """GPU time per call: ``launches`` calls captured in a CUDA graph, replayed ``runs`` times."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # outside capture: nothing lazy left for the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()
    except Exception as exc:  # noqa: BLE001 -- reported, not fatal: the CPU numbers still stand
        print(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); no gpu column")
        return None
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / launches)
    return stats(samples) | {"iters": launches}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="tokens per step")
    args = p.parse_args()
    sizes = [1, 256] if args.tiny else args.sizes
    runs = 2 if args.tiny else max(5, args.runs)
    min_seconds = 0.002 if args.tiny else 0.05
    has_gpu = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if has_gpu else torch.device("cpu")
    max_tokens = max(sizes)

    note = (
        f"GPU {torch.cuda.get_device_name(device)}: kernel vs torch on the GPU"
        if has_gpu
        else "NO GPU: the Triton kernel cannot run here; only the torch reference variants "
        "are timed, on CPU tensors"
    )
    print(note)
    registry = warmkit.WarmupRegistry()
    tables: dict[str, BlockTable] = {}
    with registry.activate():
        for name, (k, bs, w, r, i) in GEOMETRIES.items():
            tables[name] = BlockTable(
                block_size=k,
                kernel_block_size=bs,
                max_num_reqs=MAX_NUM_REQS,
                max_num_blocks_per_req=-(-MAX_MODEL_LEN // (k * w)),
                max_num_batched_tokens=max_tokens,
                device=device,
                dcp_world_size=w,
                dcp_rank=r,
                cp_kv_cache_interleave_size=i,
            )
    if has_gpu:
        report = warmkit.warmup(
            warmkit.WarmupConfig(monitor="error", progress="off"), registry=registry
        )
        print(f"warmed up {len(report.entries)} key(s) in {report.seconds:.2f} s")

    kernel = ComputeSlotMappingKernel()
    gen = torch.Generator().manual_seed(0)
    rows = []
    results: dict[str, Any] = {"device": str(device), "gpu": has_gpu, "note": note, "cases": []}
    for name, bt in tables.items():
        for n in sizes:
            num_reqs, qsl, positions = make_step(bt, n, device, gen)
            out = torch.empty(max_tokens, dtype=torch.int64, device=device)
            common = {
                "block_size": bt.kernel_block_size,
                "kv_cache_block_size": bt.block_size,
                "blocks_per_kv_block": bt.blocks_per_kv_block,
                "dcp_world_size": bt.dcp_world_size,
                "dcp_rank": bt.dcp_rank,
                "cp_kv_cache_interleave_size": bt.cp_kv_cache_interleave_size,
            }
            case: dict[str, Any] = {"geometry": name, "tokens": n, "num_reqs": num_reqs}
            if has_gpu:
                case["table"] = time_per_call(
                    lambda bt=bt, q=qsl, p=positions, nr=num_reqs: bt.compute_slot_mapping(
                        nr, q, p
                    ),
                    device,
                    runs,
                    min_seconds,
                )
                got = bt.compute_slot_mapping(num_reqs, qsl, positions)
                launch = {
                    "num_reqs": num_reqs,
                    "num_tokens": n,
                    "max_num_tokens": max_tokens,
                    "query_start_loc": qsl,
                    "positions": positions,
                    "block_table": bt.block_table,
                    "block_table_stride": bt.row_width,
                    "block_size": bt.kernel_block_size,
                    "slot_mapping": out,
                    "kv_cache_block_size": bt.block_size,
                    "blocks_per_kv_block": bt.blocks_per_kv_block,
                    "total_cp_world_size": bt.dcp_world_size,
                    "total_cp_rank": bt.dcp_rank,
                    "cp_kv_cache_interleave_size": bt.cp_kv_cache_interleave_size,
                }
                case["kernel"] = time_per_call(
                    lambda kw=launch: kernel(**kw), device, runs, min_seconds
                )
                case["gpu"] = gpu_time(lambda kw=launch: kernel(**kw), runs)
            case["reference"] = time_per_call(
                lambda bt=bt, q=qsl, p=positions, c=common, o=out: reference_slot_mapping(
                    query_start_loc=q,
                    positions=p,
                    block_table=bt.block_table,
                    max_num_tokens=max_tokens,
                    out=o,
                    **c,
                ),
                device,
                runs,
                min_seconds,
            )
            case["torch"] = time_per_call(
                lambda bt=bt, q=qsl, p=positions, c=common, o=out: unchecked_torch_slot_mapping(
                    query_start_loc=q,
                    positions=p,
                    block_table=bt.block_table,
                    geometry=bt.geometry,
                    out=o,
                ),
                device,
                runs,
                min_seconds,
            )
            if has_gpu:
                want = reference_slot_mapping(
                    query_start_loc=qsl,
                    positions=positions,
                    block_table=bt.block_table,
                    max_num_tokens=max_tokens,
                    **common,
                )
                case["kernel_equals_reference"] = bool(torch.equal(got, want))
            results["cases"].append(case)

            def us(key: str, case: dict[str, Any] = case) -> str:
                if case.get(key) is None:
                    return "-"
                s = case[key]
                return f"{s['median'] * 1e6:.1f} ({s['min'] * 1e6:.1f}-{s['max'] * 1e6:.1f})"

            speedup = (
                f"{case['torch']['median'] / case['table']['median']:.1f}x"
                if "table" in case
                else "-"
            )
            rows.append(
                (
                    name,
                    n,
                    num_reqs,
                    us("table"),
                    us("kernel"),
                    us("gpu"),
                    us("reference"),
                    us("torch"),
                    speedup,
                )
            )
    head = (
        "geometry",
        "tokens",
        "reqs",
        "table us",
        "kernel us",
        "gpu us",
        "reference us",
        "torch us",
        "torch/table",
    )
    text = (
        table(rows, head)
        + "\nper call: median (min-max) of the per-call mean over "
        + f"{runs} runs"
    )
    if not has_gpu:
        text += "\n" + note
    if warmkit.monitor.events():
        text += f"\nWARNING: {len(warmkit.monitor.events())} runtime compile event(s) during timing"
    results["runtime_compile_events"] = len(warmkit.monitor.events())
    warmkit.monitor.disarm()
    emit("slot_mapping_throughput", results, args.out, text)


if __name__ == "__main__":
    main()
