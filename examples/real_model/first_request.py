"""What the first ``generate()`` of gen.py pays that the second does not, and what a prelude removes.

After warmkit's warmup (0 JIT events) the first ``generate()`` still takes
1.7-2.2 s against a steady 0.14 s on an H100. Most of it is torch's cuDNN
attention (session 24, docs/benchmarks.md): a native py-spy profile of
``plain`` found 60 % of the first call's samples in cuDNN, 54 % in
``nvrtcCompileProgram`` under its execution plans' build (a JIT outside
Triton, which no warmkit monitor sees), and none in the second call's; with cuDNN's SDPA
turned off (``no_cudnn_sdpa``) the first call took 0.80 s against 1.93, with
the same tokens. By torch's source, its cuDNN attention keys those plans by
shape (the key length among it, which grows with each decoded token) and keeps
them per thread. This script, without warmkit, on a warm Triton cache, tells
what the first call pays: fresh processes in turns,

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
  how much of each op's first call the tiny calls remove;
* ``no_cudnn_sdpa`` (only with ``--modes``): ``plain`` with torch's cuDNN SDPA
  backend turned off (``torch.backends.cuda.enable_cudnn_sdp(False)``), so SDPA
  takes another backend's precompiled kernel. Another kernel may pick other
  tokens: this mode's tokens are compared with the other modes' and reported,
  not required equal.

Usage (a GPU host; gen.py's README for the wheels)::

    python3 examples/real_model/first_request.py --runs 5 --out out/first_request \
        [--profile PATH_TO_PY_SPY]     # also one native py-spy profile of ``plain``
        [--seconds S]                  # no turn that would end past S s (a device call's limit)
    python3 examples/real_model/first_request.py --read out/first_request/profile-native.txt

Prints a markdown table of medians; writes results.json and each process's log.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("plain", "prelude", "ops", "ops_tiny")
OTHER_KERNELS = ("no_cudnn_sdpa",)  # modes whose tokens may differ: not run unless named
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
    if mode == "no_cudnn_sdpa":
        torch.backends.cuda.enable_cudnn_sdp(False)
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


#: what a sample of a ``generate()`` call waits on, first match wins: (name, test of its frames)
PARTS = (
    (
        "cuDNN: NVRTC under its plans' build",
        lambda f: "cudnn" in f.lower() and "nvrtc" in f.lower(),
    ),
    ("cuDNN: the rest", lambda f: "cudnn" in f.lower()),
    (
        "Triton: first call (cache key, load, launcher)",
        lambda f: (
            "triton/" in f
            and any(n in f for n in ("_do_compile", "triton_key", "_init_handles", "make_launcher"))
        ),
    ),
    ("cuBLAS(Lt)", lambda f: "libcublas" in f),
)


def split_profile(lines) -> dict[str, dict[str, int]]:
    """The main thread's samples of the first and of the second ``generate()``, by part.

    ``lines``: py-spy's raw format (``thread;outermost..innermost frames count``) of one
    ``--profile`` run (``plain``). The first call is ``child``'s own call of gen.py's
    ``generate``, the second the one through ``_timed``. A sample is in the first of
    :data:`PARTS` whose test its whole stack passes, else its innermost frame's: libcuda,
    Python, or other native code.
    """
    out: dict[str, dict[str, int]] = {"first": {}, "second": {}}
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        # The main thread is the one that runs this script's ``<module>``: py-spy leaves some
        # of its samples unnamed (~3 % in session 25's profiles), so its name is not enough.
        if not count.isdigit() or not any(
            f.startswith("<module> (first_request.py") for f in frames
        ):
            continue
        at = next(
            (i for i, f in enumerate(frames) if f.startswith("child (first_request.py")), None
        )
        if at is None or at + 1 >= len(frames):
            continue
        if frames[at + 1].startswith("generate (gen.py"):
            call = "first"
        elif frames[at + 1].startswith("_timed (") and any(
            f.startswith("generate (gen.py") for f in frames[at + 1 :]
        ):
            call = "second"
        else:
            continue
        whole = ";".join(frames[at:])
        part = next((name for name, test in PARTS if test(whole)), None)
        if part is None:
            leaf = frames[-1]
            part = (
                "libcuda (innermost)"
                if "libcuda" in leaf
                else "Python (innermost)"
                if ".py:" in leaf
                else "other native (innermost)"
            )
        out[call][part] = out[call].get(part, 0) + int(count)
    return out


def read_profile(path: Path) -> str:
    """:func:`split_profile` of a profile file, as a markdown table."""
    with open(path) as f:
        parts = split_profile(f)
    first, second = parts["first"], parts["second"]
    excess = sum(first.values()) - sum(second.values())
    rows = [
        "| part | first generate() (samples) | second (samples) | first minus second | share of the difference |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(first.keys() | second.keys(), key=lambda n: -first.get(n, 0)):
        d = first.get(name, 0) - second.get(name, 0)
        share = f"{100 * d / excess:.0f} %" if excess > 0 else "-"
        rows.append(f"| {name} | {first.get(name, 0)} | {second.get(name, 0)} | {d} | {share} |")
    rows.append(f"| all | {sum(first.values())} | {sum(second.values())} | {excess} | |")
    return "\n".join(rows)


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
    ap.add_argument(
        "--read", type=Path, metavar="PROFILE",
        help="measure nothing: split a --profile run's profile-native.txt by part (a table)",
    )  # fmt: skip
    ap.add_argument("--child", choices=MODES + OTHER_KERNELS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read:
        print(read_profile(args.read))
        return
    if args.child:
        child(args.child)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="first-request-")
    # removed at exit, however the run ends
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
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
    tokens = {json.dumps(r["tokens"]) for m, rs in results.items() for r in rs if m in MODES}
    print("tokens equal in every run:", len(tokens) == 1)
    for m in results.keys() & OTHER_KERNELS:
        theirs = {json.dumps(r["tokens"]) for r in results[m]}
        print(f"{m}: tokens equal to the other modes': {theirs == tokens}")
    if missing or len(tokens) != 1:  # a run without a result, or other tokens: not a result
        print(f"first_request: {missing} run(s) gave no RESULT; {len(tokens)} distinct TOKENS")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
