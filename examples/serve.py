#!/usr/bin/env python3
"""warmkit demo: a small model-runner simulation that warms up, then serves with 0 runtime compiles.

What it does, driven by ``examples/engine.toml``:

1. builds, under ``registry.activate()``, a placeholder block table (the way a
   runner builds its input batch before the KV cache is configured), then the
   real ``MultiGroupBlockTable`` of every simulated DCP rank: one block table
   per KV-cache group (full attention; a hybrid group with allocation block
   64 over kernel block 16; a state-space group in ``NONE`` mode). Each
   table registers exactly the slot-mapping kernel variant it will launch;
2. saves the registry as a manifest (``--manifest-out``);
3. calls ``warmkit.warmup(config)``: progress bar, then the report table;
4. runs N simulated scheduler steps (prefill chunks and decodes, arrivals and
   departures, rows moved and swapped) with the monitor in ``"error"`` mode,
   so that any compile after warmup raises;
5. prints a summary: keys, compile seconds, runtime compile events (must be
   0), p50/p99 step latency. ``--json PATH`` writes it as JSON too.

With a CUDA GPU the block tables live on it and every step launches the
compiled Triton kernel. Without one, warmup compiles the kernel variants ahead
of time for the declared target (``cuda:90`` by default) into Triton's cache,
and the steps run through the torch reference implementation on the CPU; the
program says so plainly, since no Triton kernel is launched then.

Usage::

    python examples/serve.py [--config engine.toml] [--steps N] [--target cuda:90]
                             [--manifest-out PATH] [--json PATH] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from warmkit_blocktable import (
    PAD_SLOT_ID,
    ComputeSlotMappingKernel,
    MultiGroupBlockTable,
    SlotMappingMode,
    reference_slot_mapping,
)

import warmkit

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = HERE / "engine.toml"
DEFAULT_MANIFEST = Path("out") / "serve-manifest.json"

log = logging.getLogger("serve")


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One KV-cache group of the engine."""

    name: str
    mode: SlotMappingMode
    block_size: int
    kernel_block_size: int

    @property
    def blocks_per_kv_block(self) -> int:
        return self.block_size // self.kernel_block_size


@dataclass(frozen=True)
class Engine:
    """The engine description read from the TOML file."""

    max_num_reqs: int
    max_model_len: int
    max_num_batched_tokens: int
    dcp_world_size: int
    cp_kv_cache_interleave_size: int
    placeholder_block_size: int
    dcp_ranks: tuple[int, ...]
    groups: tuple[Group, ...]
    warmup: dict[str, Any]
    simulation: dict[str, Any]


def load_engine(path: Path) -> Engine:
    """Read and check the engine description.

    Raises:
        SystemExit: a missing file or a malformed description (one clear line).
    """
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"serve.py: cannot read {path}: {exc}") from exc
    try:
        eng = raw["engine"]
        groups = tuple(
            Group(
                name=g["name"],
                mode=SlotMappingMode(g.get("mode", "token_to_kv_slot")),
                block_size=int(g["block_size"]),
                kernel_block_size=int(g.get("kernel_block_size", g["block_size"])),
            )
            for g in raw["kv_cache_groups"]
        )
        world = int(eng.get("dcp_world_size", 1))
        ranks = tuple(int(r) for r in eng.get("dcp_ranks", range(world)))
        engine = Engine(
            max_num_reqs=int(eng["max_num_reqs"]),
            max_model_len=int(eng["max_model_len"]),
            max_num_batched_tokens=int(eng["max_num_batched_tokens"]),
            dcp_world_size=world,
            cp_kv_cache_interleave_size=int(eng.get("cp_kv_cache_interleave_size", 1)),
            placeholder_block_size=int(eng.get("placeholder_block_size", groups[0].block_size)),
            dcp_ranks=ranks,
            groups=groups,
            warmup=dict(raw.get("warmup", {})),
            simulation=dict(raw.get("simulation", {})),
        )
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise SystemExit(f"serve.py: {path}: malformed engine description: {exc!r}") from exc
    if not groups:
        raise SystemExit(f"serve.py: {path}: no [[kv_cache_groups]]")
    if not ranks or any(not 0 <= r < world for r in ranks) or len(set(ranks)) != len(ranks):
        raise SystemExit(
            f"serve.py: {path}: dcp_ranks {list(ranks)} must be distinct ranks < {world}"
        )
    return engine


