"""GPU proof of pinned identity (issue 27): record a real library on the H200, build on a CPU box, 0 compiles.

flash-linear-attention (``fla-core``) picks constexpr globals from the visible GPU
at import (``SOLVE_TRIL_DOT_PRECISION = tl.constexpr('tf32' if IS_TF32_SUPPORTED
else 'ieee')``), so a CPU build host imports other values than the GPU host.

Subcommands:

* ``workload``: import fla and run one small chunked gated-delta-rule forward on
  CUDA; prints ``COMPILES n`` (Triton compiles that were not disk hits, from
  Triton's compilation listener) and, under ``warmkit run``, ``JIT_EVENTS n``
  (the monitor's runtime JIT events).
* ``strip MANIFEST OUT``: a copy of a recording without its pins (the control:
  what a build did before pins).
* ``globals MANIFEST``: the pinned globals the recording holds (expect
  ``SOLVE_TRIL_DOT_PRECISION = 'tf32'`` among them).

The run (the build box needs the H200's CPython minor and Triton wheel, e.g.
Python 3.12 and triton==3.6.0, because Triton's cache key covers its wheel;
``warmkit bundle check`` says so by name otherwise)::

    # H200: record (fresh cache)
    export TRITON_CACHE_DIR=$(mktemp -d)
    warmkit record -o $OUT/fla_run.json -- python benchmarks/identity_gpu.py workload
    python benchmarks/identity_gpu.py globals $OUT/fla_run.json

    # CPU box (no GPU): build, with and without pins; check before rollout
    export TRITON_CACHE_DIR=$(mktemp -d)
    warmkit bundle build fla_run.json --target cuda:90 -o fla.wkb
    python benchmarks/identity_gpu.py strip fla_run.json fla_nopins.json
    TRITON_CACHE_DIR=$(mktemp -d) warmkit bundle build fla_nopins.json --target cuda:90 -o fla_nopins.wkb
    warmkit bundle check fla.wkb --manifest fla_run.json --target cuda:90   # expect 0 misses
    warmkit explain fla_run.json --bundle fla_nopins.wkb --target cuda:90   # names the global

    # H200, fresh process and cache, per bundle
    export TRITON_CACHE_DIR=$(mktemp -d)
    warmkit bundle check fla.wkb --manifest fla_run.json     # expect exit 0
    warmkit bundle install fla.wkb
    warmkit run -m fla_run.json -- python benchmarks/identity_gpu.py workload
    # expect: "COMPILES 0" and "JIT_EVENTS 0"; with fla_nopins.wkb: COMPILES > 0
"""

from __future__ import annotations

import json
import sys


def _workload() -> None:
    import torch
    from triton import knobs

    compiles: list[str] = []
    previous = knobs.compilation.listener

    def listener(**kw):  # chained: warmkit's own listener (under `warmkit run`) still runs
        if not kw.get("cache_hit"):
            compiles.append(str(kw.get("src")))
        if previous is not None:
            previous(**kw)

    knobs.compilation.listener = listener
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    torch.manual_seed(0)
    b, t, h, d = 1, 128, 2, 64
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(b, t, h, d, device=dev, dtype=dt)
    k = torch.nn.functional.normalize(
        torch.randn(b, t, h, d, device=dev, dtype=torch.float32), dim=-1
    ).to(dt)
    v = torch.randn(b, t, h, d, device=dev, dtype=dt)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, device=dev, dtype=torch.float32))
    beta = torch.rand(b, t, h, device=dev, dtype=dt).sigmoid()
    out, _ = chunk_gated_delta_rule(q, k, v, g, beta)
    torch.cuda.synchronize()
    print(f"OUTPUT {tuple(out.shape)} finite={bool(torch.isfinite(out).all())}")
    print(f"COMPILES {len(compiles)}")
    if "warmkit" in sys.modules:
        from warmkit import monitor

        events = monitor.events()  # every runtime JIT event: compile, disk hit, load, autotune
        print(f"JIT_EVENTS {len(events)} {sorted({e.kind for e in events})}")


def _strip(src: str, dst: str) -> None:
    import warmkit

    reg = warmkit.WarmupRegistry()
    for e in warmkit.read_recorded(src):
        spec = {k: v for k, v in e.spec.items() if k != "pins"}
        reg.add_recorded(
            warmkit.RecordedEntry.make(
                backend=e.backend, kind=e.kind, kernel=e.kernel, name=e.name, spec=spec,
                target=e.target, reason=e.reason,
            )
        )  # fmt: skip
    reg.save(dst)


def _globals(src: str) -> None:
    import warmkit

    seen = {}
    for e in warmkit.read_recorded(src):
        for rec in e.spec.get("pins", {}).get("globals", []):
            seen[f"{rec['module']}.{rec['name']}"] = rec.get("value", rec.get("repr"))
    print(json.dumps(seen, indent=1, sort_keys=True))


def main() -> None:
    cmd, *rest = sys.argv[1:] or ["workload"]
    if cmd == "workload":
        _workload()
    elif cmd == "strip":
        _strip(*rest)
    elif cmd == "globals":
        _globals(*rest)
    else:
        raise SystemExit(f"unknown subcommand {cmd!r}: workload | strip SRC DST | globals SRC")


if __name__ == "__main__":
    main()
