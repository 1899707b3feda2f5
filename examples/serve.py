#!/usr/bin/env python3
"""warmkit demo: a small model-runner simulation that warms up, then serves with 0 runtime compiles.

What it does, driven by ``examples/engine.toml``:

0. starts warmup's one-time setup in the background (``warmkit.prepare``);
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
    python examples/serve.py --ranks 2 [...]   # = examples/serve_ranks.py: a process per rank
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np
import torch
from engine import (
    Simulator,
    build_tables,
    describe_key,
    load_engine,
    percentile_ms,
    run_steps,
    warmup_config,
)
from warmkit_blocktable import ComputeSlotMappingKernel, SlotMappingMode

import warmkit

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = HERE / "engine.toml"
DEFAULT_MANIFEST = Path("out") / "serve-manifest.json"

log = logging.getLogger("serve")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--ranks" or a.startswith("--ranks=") for a in argv):
        from serve_ranks import main as serve_ranks  # one process per rank (docs/fleet.md)

        return serve_ranks(argv)
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
    parser.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="one process per rank instead (GPU rank r on cuda:r): runs examples/serve_ranks.py "
        "with these arguments (its --help lists them)",
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

    # 0. Start warmup's one-time setup (plugin loading, Triton's setup) in the background: it
    #    overlaps with building the engine (docs/performance.md). jobs=1: no worker processes,
    #    which pay for dozens of keys, not this engine's 4 (on the H200 host, 16 workers
    #    importing torch during this short startup made its warmup 3.0 s instead of 0.7 s).
    config = warmup_config(engine, target)
    if not args.no_warmup:
        warmkit.prepare(config, jobs=1)

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
    sim = Simulator(engine, tables, device, np.random.default_rng(seed))
    error, serve_s, runtime_events = run_steps(sim, steps)

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


def cli(argv: list[str] | None = None) -> int:
    """``main`` with one line, not a traceback, for a bad configuration, WARMKIT_* variable or target."""
    try:
        return main(argv)
    except ValueError as exc:  # every such error names what to fix (the file, variable or target)
        print(f"serve.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