def warmup_config(engine: Engine, target: str | None) -> warmkit.WarmupConfig:
    """The TOML [warmup] table, overridden by any WARMKIT_* variable that is set, then by --target."""
    env_names = {
        "enabled": "WARMKIT_ENABLED",
        "monitor": "WARMKIT_MONITOR",
        "jobs": "WARMKIT_JOBS",
        "target": "WARMKIT_TARGET",
        "on_error": "WARMKIT_ON_ERROR",
        "progress": "WARMKIT_PROGRESS",
        "backends": "WARMKIT_BACKENDS",
    }
    from_toml = {
        k: v for k, v in engine.warmup.items() if os.environ.get(env_names.get(k, "")) is None
    }
    from_toml.pop("target", None)  # resolved by the caller
    return warmkit.WarmupConfig.from_env(**from_toml, target=target)


# -- the simulated engine ---------------------------------------------------------------------------


def owned_count(n: int, rank: int, world: int, interleave: int) -> int:
    """How many of positions ``[0, n)`` DCP rank ``rank`` holds (dealt round-robin in chunks)."""
    cycle = world * interleave
    full, rem = divmod(n, cycle)
    return full * interleave + min(max(rem - rank * interleave, 0), interleave)


@dataclass
class Request:
    """One request of the simulated scheduler."""

    rid: int
    prompt_len: int
    output_len: int
    computed: int = 0
    # blocks[(rank, group)] = allocation-block ids, in order
    blocks: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len

    @property
    def decoding(self) -> bool:
        return self.computed >= self.prompt_len

    @property
    def finished(self) -> bool:
        return self.computed >= self.total_len


class BlockPool:
    """Free allocation blocks of one (rank, group), handed out in a shuffled order."""

    def __init__(self, num_blocks: int, rng: np.random.Generator) -> None:
        self.free = rng.permutation(num_blocks).tolist()

    def take(self, n: int) -> list[int]:
        if n > len(self.free):
            raise RuntimeError("KV-cache pool exhausted (the pool is sized so this cannot happen)")
        out = self.free[-n:] if n else []
        del self.free[len(self.free) - n :]
        return out

    def give(self, ids: list[int]) -> None:
        self.free.extend(ids)


@dataclass
class Stats:
    step_s: list[float] = field(default_factory=list)
    slot_mapping_s: list[float] = field(default_factory=list)
    tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    arrivals: int = 0
    departures: int = 0
    rows_moved: int = 0
    rows_swapped: int = 0
    empty_rows: int = 0
    checks: int = 0


