"""The simulated engine of the demos: its description (``engine.toml``), scheduler and runners.

``examples/serve.py`` (one process, every DCP rank) and ``examples/serve_ranks.py``
(one process per rank) share it:

* ``load_engine`` reads and checks the TOML description (KV-cache groups, DCP
  geometry, the ``[warmup]`` and ``[simulation]`` tables);
* ``build_tables`` builds a runner's block tables under a registry, so they
  register exactly the slot-mapping variants they will launch;
* ``Simulator`` drives them: arrivals and departures, prefill chunks and
  decodes, rows moved and swapped, and sampled checks of every table's slot
  mapping (padding, kernel == reference on a GPU, one owner per token when
  one process holds every DCP rank).
"""

from __future__ import annotations

import os
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from warmkit_blocktable import (
    PAD_SLOT_ID,
    MultiGroupBlockTable,
    SlotMappingMode,
    reference_slot_mapping,
)

import warmkit

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
    #: Groups kept whole on every rank (not context-parallel, e.g. a small draft model's
    #: KV cache): their block tables have DCP world size 1, so their keys are the same
    #: on every rank. One set per process, under the tables key ``"replicated"``.
    replicated_groups: tuple[Group, ...] = ()


def _groups(tables: list[dict[str, Any]]) -> tuple[Group, ...]:
    return tuple(
        Group(
            name=g["name"],
            mode=SlotMappingMode(g.get("mode", "token_to_kv_slot")),
            block_size=int(g["block_size"]),
            kernel_block_size=int(g.get("kernel_block_size", g["block_size"])),
        )
        for g in tables
    )


def load_engine(path: Path) -> Engine:
    """Read and check the engine description.

    Raises:
        SystemExit: a missing file or a malformed description (one clear line).
    """
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"cannot read the engine description {path}: {exc}") from exc
    try:
        eng = raw["engine"]
        groups = _groups(raw["kv_cache_groups"])
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
            replicated_groups=_groups(raw.get("replicated_kv_cache_groups", [])),
        )
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise SystemExit(f"{path}: malformed engine description: {exc!r}") from exc
    if not groups:
        raise SystemExit(f"{path}: no [[kv_cache_groups]]")
    if not ranks or any(not 0 <= r < world for r in ranks) or len(set(ranks)) != len(ranks):
        raise SystemExit(f"{path}: dcp_ranks {list(ranks)} must be distinct ranks < {world}")
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
        # Keyed like ``tables``; every table's own geometry (its DCP world size) sizes its pool.
        self.pools = {
            (r, g): BlockPool(engine.max_num_reqs * t.max_num_blocks_per_req, rng)
            for r, mg in tables.items()
            for g, t in enumerate(mg)
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
                for g, t in enumerate(tables):
                    # state-space groups hold one state block per request
                    blocks = self.pools[(rank, g)].take(1 if t.mode is SlotMappingMode.NONE else 0)
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
        for row, (req, n) in enumerate(zip(self.batch, counts)):
            if not n:
                continue
            end = req.computed + n
            for rank, tables in self.tables.items():
                for g, t in enumerate(tables):
                    if t.mode is SlotMappingMode.NONE:
                        continue
                    local = owned_count(
                        end, t.dcp_rank, t.dcp_world_size, t.cp_kv_cache_interleave_size
                    )
                    have = req.blocks[(rank, g)]
                    need = -(-local // t.block_size) - len(have)
                    if need > 0:
                        new = self.pools[(rank, g)].take(need)
                        have.extend(new)
                        t.append_row(new, row)

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

    def _check(self, num_reqs: int, num_tokens: int, outputs: dict[Any, list[Any]]) -> None:
        """Padding intact, (on GPU) kernel == reference, and one owner per token across ranks.

        The ownership check needs every DCP rank's tables in this process (``serve.py``);
        ``serve_ranks.py`` checks it across its processes instead.
        """
        for rank, tables in self.tables.items():
            for g, t in enumerate(tables):
                got = outputs[rank][g]
                where = f"tables {rank!r} group {g}"
                if t.mode is SlotMappingMode.NONE:
                    assert got is None, f"{where}: a NONE group computed a slot mapping"
                    continue
                got = got.cpu()
                assert bool(got[num_tokens:].eq(PAD_SLOT_ID).all()), f"{where}: padding broken"
                if self.device.type == "cuda":
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
                    assert torch.equal(got, want), f"{where}: kernel != reference"
        e = self.engine
        if set(self.tables) == set(range(e.dcp_world_size)):
            for g, grp in enumerate(e.groups):
                if grp.mode is SlotMappingMode.NONE:
                    continue
                owners = sum(
                    (out[g][:num_tokens] != PAD_SLOT_ID).to(torch.int32) for out in outputs.values()
                )
                assert bool(owners.cpu().eq(1).all()), (
                    f"{grp.name}: a token is not owned by exactly one rank"
                )
        self.stats.checks += 1


# -- the runner -------------------------------------------------------------------------------------


def run_steps(sim: Simulator, steps: int) -> tuple[str | None, float, list[Any]]:
    """Run ``steps`` steps, then disarm the monitor: ``(error or None, seconds, runtime events)``.

    A compile the monitor refuses and a failed slot-mapping check end the run
    early as the error; the events are those the monitor saw during the run.
    """
    events_before = len(warmkit.monitor.events())
    error: str | None = None
    t0 = time.perf_counter()
    try:
        for i in range(steps):
            sim.step(i)
    except warmkit.RuntimeCompileError as exc:
        error = f"runtime compile refused by the monitor: {exc}"
    except AssertionError as exc:
        error = f"slot-mapping check failed: {exc}"
    seconds = time.perf_counter() - t0
    events = warmkit.monitor.events()[events_before:]
    warmkit.monitor.disarm()
    return error, seconds, events


def _multi_group(groups: tuple[Group, ...], **common: Any) -> MultiGroupBlockTable:
    return MultiGroupBlockTable(
        block_sizes=[g.block_size for g in groups],
        kernel_block_sizes=[g.kernel_block_size for g in groups],
        modes=[g.mode for g in groups],
        **common,
    )


def build_tables(
    engine: Engine, device: torch.device, registry: warmkit.WarmupRegistry
) -> tuple[dict[Any, MultiGroupBlockTable], int]:
    """Placeholder tables, then the real ones, for every simulated rank, under the registry.

    Returns:
        The real tables per rank (plus ``"replicated"``: the replicated groups' tables, when
        the engine has any), and how many block tables were built in all.
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
        tables: dict[Any, MultiGroupBlockTable] = {
            rank: _multi_group(engine.groups, dcp_rank=rank, **common) for rank in engine.dcp_ranks
        }
        if engine.replicated_groups:
            tables["replicated"] = _multi_group(
                engine.replicated_groups, **{**common, "dcp_world_size": 1}
            )
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
