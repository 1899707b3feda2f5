"""B9: record a real package's raw Triton kernels, replay them at the next start (goal: first pass <= 1.5x steady).

    python benchmarks/record_replay.py [--runs 5] [--out b9.json] [--tiny]

Needs a CUDA GPU and liger-kernel (a published package of raw ``@triton.jit``
kernels; ``pip download liger-kernel==0.8.5 --no-deps -d .whl`` on a host with
network, then install the wheel). Without them it says so and exits 0.

The workload (this script's ``--child``, which never imports warmkit) calls
liger's ``rms_norm_forward`` and ``swiglu_forward`` for bf16 and fp16 over
several hidden sizes and token counts: 16 raw specializations. It times its
first pass and the median of ``--runs`` steady passes. Processes, each fresh:

* **A0**: the workload alone, cold Triton cache (what recording is compared with);
* **A**: ``warmkit record -o A.json -- workload``, cold cache: records;
* **B**: ``warmkit run -m A.json --monitor error -- workload``, the warm disk
  cache of A: warms the manifest before the workload, which must see 0
  monitor events;
* **bundle**: ``warmkit bundle build A.json --target cuda:90`` with
  ``CUDA_VISIBLE_DEVICES=""`` (no GPU visible);
* **C**: the bundle installed into an empty cache (``WARMKIT_BUNDLE``), then
  ``warmkit run -m A.json``: 0 real compiles, in warmup or in the workload.

Reported: kernels and specializations recorded, first-pass latency of A0, A,
B and C against the steady pass, and the time recording adds per compile
(``(A - A0) / specializations``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MARK = "RECORD-REPLAY-CHILD "
GOAL = 1.5
HIDDEN = (1024, 2048, 4096, 8192)
INTERMEDIATE = (2816, 5632, 11008, 14336)
TOKENS = (1, 7, 32, 128)


def _missing() -> str | None:
    try:
        import torch
    except ImportError:
        return "record_replay.py: needs torch; nothing measured"
    if not torch.cuda.is_available():
        return "record_replay.py: needs a CUDA GPU (B9 times real launches); nothing measured"
    try:
        import liger_kernel.ops.rms_norm  # noqa: F401
    except ImportError as exc:
        return (
            f"record_replay.py: needs liger-kernel ({exc}); on a host with network: "
            "pip download liger-kernel==0.8.5 --no-deps -d .whl; nothing measured"
        )
    return None


# -- the workload (never imports warmkit) --------------------------------------------------------


def child(runs: int) -> int:
    import torch
    from liger_kernel.ops.rms_norm import rms_norm_forward
    from liger_kernel.ops.swiglu import swiglu_forward

    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for i, (h, m) in enumerate(zip(HIDDEN, INTERMEDIATE)):
            t = TOKENS[i % len(TOKENS)]
            x = torch.randn(t, h, device="cuda", dtype=dtype)
            w = torch.ones(h, device="cuda", dtype=dtype)
            a = torch.randn(t, m, device="cuda", dtype=dtype)
            b = torch.randn(t, m, device="cuda", dtype=dtype)
            cases.append((x, w, a, b))
    torch.cuda.synchronize()

    def one_pass() -> float:
        t0 = time.perf_counter()
        for x, w, a, b in cases:
            rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)
            swiglu_forward(a, b)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    first = one_pass()
    steady = statistics.median(one_pass() for _ in range(max(runs, 5)))
    wk = sys.modules.get("warmkit")  # imported by warmkit's startup hook, not by this code
    events = [] if wk is None else [(e.kernel, e.kind) for e in wk.monitor.events()]
    print(MARK + json.dumps({"first_s": first, "steady_s": steady, "events": events}))
    return 0


# -- the orchestrator ----------------------------------------------------------------------------


def _run(cmd: list[str], env: dict[str, str], limit: int = 600) -> tuple[dict[str, Any], str, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit, check=False)
    wall = time.perf_counter() - t0
    found = [line[len(MARK) :] for line in proc.stdout.splitlines() if line.startswith(MARK)]
    data = json.loads(found[-1]) if found else {}
    data["wall_s"] = wall
    return data, proc.stdout + proc.stderr, proc.returncode


def main() -> int:
    sys.path.insert(0, str(HERE))
    from _common import emit, parser

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        return child(args.runs)
    missing = None if not args.tiny else "record_replay.py --tiny: nothing measured"
    missing = missing or _missing()
    if missing:
        emit("B9-record-replay", {"skipped": missing, "goal_ratio": GOAL}, args.out, missing)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="warmkit-b9-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    work = [sys.executable, str(Path(__file__).resolve()), "--child", "--runs", str(args.runs)]
    wk = [sys.executable, "-m", "warmkit"]
    manifest = tmp / "A.json"
    res: dict[str, Any] = {"goal_ratio": GOAL}
    logs: dict[str, str] = {}

    def env(cache: str, **extra: str) -> dict[str, str]:
        return dict(base, TRITON_CACHE_DIR=str(tmp / cache), **extra)

    res["A0"], logs["A0"], _ = _run(work, env("cache-a0"))
    res["A"], logs["A"], rc_a = _run(
        [*wk, "record", "-o", str(manifest), "--json", "--", *work], env("cache-a")
    )
    try:
        summary = json.loads(logs["A"][logs["A"].index("{\n") : logs["A"].rindex("}") + 1])
    except ValueError:
        summary = {}
    res["recorded"] = summary
    res["B"], logs["B"], rc_b = _run(
        [*wk, "run", "-m", str(manifest), "--monitor", "error", "--", *work], env("cache-a")
    )
    wkb = tmp / "A.wkb"
    t0 = time.perf_counter()
    build = subprocess.run(
        [*wk, "bundle", "build", str(manifest), "--target", "cuda:90", "-o", str(wkb), "--json"],
        env=env("cache-build", CUDA_VISIBLE_DEVICES=""),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    res["bundle"] = {
        "rc": build.returncode,
        "seconds": time.perf_counter() - t0,
        "out": build.stdout[-2000:],
    }
    logs["bundle"] = build.stdout + build.stderr
    res["C"], logs["C"], rc_c = _run(
        [*wk, "run", "-m", str(manifest), "--monitor", "warn", "--", *work],
        env("cache-c", WARMKIT_BUNDLE=str(wkb)),
    )
    steady = statistics.median(res[k].get("steady_s", float("nan")) for k in ("A0", "A", "B", "C"))
    n = summary.get("specializations") or 0
    res["steady_s"] = steady
    for k in ("A0", "A", "B", "C"):
        res[k]["ratio"] = res[k].get("first_s", float("nan")) / steady if steady else None
    res["record_adds_per_compile_s"] = (
        (res["A"].get("first_s", 0) - res["A0"].get("first_s", 0)) / n if n else None
    )
    res["B_events"] = len(res["B"].get("events", []))
    res["C_real_compiles"] = sum(1 for _, kind in res["C"].get("events", []) if kind == "compile")
    res["C_warmup_line"] = [
        line for line in logs["C"].splitlines() if "warmkit run: warmed" in line
    ]
    res["rc"] = {"A": rc_a, "B": rc_b, "C": rc_c, "bundle": build.returncode}
    ok = (
        rc_a == rc_b == rc_c == build.returncode == 0
        and res["B_events"] == 0
        and res["C_real_compiles"] == 0
        and "(0 compiled," in " ".join(res["C_warmup_line"])
    )
    res["ok"] = ok
    res["goal_met"] = bool(res["B"].get("ratio") is not None and res["B"]["ratio"] <= GOAL)
    (tmp / "logs.json").write_text(json.dumps(logs, indent=1))
    lines = [
        f"B9 record/replay: {summary.get('kernels')} kernel(s), {n} specialization(s) recorded",
        f"steady pass {steady * 1e3:.2f} ms; first pass: "
        + ", ".join(
            f"{k} {res[k].get('first_s', float('nan')) * 1e3:.1f} ms ({res[k]['ratio']:.2f}x)"
            for k in ("A0", "A", "B", "C")
        ),
        f"goal B <= {GOAL}x steady: {'met' if res['goal_met'] else 'NOT met'}",
        f"recording adds {res['record_adds_per_compile_s'] or 0:.4f} s per compile",
        f"B events in error mode: {res['B_events']}; "
        + f"C real compiles: {res['C_real_compiles']} {res['C_warmup_line']}",
        f"bundle build (CUDA hidden): rc {build.returncode} in {res['bundle']['seconds']:.1f} s",
        f"all checks {'passed' if ok else 'FAILED'}; logs in {tmp / 'logs.json'}",
    ]
    if not ok:
        for k, text in logs.items():
            lines.append(f"--- {k} (tail)\n{text[-1500:]}")
    emit("B9-record-replay", res, args.out, "\n".join(lines))
    return 0 if ok else 1


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
