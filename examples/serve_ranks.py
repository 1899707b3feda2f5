#!/usr/bin/env python3
"""warmkit two-rank demo: one process per GPU rank, one warmup each, nothing compiled twice.

Driven by ``examples/engine_ranks.toml``. For each configuration it starts one
process per rank (``torch.multiprocessing``, spawned). Every rank:

1. builds its block tables under a registry with its own DCP rank: the
   context-parallel groups' keys carry the rank (``TOTAL_CP_RANK``), so each
   rank has keys of its own; the replicated groups (DCP world size 1) have
   keys the ranks share;
2. waits for the other ranks (the only synchronisation: a start-up barrier),
   then warms up, with Triton's compile listener counting this process's real
   compiles;
3. serves N steps (default 1,000) with the monitor in ``error`` mode and
   checks the slot mappings on sampled steps.

The configurations (``--configs``, all by default):

``cold``    no store, a cache directory per rank: each rank compiles every key it
            needs (the contrast);
``shared``  one ``TRITON_CACHE_DIR`` for every rank: single-flight per key (file locks);
``store``   a cache directory per rank, as on separate hosts, and the store at
            ``--store`` (a real Redis: ``redis://127.0.0.1:PORT``, or a directory; it must
            be empty, e.g. a fresh server: a rerun refuses a filled one and says so, and
            ``warmkit cache clear-store URL`` empties it): fetch before compiling, one lease per key;
``warm``    a restart of every rank on the ``shared`` configuration's cache.

Checked on every rank of every configuration, and the exit status says whether all held:
0 runtime compile events; the sampled slot mappings (padding; kernel == reference
on a GPU; across the ranks, one owner per token of the context-parallel groups,
the same slots for the replicated ones); ``warmkit cache verify`` passes on every
cache directory used; and the compile accounting: ``cold``, each rank compiled
each of its keys; ``shared`` and ``store``, every key compiled once in total (the
listeners of all processes agree with the reports), every other rank's copy
``waited`` or ``cached`` (shared) or ``fetched`` (store); ``warm``, 0 compiles.

Without ``--ranks`` CUDA GPUs (or with ``--device cpu``) CUDA is hidden from the
ranks: they compile ahead of time for the declared target (``cuda:90``) and serve
through the torch reference on the CPU, which launches no Triton kernel; the
compile-once accounting is the same, "0 runtime compiles" there says nothing
about a GPU. NVLink multicast stays off in every process (``NO_MULTICAST``).

Usage::

    python examples/serve_ranks.py [--ranks 2] [--steps 1000] [--store redis://127.0.0.1:PORT]
                                   [--configs cold,shared,store,warm] [--device auto|cuda|cpu]
                                   [--target cuda:90] [--work DIR] [--json PATH] [--seed N]
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch
import torch.multiprocessing as mp
from engine import (
    Simulator,
    build_tables,
    describe_key,
    load_engine,
    percentile_ms,
    run_steps,
    warmup_config,
)
from torch.multiprocessing.spawn import ProcessException
from warmkit_blocktable import PAD_SLOT_ID, ComputeSlotMappingKernel

import warmkit

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = HERE / "engine_ranks.toml"
CONFIGS = ("cold", "shared", "store", "warm")
#: NVLink multicast off (the device machines' rule), in this process and every rank's.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
#: How a rank that did not compile a key may have got it, per configuration.
LOADED = {"shared": {"waited", "cached"}, "store": {"fetched"}}
BARRIER_TIMEOUT_S = 600


# -- one rank (a spawned process) -----------------------------------------------------------------


class RankSimulator(Simulator):
    """A ``Simulator`` that also keeps, per sampled step, what the other ranks must agree with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.samples: list[dict[str, Any]] = []

    def _check(self, num_reqs: int, num_tokens: int, outputs: dict[Any, list[Any]]) -> None:
        super()._check(num_reqs, num_tokens, outputs)
        owned, replicated = [], []
        for name, out in outputs.items():
            for slots in out:
                if slots is None:
                    continue
                got = slots[:num_tokens].cpu()
                if name == "replicated":
                    replicated.append(hashlib.sha256(got.numpy().tobytes()).hexdigest())
                else:  # this rank's context-parallel groups: which tokens it owns
                    bits = np.packbits((got != PAD_SLOT_ID).numpy())
                    owned.append(base64.b64encode(bits.tobytes()).decode())
        self.samples.append(
            {
                "step": len(self.stats.step_s),
                "num_tokens": num_tokens,
                "owned": owned,
                "replicated": replicated,
            }
        )