class Simulator:
    """A scheduler plus one model runner (a ``MultiGroupBlockTable``) per simulated DCP rank."""

    def __init__(
        self,
        engine: Engine,
        tables: dict[int, MultiGroupBlockTable],
        device: torch.device,
        rng: np.random.Generator,
    ) -> None:
        self.engine = engine
        self.tables = tables
        self.device = device
        self.rng = rng
        sim = engine.simulation
        self.arrival_rate = float(sim.get("arrival_rate", 1.5))
        self.prompt_len = tuple(sim.get("prompt_len", (16, 3000)))
        self.output_len = tuple(sim.get("output_len", (4, 400)))
        self.reorder_every = int(sim.get("reorder_every", 7))
        self.check_every = int(sim.get("check_every", 10))
        self.batch: list[Request | None] = []  # row -> request (None: a hole, mid-step only)
        self.next_id = 0
        self.stats = Stats()
        w = engine.dcp_world_size
        self.pools = {
            (r, g): BlockPool(
                engine.max_num_reqs * max(1, -(-engine.max_model_len // (grp.block_size * w))),
                rng,
            )
            for r in engine.dcp_ranks
            for g, grp in enumerate(engine.groups)
        }
        n = engine.max_num_batched_tokens
        pin = device.type == "cuda"
        # Persistent input buffers, as a runner keeps them (host staging + device).
        self.qsl_host = torch.zeros(engine.max_num_reqs + 1, dtype=torch.int32, pin_memory=pin)
        self.pos_host = torch.zeros(n, dtype=torch.int64, pin_memory=pin)
        self.qsl_dev = torch.zeros(engine.max_num_reqs + 1, dtype=torch.int32, device=device)
        self.pos_dev = torch.zeros(n, dtype=torch.int64, device=device)

    # -- scheduler pieces ---------------------------------------------------------------------

    def _depart(self) -> list[int]:
        """Free finished requests' blocks and rows; return the holes they leave."""
        holes = []
        for row, req in enumerate(self.batch):
            if req is not None and req.finished:
                for (rank, g), ids in req.blocks.items():
                    self.pools[(rank, g)].give(ids)
                for tables in self.tables.values():
                    tables.clear_row(row)
                self.batch[row] = None
                holes.append(row)
                self.stats.departures += 1
        return holes

    def _admit(self, holes: list[int]) -> None:
        """New arrivals take the holes first (lowest row first), then rows at the end."""
        arrivals = int(self.rng.poisson(self.arrival_rate))
        for _ in range(arrivals):
            if not holes and len(self.batch) >= self.engine.max_num_reqs:
                break
            prompt = int(self.rng.integers(self.prompt_len[0], self.prompt_len[1] + 1))
            prompt = min(prompt, self.engine.max_model_len - 1)
            output = int(self.rng.integers(self.output_len[0], self.output_len[1] + 1))
            output = max(1, min(output, self.engine.max_model_len - prompt))
            req = Request(self.next_id, prompt, output)
            self.next_id += 1
            if holes:
                row = holes.pop(0)
                self.batch[row] = req
            else:
                row = len(self.batch)
                self.batch.append(req)
            for rank, tables in self.tables.items():
                ids: list[list[int]] = []
                for g, grp in enumerate(self.engine.groups):
                    # state-space groups hold one state block per request
                    blocks = self.pools[(rank, g)].take(
                        1 if grp.mode is SlotMappingMode.NONE else 0
                    )
                    req.blocks[(rank, g)] = blocks
                    ids.append(blocks)
                tables.add_row(ids, row)
            self.stats.arrivals += 1

    def _condense(self) -> None:
        """Fill the remaining holes with the last rows, so rows [0, num_reqs) are all live."""
        row = 0
        while True:
            while self.batch and self.batch[-1] is None:
                self.batch.pop()
            while row < len(self.batch) and self.batch[row] is not None:
                row += 1
            if row >= len(self.batch):
                return
            last = len(self.batch) - 1
            for tables in self.tables.values():
                tables.move_row(last, row)
                tables.clear_row(last)
            self.batch[row] = self.batch.pop()
            self.stats.rows_moved += 1

    def _reorder(self) -> None:
        """Put decodes before prefills (as attention backends want), by swapping rows."""
        lo, hi = 0, len(self.batch) - 1
        while lo < hi:
            if self.batch[lo].decoding:
                lo += 1
            elif not self.batch[hi].decoding:
                hi -= 1
            else:
                for tables in self.tables.values():
                    tables.swap_row(lo, hi)
                self.batch[lo], self.batch[hi] = self.batch[hi], self.batch[lo]
                self.stats.rows_swapped += 1

    def _schedule(self) -> list[int]:
        """Tokens per row this step: decodes first, then prefill chunks, within the budget."""
        budget = self.engine.max_num_batched_tokens
        counts = [0] * len(self.batch)
        for i, req in enumerate(self.batch):
            if req.decoding and budget:
                counts[i] = 1
                budget -= 1
        for i, req in enumerate(self.batch):
            if not req.decoding and budget:
                counts[i] = min(req.prompt_len - req.computed, budget)
                budget -= counts[i]
        return counts

    def _allocate(self, counts: list[int]) -> None:
        e = self.engine
        for row, (req, n) in enumerate(zip(self.batch, counts)):
            if not n:
                continue
            end = req.computed + n
            for rank, tables in self.tables.items():
                local = owned_count(end, rank, e.dcp_world_size, e.cp_kv_cache_interleave_size)
                for g, grp in enumerate(e.groups):
                    if grp.mode is SlotMappingMode.NONE:
                        continue
                    have = req.blocks[(rank, g)]
                    need = -(-local // grp.block_size) - len(have)
                    if need > 0:
                        new = self.pools[(rank, g)].take(need)
                        have.extend(new)
                        tables[g].append_row(new, row)

    # -- one step ---------------------------------------------------------------------------

    def step(self, index: int) -> None:
        t0 = time.perf_counter()
        self._admit(self._depart())
        self._condense()
        if self.reorder_every and index % self.reorder_every == 0:
            self._reorder()
        counts = self._schedule()
        self._allocate(counts)
        num_reqs = len(self.batch)
        qsl = np.zeros(num_reqs + 1, dtype=np.int32)
        np.cumsum(counts, out=qsl[1:])
        num_tokens = int(qsl[-1])
        positions = (
            np.concatenate(
                [np.arange(r.computed, r.computed + n) for r, n in zip(self.batch, counts) if n]
            )
            if num_tokens
            else np.zeros(0, dtype=np.int64)
        )
        self.qsl_host[: num_reqs + 1].numpy()[:] = qsl
        self.pos_host[:num_tokens].numpy()[:] = positions
        self.qsl_dev[: num_reqs + 1].copy_(self.qsl_host[: num_reqs + 1], non_blocking=True)
        self.pos_dev[:num_tokens].copy_(self.pos_host[:num_tokens], non_blocking=True)
        qsl_d, pos_d = self.qsl_dev[: num_reqs + 1], self.pos_dev[:num_tokens]

        t_sm = time.perf_counter()
        outputs = {}
        for rank, tables in self.tables.items():
            tables.commit(num_reqs)
            outputs[rank] = tables.compute_slot_mapping(num_reqs, qsl_d, pos_d)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t_end = time.perf_counter()

        if self.check_every and index % self.check_every == 0:
            self._check(num_reqs, num_tokens, outputs)

        for req, n in zip(self.batch, counts):
            if req.decoding:
                self.stats.decode_tokens += n
            else:
                self.stats.prefill_tokens += n
            req.computed += n
        s = self.stats
        s.step_s.append(t_end - t0)
        s.slot_mapping_s.append(t_end - t_sm)
        s.tokens += num_tokens
        s.empty_rows += sum(1 for n in counts if n == 0)

    def _check(self, num_reqs: int, num_tokens: int, outputs: dict[int, list[Any]]) -> None:
        """Every token owned by exactly one rank, padding intact, and (on GPU) kernel == reference."""
        e = self.engine
        all_ranks = set(self.tables) == set(range(e.dcp_world_size))
        for g, grp in enumerate(e.groups):
            if grp.mode is SlotMappingMode.NONE:
                assert all(out[g] is None for out in outputs.values())
                continue
            per_rank = {r: out[g].cpu() for r, out in outputs.items()}
            for rank, got in per_rank.items():
                assert bool(got[num_tokens:].eq(PAD_SLOT_ID).all()), f"{grp.name}: padding broken"
                if self.device.type == "cuda":
                    t = self.tables[rank][g]
                    want = reference_slot_mapping(
                        query_start_loc=self.qsl_dev[: num_reqs + 1].cpu(),
                        positions=self.pos_dev[:num_tokens].cpu(),
                        block_table=t.block_table[:num_reqs].cpu(),
                        block_size=t.kernel_block_size,
                        kv_cache_block_size=t.block_size,
                        blocks_per_kv_block=t.blocks_per_kv_block,
                        dcp_world_size=t.dcp_world_size,
                        dcp_rank=t.dcp_rank,
                        cp_kv_cache_interleave_size=t.cp_kv_cache_interleave_size,
                        max_num_tokens=t.max_num_batched_tokens,
                    )
                    assert torch.equal(got, want), f"{grp.name} rank {rank}: kernel != reference"
            if all_ranks:
                owners = sum(
                    (v[:num_tokens] != PAD_SLOT_ID).to(torch.int32) for v in per_rank.values()
                )
                assert bool(owners.eq(1).all()), (
                    f"{grp.name}: a token is not owned by exactly one rank"
                )
        self.stats.checks += 1


# -- the runner -------------------------------------------------------------------------------------


def build_tables(
    engine: Engine, device: torch.device, registry: warmkit.WarmupRegistry
) -> tuple[dict[int, MultiGroupBlockTable], int]:
    """Placeholder tables, then the real ones, for every simulated rank, under the registry.

    Returns:
        The real tables per rank, and how many block tables were built in all.
    """
    common = {
        "max_num_reqs": engine.max_num_reqs,
        "max_model_len": engine.max_model_len,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "device": device,
        "dcp_world_size": engine.dcp_world_size,
        "cp_kv_cache_interleave_size": engine.cp_kv_cache_interleave_size,
    }
    built = 0
    with registry.activate():
        # 1. Before the KV cache is configured, a runner builds its input batch with a
        #    placeholder block size; it registers too.
        for rank in engine.dcp_ranks:
            placeholder = MultiGroupBlockTable(
                block_sizes=[engine.placeholder_block_size], dcp_rank=rank, **common
            )
            built += len(placeholder)
            del placeholder
        # 2. The real block tables, one per KV-cache group.
        tables = {
            rank: MultiGroupBlockTable(
                block_sizes=[g.block_size for g in engine.groups],
                kernel_block_sizes=[g.kernel_block_size for g in engine.groups],
                modes=[g.mode for g in engine.groups],
                dcp_rank=rank,
                **common,
            )
            for rank in engine.dcp_ranks
        }
        built += sum(len(t) for t in tables.values())
    return tables, built


def describe_key(key: Any) -> str:
    return (
        f"K={key.kv_cache_block_size:<3} B={key.blocks_per_kv_block} bs~{key.block_size:<3} "
        f"stride~{key.block_table_stride:<3} DCP {key.total_cp_rank}/{key.total_cp_world_size} "
        f"I={key.cp_kv_cache_interleave_size}"
    )


def percentile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1e3, q)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="warmkit demo: register, warm up, then serve simulated steps with 0 runtime compiles"
    )
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="engine TOML (default: %(default)s)"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="scheduler steps (default: the TOML's)"
    )
    parser.add_argument(
        "--target",
        default=None,
        help="compile target, e.g. cuda:90 (default: this GPU, or the TOML's target when there is none)",
    )
    parser.add_argument(
        "--manifest-out",
        type=Path,
        default=DEFAULT_MANIFEST,
        help="where to save the manifest (default: %(default)s)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the summary as JSON here"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the TOML's)")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip warmkit.warmup (the contrast run): the monitor is armed in 'warn' mode, so "
        "every compile the steps trigger is counted; exits 0 even when there are some",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    engine = load_engine(args.config)
    steps = args.steps if args.steps is not None else int(engine.simulation.get("steps", 300))
    seed = args.seed if args.seed is not None else int(engine.simulation.get("seed", 0))
    if steps < 0:
        parser.error("--steps must be >= 0")
    has_gpu = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if has_gpu else torch.device("cpu")
    if not has_gpu:
        # The reference works on a few thousand elements per call: intra-op threads only
        # add overhead, and jitter on a busy host.
        torch.set_num_threads(1)
    if args.target is not None:
        target: str | None = args.target
    elif has_gpu:
        target = None  # this GPU
    else:
        target = os.environ.get("WARMKIT_TARGET") or str(engine.warmup.get("target", "cuda:90"))

    print("=" * 78)
    if has_gpu:
        print(f"GPU: {torch.cuda.get_device_name(device)}. Block tables live on {device}; every")
        print("step launches the compiled Triton slot-mapping kernel.")
    else:
        print("NO GPU on this host. Warmup compiles the Triton kernel variants ahead of time for")
        print(
            f"the declared target {target} (into Triton's cache), but the serving steps below run"
        )
        print("the torch REFERENCE implementation on the CPU: no Triton kernel is launched, so")
        print("'0 runtime compiles' here says nothing about a GPU. Run on a GPU for that.")
    print("=" * 78)

    # 1. Build the engine's objects under a registry: they register what they will launch.
    registry = warmkit.WarmupRegistry()
    tables, built = build_tables(engine, device, registry)
    plan = registry.plan()
    keys = plan.get(ComputeSlotMappingKernel.name, [])
    impls = sorted(
        {t.implementation for mg in tables.values() for t in mg if t.slot_mapping is not None}
    )
    print(
        f"\nbuilt {built} block tables ({len(engine.dcp_ranks)} placeholder + "
        f"{built - len(engine.dcp_ranks)} real, {len(engine.groups)} KV-cache groups x "
        f"{len(engine.dcp_ranks)} DCP rank(s)); {len(registry)} distinct registrations; "
        f"{len(keys)} unique compile keys:"
    )
    for key in keys:
        print(f"  {describe_key(key)}")

    # 2. Save the manifest (replayable with `warmkit warmup MANIFEST --target ...`).
    manifest = registry.save(args.manifest_out)
    print(f"manifest: {manifest}")

    # 3. Warm up.
    config = warmup_config(engine, target)
    report: warmkit.WarmupReport | None = None
    if args.no_warmup:
        print(
            "\n--no-warmup: NOT warming up; monitor armed in 'warn' mode to count runtime compiles"
        )
        config = warmkit.WarmupConfig(monitor="warn", target=config.target)
        warmkit.monitor.arm("warn")
    else:
        print(
            f"\nwarmkit.warmup(target={config.target or 'this GPU'}, monitor={config.monitor!r}) ...",
            flush=True,
        )
        try:
            report = warmkit.warmup(config, registry=registry)
        except warmkit.WarmkitError as exc:
            print(f"\nwarmup failed: {exc}", file=sys.stderr)
            return 1
        print(report.table(), flush=True)

    # 4. Serve.
    events_before = len(warmkit.monitor.events())
    sim = Simulator(engine, tables, device, np.random.default_rng(seed))
    error: str | None = None
    t0 = time.perf_counter()
    try:
        for i in range(steps):
            sim.step(i)
    except warmkit.RuntimeCompileError as exc:
        error = f"runtime compile refused by the monitor: {exc}"
    except AssertionError as exc:
        error = f"slot-mapping check failed: {exc}"
    serve_s = time.perf_counter() - t0
    runtime_events = warmkit.monitor.events()[events_before:]
    warmkit.monitor.disarm()

    # 5. Summary.
    s = sim.stats
    summary = {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if has_gpu else None,
        "implementation": impls,
        "target": config.target,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "block_tables_built": built,
        "registrations": len(registry),
        "keys": [describe_key(k) for k in keys],
        "warmup": None
        if report is None
        else {
            "seconds": round(report.seconds, 4),
            "compile_seconds": round(sum(e.seconds for e in report.entries), 4),
            "totals": report.totals(),
            "jobs": report.jobs,
        },
        "steps": len(s.step_s),
        "serve_seconds": round(serve_s, 4),
        "tokens": s.tokens,
        "prefill_tokens": s.prefill_tokens,
        "decode_tokens": s.decode_tokens,
        "arrivals": s.arrivals,
        "departures": s.departures,
        "rows_moved": s.rows_moved,
        "rows_swapped": s.rows_swapped,
        "empty_rows": s.empty_rows,
        "checked_steps": s.checks,
        "monitor": config.monitor,
        "runtime_compile_events": len(runtime_events),
        "runtime_compile_event_details": [
            {"kernel": ev.kernel, "key": repr(ev.key), "kind": ev.kind, "seconds": ev.seconds}
            for ev in runtime_events
        ],
        "step_latency_ms": {
            "first": round(s.step_s[0] * 1e3, 4) if s.step_s else None,
            "p50": round(percentile_ms(s.step_s, 50), 4),
            "p99": round(percentile_ms(s.step_s, 99), 4),
        },
        "slot_mapping_latency_ms": {
            "p50": round(percentile_ms(s.slot_mapping_s, 50), 4),
            "p99": round(percentile_ms(s.slot_mapping_s, 99), 4),
        },
        "error": error,
    }
    print("\n" + "=" * 78)
    print("summary")
    print("-" * 78)
    print(
        f"device                     {summary['device']}"
        + (f" ({summary['gpu']})" if has_gpu else "")
    )
    print(
        f"slot mapping computed by   {', '.join(impls)}"
        + ("" if has_gpu else "  (torch reference on CPU: NO Triton kernel launched)")
    )
    print(
        f"compile keys               {len(keys)} (from {len(registry)} registrations, {built} tables)"
    )
    if report is None:
        print("warmup                     SKIPPED (--no-warmup)")
    else:
        print(
            f"warmup                     {report.seconds:.3f} s for target "
            f"{config.target or 'this GPU'} ({report.count('compiled')} compiled, "
            f"{report.count('cached')} cached)"
        )
    print(
        f"steps                      {len(s.step_s)} ({s.tokens} tokens: {s.prefill_tokens} prefill, "
        f"{s.decode_tokens} decode)"
    )
    print(
        f"requests                   {s.arrivals} arrived, {s.departures} departed; "
        f"{s.rows_moved} rows moved, {s.rows_swapped} swapped, {s.empty_rows} empty rows"
    )
    print(
        f"checked steps              {s.checks} (ownership across ranks, padding"
        + (", kernel == reference)" if has_gpu else ")")
    )
    must = "" if args.no_warmup else "; must be 0"
    print(f"runtime compile events     {len(runtime_events)}  (monitor: {config.monitor}{must})")
    lat = summary["step_latency_ms"]
    first = f"first step {lat['first']:.3f} ms, " if lat["first"] is not None else ""
    print(f"step latency               {first}p50 {lat['p50']:.3f} ms, p99 {lat['p99']:.3f} ms")
    print(
        f"  of which slot mapping    p50 {summary['slot_mapping_latency_ms']['p50']:.3f} ms, "
        f"p99 {summary['slot_mapping_latency_ms']['p99']:.3f} ms "
        f"({len(engine.dcp_ranks)} rank(s) x {sum(g.mode is SlotMappingMode.TOKEN_TO_KV_SLOT for g in engine.groups)} groups)"
    )
    if error:
        print(f"ERROR                      {error}")
    print("=" * 78)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"summary JSON: {args.json}")
    if error is not None:
        return 1
    return 0 if args.no_warmup or not runtime_events else 1


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return str(triton.__version__)


if __name__ == "__main__":
    sys.exit(main())
