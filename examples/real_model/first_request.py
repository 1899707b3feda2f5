"""What the first ``generate()`` of gen.py pays that the second does not, and what a prelude removes.

After warmkit's warmup (0 JIT events) the first ``generate()`` still takes
1.7-1.9 s against a steady 0.14 s on an H100; on one host a py-spy profile put
~1.1 s of it inside the first ``scaled_dot_product_attention`` call, on another
this script found each op's first call at 0.04-0.07 s and the first
``generate()`` no shorter after them (docs/benchmarks.md). This script, without
warmkit, on a warm Triton cache, tells what that is: fresh processes in turns,

* ``plain``: gen.py's steps, timed: imports, the model's build, the first and
  the second ``generate()``, from the launch;
* ``prelude``: the same, with a background thread started right after ``import
  torch`` that makes torch's one-time CUDA starts on tiny tensors (a matmul and
  an SDPA call in bf16, fp16 and fp32) while the main thread imports transformers
  and Liger: if the first response comes sooner, the cost is per process, not
  per kernel, and a warmup can take it off the path;
* ``ops``: after the build, each op's first and second call on the model's own
  shapes (a bf16 matmul, SDPA of the prefill and of one decode step), then
  the first ``generate()``: which op pays what;
* ``ops_tiny``: the same after the prelude's tiny calls (in the main thread):
  how much of each op's first call the tiny calls remove.

Usage (a GPU host; gen.py's README for the wheels)::

    python3 examples/real_model/first_request.py --runs 5 --out out/first_request \
        [--profile PATH_TO_PY_SPY]     # also one native py-spy profile of ``plain``
        [--seconds S]                  # no turn that would end past S s (a device call's limit)

Prints a markdown table of medians; writes results.json and each process's log.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("plain", "prelude", "ops", "ops_tiny")
DEVICE = os.environ.get("FIRST_REQUEST_DEVICE", "cuda")  # "cpu": a dry run of the script itself


def prelude(device: str) -> None:
    """torch's one-time CUDA starts on tiny tensors: cuBLAS(Lt) and SDPA per float dtype.

    The ops of ``warmkit_triton._torch_start.warm`` (``WARMKIT_TRITON_TORCH_START``),
    copied rather than imported: this script measures a process without warmkit.
    """
    import torch
    import torch.nn.functional as F

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        a = torch.ones(16, 16, dtype=dtype, device=device)
        (a @ a).sum()
        F.linear(a, a, a[0])
        q = torch.ones(1, 2, 4, 64, dtype=dtype, device=device)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        F.scaled_dot_product_attention(q[:, :, :1], q, q)
    if device != "cpu":
        torch.cuda.synchronize(device)


def _timed(fn, sync) -> float:
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def child(mode: str) -> None:
    sys.path.insert(0, str(HERE))
    import gen

    launched = gen.launch_time()
    out: dict = {"mode": mode, "main_at_s": time.time() - launched}
    t0 = time.perf_counter()
    import torch

    out["torch_import_s"] = time.perf_counter() - t0
    thread = None
    if mode == "prelude":
        done: dict = {}

        def run() -> None:
            t = time.perf_counter()
            prelude(DEVICE if DEVICE == "cpu" else "cuda:0")
            done["s"] = time.perf_counter() - t
            done["end"] = time.time() - launched

        thread = threading.Thread(target=run, name="prelude", daemon=True)
        thread.start()
    import liger_kernel.transformers  # noqa: F401
    import transformers  # noqa: F401

    out["imports_s"] = time.perf_counter() - t0
    sync = torch.cuda.synchronize if DEVICE != "cpu" else (lambda: None)
    t = time.perf_counter()
    model = gen.build_model(DEVICE)
    sync()
    out["build_s"] = time.perf_counter() - t
    if mode.startswith("ops"):
        import torch.nn.functional as F

        if mode == "ops_tiny":
            out["tiny_s"] = _timed(lambda: prelude(DEVICE if DEVICE == "cpu" else "cuda:0"), sync)
        x = torch.randn(12, 512, dtype=torch.bfloat16, device=DEVICE)
        w = torch.randn(512, 512, dtype=torch.bfloat16, device=DEVICE)
        q = torch.randn(1, 8, 12, 64, dtype=torch.bfloat16, device=DEVICE)
        kv = torch.randn(1, 4, 12, 64, dtype=torch.bfloat16, device=DEVICE)
        q1 = q[:, :, -1:].contiguous()
        calls = {
            "matmul": lambda: F.linear(x, w),
            "sdpa_prefill": lambda: F.scaled_dot_product_attention(
                q, kv, kv, is_causal=True, enable_gqa=True
            ),
            "sdpa_decode": lambda: F.scaled_dot_product_attention(q1, kv, kv, enable_gqa=True),
        }
        for name, fn in calls.items():
            out[f"{name}_first_s"] = _timed(fn, sync)
            out[f"{name}_second_s"] = _timed(fn, sync)
    t = time.perf_counter()
    tokens = gen.generate(model, DEVICE)
    out["first_generate_s"] = time.perf_counter() - t
    out["first_response_s"] = time.time() - launched
    out["steady_s"] = _timed(lambda: gen.generate(model, DEVICE), sync)
    out["tokens"] = tokens
    if thread is not None:
        thread.join()
        out["prelude_s"], out["prelude_end_s"] = done.get("s"), done.get("end")
    print("RESULT " + json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("out/first_request"))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--profile", help="py-spy: one native profile of the plain mode")
    ap.add_argument(
        "--seconds", type=float, metavar="S",
        help="start no turn after the first that would end more than S seconds after the start, "
        "by the slowest turn so far (a device call's limit; each mode's N says how many ran)",
    )  # fmt: skip
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="first-request-")
    env = dict(os.environ, TRITON_CACHE_DIR=cache, HF_HUB_OFFLINE="1")
    me = [sys.executable, str(Path(__file__).resolve())]

    def one(mode: str, label: str, prefix: list[str] = ()) -> dict | None:
        env["REAL_MODEL_LAUNCH"] = repr(time.time())
        p = subprocess.run(
            [*prefix, *me, "--child", mode], check=False, env=env, capture_output=True, text=True
        )
        (args.out / f"{label}.log").write_text(p.stdout + "\n--- stderr\n" + p.stderr)
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        print(f"{label}: exit {p.returncode}, no RESULT; see {args.out / label}.log", flush=True)
        return None

    if one("plain", "prime") is None:  # Triton's cache warm, as in gen.py's baseline row
        raise SystemExit("first_request: the priming run failed; nothing measured")
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {m: [] for m in modes}
    started, slowest, missing = time.monotonic(), 0.0, 0
    for i in range(args.runs):
        turn = time.monotonic()
        if i and args.seconds is not None and turn - started + slowest > args.seconds:
            print(f"first_request: {i} turn(s) of {args.runs}: another would end past --seconds")
            break
        for m in modes:
            r = one(m, f"{m}-{i}")
            missing += r is None
            if r:
                results[m].append(r)
                print(m, i, {k: v for k, v in r.items() if k != "tokens"}, flush=True)
        slowest = max(slowest, time.monotonic() - turn)
    if args.profile:
        one(
            "plain",
            "profile",
            [args.profile, "record", "--native", "--idle", "--threads", "--rate", "250",
             "--format", "raw", "-o", str(args.out / "profile-native.txt"), "--"],
        )  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    keys = sorted({k for rs in results.values() for r in rs for k in r} - {"tokens", "mode"})
    print("| mode | N | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for m, rs in results.items():
        cells = []
        for k in keys:
            vals = [r[k] for r in rs if isinstance(r.get(k), float)]
            cells.append(f"{statistics.median(vals):.3f}" if vals else "")
        print(f"| {m} | {len(rs)} | " + " | ".join(cells) + " |")
    tokens = {json.dumps(r["tokens"]) for rs in results.values() for r in rs}
    print("tokens equal in every run:", len(tokens) == 1)
    if missing or len(tokens) != 1:  # a run without a result, or other tokens: not a result
        print(f"first_request: {missing} run(s) gave no RESULT; {len(tokens)} distinct TOKENS")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