def rank_main(rank: int, spec: dict[str, Any], barrier: Any) -> None:
    """One rank: build, register, wait for the others, warm up, serve, write ``spec["out"][rank]``."""
    os.environ.update(NO_MULTICAST)
    os.environ["TRITON_CACHE_DIR"] = spec["caches"][rank]
    from triton import knobs  # this process's real compiles (cache misses of triton.compile)

    compiles: list[str] = []
    knobs.compilation.listener = lambda **kw: (
        None if kw["cache_hit"] else compiles.append(kw["metadata"]["hash"])
    )
    engine = load_engine(Path(spec["config"]))
    engine = dataclasses.replace(engine, dcp_world_size=spec["ranks"], dcp_ranks=(rank,))
    if spec["cuda"]:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)  # the reference: small tensors, ranks share the cores
        device = torch.device("cpu")

    registry = warmkit.WarmupRegistry()
    tables, _built = build_tables(engine, device, registry)
    keys = registry.plan().get(ComputeSlotMappingKernel.name, [])
    config = attrs.evolve(
        warmup_config(engine, spec["target"]),
        monitor="error",
        progress="off",
        store=spec["store"],
        store_required=spec["store"] is not None,
    )
    barrier.wait(timeout=BARRIER_TIMEOUT_S)  # start-up sync: every rank warms up at once
    released = time.time()
    report = warmkit.warmup(config, registry=registry)
    warmed = time.time()

    sim = RankSimulator(engine, tables, device, np.random.default_rng(spec["seed"]))
    error, serve_s, events = run_steps(sim, spec["steps"])
    s = sim.stats
    result = {
        "rank": rank,
        "pid": os.getpid(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if spec["cuda"] else None,
        "implementation": sorted(
            {t.implementation for mg in tables.values() for t in mg if t.slot_mapping is not None}
        ),
        "target": config.target,
        "cache_dir": os.environ["TRITON_CACHE_DIR"],
        "store": spec["store"],
        "env": {k: os.environ.get(k) for k in NO_MULTICAST},
        "keys": [
            {
                "key": repr(e.key),
                "describe": describe_key(e.key),
                "status": e.status,
                "seconds": round(e.seconds, 4),
            }
            for e in report.entries
        ],
        "registered_keys": len(keys),
        "compiles": compiles,
        "released": released,
        "warmed": warmed,
        "warmup_s": round(report.seconds, 4),
        "totals": report.totals(),
        "steps": len(s.step_s),
        "serve_s": round(serve_s, 4),
        "tokens": s.tokens,
        "checked_steps": s.checks,
        "runtime_compile_events": len(events),
        "runtime_compile_event_details": [
            {"kernel": ev.kernel, "key": repr(ev.key), "kind": ev.kind} for ev in events
        ],
        "step_latency_ms": {
            "first": round(s.step_s[0] * 1e3, 4) if s.step_s else None,
            "p50": round(percentile_ms(s.step_s, 50), 4),
            "p99": round(percentile_ms(s.step_s, 99), 4),
        },
        "samples": sim.samples,
        "error": error,
    }
    Path(spec["out"][rank]).write_text(json.dumps(result) + "\n")


# -- the parent: run the configurations, check them -------------------------------------------------


def run_config(name: str, caches: list[Path], store: str | None, base: dict[str, Any]) -> dict:
    """Start one process per rank with ``caches[rank]``; their results, or why they failed."""
    work = Path(base["work"]) / name
    work.mkdir(parents=True)
    ranks = base["ranks"]
    spec = {
        **base,
        "caches": [str(c) for c in caches],
        "store": store,
        "out": [str(work / f"rank{r}.json") for r in range(ranks)],
    }
    barrier = mp.get_context("spawn").Barrier(ranks)
    t0 = time.perf_counter()
    try:
        mp.start_processes(
            rank_main, args=(spec, barrier), nprocs=ranks, join=True, start_method="spawn"
        )
    except ProcessException as exc:
        return {"error": f"a rank failed: {exc}"[-6000:], "wall_s": time.perf_counter() - t0}
    results = [json.loads(Path(p).read_text()) for p in spec["out"]]
    return {
        "wall_s": round(time.perf_counter() - t0, 3),
        "warmup_wall_s": round(
            max(r["warmed"] for r in results) - min(r["released"] for r in results), 4
        ),
        "ranks": results,
        "verify": [verify_cache(Path(c)) for c in sorted(set(spec["caches"]))],
    }


def verify_cache(cache: Path) -> dict[str, Any]:
    """``warmkit cache verify`` on one cache directory (the real CLI, in a fresh process)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warmkit",
            "cache",
            "verify",
            "--cache-dir",
            f"triton={cache}",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    try:
        entries = json.loads(proc.stdout)["triton"]["entries"]
    except (ValueError, KeyError, TypeError):
        entries = None
    return {
        "cache": str(cache),
        "rc": proc.returncode,
        "entries": entries,
        "output": (proc.stdout + proc.stderr)[-2000:],
    }


def _unpack(b64: str, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(base64.b64decode(b64), dtype=np.uint8))[:n]


def check_slots(results: list[dict[str, Any]]) -> tuple[bool, str]:
    """Across the ranks: one owner per token of each context-parallel group, equal replicated slots."""
    per_rank = [{s["step"]: s for s in r["samples"]} for r in results]
    steps = sorted(set.intersection(*(set(p) for p in per_rank)))
    if not steps:
        return False, "no sampled step common to every rank"
    for step in steps:
        samples = [p[step] for p in per_rank]
        n = samples[0]["num_tokens"]
        if any(
            s["num_tokens"] != n or len(s["owned"]) != len(samples[0]["owned"]) for s in samples
        ):
            return False, f"step {step}: the ranks scheduled different batches"
        for g in range(len(samples[0]["owned"])):
            owners = sum(_unpack(s["owned"][g], n).astype(np.int32) for s in samples)
            if n and not (owners == 1).all():
                bad = int(np.flatnonzero(owners != 1)[0])
                return False, f"step {step} group {g}: token {bad} has {owners[bad]} owners"
        if any(s["replicated"] != samples[0]["replicated"] for s in samples):
            return False, f"step {step}: the replicated groups' slots differ between ranks"
    return True, f"{len(steps)} sampled steps agree across {len(results)} ranks"


def check_config(name: str, run: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """``(check, passed, detail)`` of one configuration's run."""
    if "error" in run:
        return [("ranks ran", False, run["error"])]
    ranks = run["ranks"]
    checks = []
    events = [r["runtime_compile_events"] for r in ranks]
    checks.append(("0 runtime compile events", not any(events), f"per rank {events}"))
    errors = [r["error"] for r in ranks if r["error"]]
    checked = [r["checked_steps"] for r in ranks]
    checks.append(
        (
            "sampled slot mappings",
            not errors and min(checked) > 0,
            "; ".join(errors) or f"checked steps per rank {checked}",
        )
    )
    checks.append(("slot mappings across ranks", *check_slots(ranks)))
    keys = [[k["key"] for k in r["keys"]] for r in ranks]
    distinct = sorted(set().union(*keys))
    compiles = [len(r["compiles"]) for r in ranks]
    hashes = [h for r in ranks for h in r["compiles"]]
    statuses = {
        k: [kk["status"] for r in ranks for kk in r["keys"] if kk["key"] == k] for k in distinct
    }
    if name == "cold":
        ok = compiles == [len(k) for k in keys] and all(
            kk["status"] == "compiled" for r in ranks for kk in r["keys"]
        )
        detail = f"listener compiles per rank {compiles}, keys per rank {[len(k) for k in keys]}"
    elif name == "warm":
        ok = not any(compiles) and all(st == "cached" for s in statuses.values() for st in s)
        detail = f"listener compiles per rank {compiles}; every key cached: {ok}"
    else:
        once = [k for k, s in statuses.items() if s.count("compiled") == 1]
        loaded = all(st in LOADED[name] for s in statuses.values() for st in s if st != "compiled")
        ok = (
            len(once) == len(distinct)
            and sum(compiles) == len(distinct)
            and len(set(hashes)) == len(hashes)
            and loaded
        )
        detail = (
            f"{len(distinct)} distinct keys, {len(once)} compiled exactly once; listener compiles "
            f"per rank {compiles} (total {sum(compiles)}); other copies "
            f"{'/'.join(sorted(LOADED[name]))}: {loaded}"
        )
    checks.append(("compile accounting", ok, detail))
    for v in run["verify"]:
        # every key of the ranks on this cache must be an entry there, and verify clean
        expect = len({k for r, kk in zip(ranks, keys) if r["cache_dir"] == v["cache"] for k in kk})
        has = v["entries"] is not None and v["entries"] >= expect
        checks.append(
            (
                f"warmkit cache verify {Path(v['cache']).parent.name}/{Path(v['cache']).name}",
                v["rc"] == 0 and has,
                f"rc {v['rc']}, {v['entries']} entries (>= {expect} keys)",
            )
        )
    return checks


def summarize(name: str, run: dict[str, Any]) -> dict[str, Any]:
    """Per-rank statuses, compiles and latencies, and the shared/own split of the keys."""
    if "error" in run:
        return {"error": run["error"]}
    ranks = run["ranks"]
    keys = [{k["key"] for k in r["keys"]} for r in ranks]
    shared = set.intersection(*keys)
    return {
        "wall_s": run["wall_s"],
        "warmup_wall_s": run["warmup_wall_s"],
        "distinct_keys": len(set().union(*keys)),
        "shared_keys": len(shared),
        "own_keys_per_rank": [len(k - shared) for k in keys],
        "compiles_total": sum(len(r["compiles"]) for r in ranks),
        "per_rank": [
            {
                "rank": r["rank"],
                "device": r["device"],
                "gpu": r["gpu"],
                "implementation": r["implementation"],
                "keys": len(r["keys"]),
                "compiles": len(r["compiles"]),
                "compile_hashes": r["compiles"],
                **{s: r["totals"].get(s, 0) for s in ("compiled", "cached", "waited", "fetched")},
                "shared_key_statuses": sorted(k["status"] for k in r["keys"] if k["key"] in shared),
                "warmup_s": r["warmup_s"],
                "first_step_ms": r["step_latency_ms"]["first"],
                "p50_ms": r["step_latency_ms"]["p50"],
                "p99_ms": r["step_latency_ms"]["p99"],
                "runtime_compile_events": r["runtime_compile_events"],
                "env": r["env"],
            }
            for r in ranks
        ],
    }


def print_config(name: str, summary: dict[str, Any], checks: list[tuple[str, bool, str]]) -> None:
    print(f"\n== {name} " + "=" * (74 - len(name)))
    if "error" not in summary:
        print(
            f"keys: {summary['distinct_keys']} distinct, {summary['shared_keys']} shared, own per "
            f"rank {summary['own_keys_per_rank']}; real compiles in all ranks: "
            f"{summary['compiles_total']}; warmup wall {summary['warmup_wall_s']:.2f} s"
        )
        print(
            "rank  keys  compiled  cached  waited  fetched  listener  warmup s  first ms"
            "   p50 ms   p99 ms  events"
        )
        for r in summary["per_rank"]:
            print(
                f"{r['rank']:>4}  {r['keys']:>4}  {r['compiled']:>8}  {r['cached']:>6}  "
                f"{r['waited']:>6}  {r['fetched']:>7}  {r['compiles']:>8}  {r['warmup_s']:>8.3f}  "
                f"{r['first_step_ms']:>8.3f}  {r['p50_ms']:>7.3f}  {r['p99_ms']:>7.3f}  "
                f"{r['runtime_compile_events']:>6}"
            )
    for check, ok, detail in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {check}: {detail}")


def stored_entries(url: str) -> int:
    """How many entries the store at ``url`` holds already."""
    fleet = warmkit.Fleet(url, store_required=True)
    try:
        return sum(1 for _ in fleet.store.keys())  # noqa: SIM118 - a Store, not a dict
    finally:
        fleet.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="warmkit two-rank demo: one process per GPU rank, compile each key once"
    )
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="engine TOML (default: %(default)s)"
    )
    parser.add_argument("--ranks", type=int, default=2, help="processes = DCP ranks (default 2)")
    parser.add_argument("--steps", type=int, default=None, help="steps per rank (default: TOML's)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: TOML's)")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma-separated, run in this order (default: %(default)s; 'store' needs --store, "
        "'warm' needs 'shared')",
    )
    parser.add_argument(
        "--store",
        default=None,
        help="the store URL of the 'store' configuration, e.g. redis://127.0.0.1:6379/0; "
        "it must hold none of these kernels",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="auto: CUDA when there are --ranks GPUs, else CPU with CUDA hidden",
    )
    parser.add_argument("--target", default=None, help="default: the GPU, or cuda:90 on CPU")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="an absent or empty directory for the caches "
        "and results (default: a temporary one, removed after)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)

    engine = load_engine(args.config)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown or not configs:
        parser.error(f"--configs: unknown {unknown}; choose from {', '.join(CONFIGS)}")
    if "store" in configs and not args.store:
        parser.error("the 'store' configuration needs --store URL (e.g. a loopback redis-server)")
    if "store" in configs and (held := stored_entries(args.store)):
        # The check is "each key compiled exactly once in total": a store filled by an earlier
        # run serves every key (fetched, 0 compiled) and the check would fail without saying why.
        parser.error(
            f"the store {args.store} already holds {held} entr(ies), from an earlier run; the "
            "'store' configuration measures compiles into an empty store: clear it with "
            f"`warmkit cache clear-store {args.store}`, or give another --store (a Redis db number)"
        )
    if "warm" in configs and (
        "shared" not in configs or configs.index("warm") < configs.index("shared")
    ):
        parser.error("'warm' restarts on the 'shared' configuration's cache: run 'shared' first")
    if args.ranks < 1:
        parser.error("--ranks must be >= 1")
    gpus = torch.cuda.device_count() if args.device != "cpu" else 0
    cuda = args.device == "cuda" or (args.device == "auto" and gpus >= args.ranks)
    if cuda and gpus < args.ranks:
        parser.error(f"--device cuda: {args.ranks} ranks need {args.ranks} GPUs, found {gpus}")
    if args.work is not None and args.work.exists() and any(args.work.iterdir()):
        parser.error(f"--work {args.work} is not empty (the caches must start empty)")
    work = args.work or Path(tempfile.mkdtemp(prefix="warmkit-ranks-"))
    work.mkdir(parents=True, exist_ok=True)

    os.environ.update(NO_MULTICAST)  # inherited by every spawned rank, and set again there
    os.environ["WARMKIT_COMPILE_PROCESSES"] = "off"  # the listener counts this process's compiles
    if not cuda:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    target = args.target or (None if cuda else str(engine.warmup.get("target", "cuda:90")))
    base = {
        "config": str(args.config.resolve()),
        "ranks": args.ranks,
        "cuda": cuda,
        "target": target,
        "steps": args.steps
        if args.steps is not None
        else int(engine.simulation.get("steps", 1000)),
        "seed": args.seed if args.seed is not None else int(engine.simulation.get("seed", 0)),
        "work": str(work),
    }
    print("=" * 78)
    if cuda:
        print(f"{args.ranks} ranks on {args.ranks} of this host's {gpus} GPUs (rank r on cuda:r):")
        print("every step launches the compiled Triton slot-mapping kernels on the rank's GPU.")
    else:
        print(
            f"NO GPU for {args.ranks} ranks: CUDA is hidden from them. They compile ahead of time"
        )
        print(f"for {target} and serve through the torch REFERENCE on the CPU: no Triton kernel is")
        print("launched, so '0 runtime compiles' says nothing about a GPU; the compile-once")
        print("accounting across the ranks is the real thing.")
    print(f"configurations {', '.join(configs)}; {base['steps']} steps per rank; work {work}")
    print("=" * 78, flush=True)

    caches = {
        "cold": [work / "cold" / f"cache-rank{r}" for r in range(args.ranks)],
        "shared": [work / "shared" / "cache"] * args.ranks,
        "store": [work / "store" / f"cache-rank{r}" for r in range(args.ranks)],
        "warm": [work / "shared" / "cache"] * args.ranks,
    }
    doc: dict[str, Any] = {
        "program": "examples/serve_ranks.py",
        "device": "cuda" if cuda else "cpu",
        "gpus": gpus,
        "ranks": args.ranks,
        "steps": base["steps"],
        "target": target or "this GPU",
        "store": args.store,
        "torch": torch.__version__,
        "env": dict(NO_MULTICAST),
        "configs": {},
    }
    all_ok = True
    try:
        for name in configs:
            t0 = time.perf_counter()
            run = run_config(name, caches[name], args.store if name == "store" else None, base)
            checks = check_config(name, run)
            summary = summarize(name, run)
            summary["checks"] = [{"check": c, "ok": ok, "detail": d} for c, ok, d in checks]
            summary["ok"] = all(ok for _, ok, _ in checks)
            summary["seconds"] = round(time.perf_counter() - t0, 2)
            all_ok &= summary["ok"]
            doc["configs"][name] = summary
            print_config(name, summary, checks)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    doc["ok"] = all_ok
    print("\n" + ("ALL CHECKS PASSED" if all_ok else "SOME CHECKS FAILED"))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"summary JSON: {args.json}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
