"""Run by test_autotune.py with TRITON_INTERPRET=1: device tuning end to end on CPU tensors.

``python _autotune_interp.py STEP`` with STEP one of ``tune`` (a first process:
benchmarks and stores), ``restore`` (a new process on the same cache: uses
the stored winners), ``raw`` (a raw autotuned kernel under the monitor),
``drift`` (a key whose autotune key drifts, with verification on).
Prints one JSON line of facts for the test to assert on.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch
import triton
import triton.language as tl
from warmkit_triton import _autotune, _tuned

import warmkit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.triton_backend import _autotune_kernels as K

step = sys.argv[1]
facts: dict[str, object] = {}
benches: list[str] = []
_real_benchmark = _autotune.benchmark


def counting_benchmark(stack, candidates, *args, **kwargs):
    benches.append(stack.name)
    return _real_benchmark(stack, candidates, *args, **kwargs)


_autotune.benchmark = counting_benchmark  # counts benchmarks; the real one runs

if step in ("tune", "restore"):
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        K.TunedScale().register_warmup(n=[1000, 3000])
        K.SumInplace().register_warmup(n=200)
        K.HeurCopy().register_warmup(n=[100, 64])
    report = warmkit.warmup(
        warmkit.WarmupConfig.from_env(monitor="error", progress="off", jobs=2), reg
    )
    facts["tuning"] = {f"{e.kernel.rsplit('.', 1)[-1]} {e.key.n}": e.tuning for e in report.entries}
    facts["benchmarks_at_warmup"] = len(benches)
    if step == "tune":
        facts["restored"] = bool(torch.equal(K.SEEN["x"], K.SEEN["x0"]))
        facts["acc_after_bench"] = float(K.SEEN["acc"].item())
        facts["x_sum"] = float(K.SEEN["x0"].sum().item())
        facts["pre_hook_calls"] = K.SEEN["calls"]
    del benches[:]
    torch.manual_seed(1)
    for n in (1000, 3000):
        x = torch.randn(n)
        out = torch.empty(n)
        K.TunedScale()(x, out, 2.0)
        facts[f"scale_ok_{n}"] = bool(torch.allclose(out, 2 * x))
    x = torch.randn(200)
    x0 = x.clone()
    acc = torch.zeros(1)
    K.SumInplace()(x, acc)
    facts["sum_ok"] = bool(torch.allclose(acc, x0.sum(), atol=1e-3)) and bool(
        torch.allclose(x, 3 * x0)
    )
    for n in (100, 64):
        x = torch.randn(n)
        out = torch.empty(n)
        K.HeurCopy()(x, out)
        facts[f"copy_ok_{n}"] = bool(torch.equal(out, x))
    facts["benchmarks_at_runtime"] = len(benches)
    facts["events"] = [e.kind for e in warmkit.monitor.events()]
    facts["stored"] = len(_tuned.scan_results(triton.knobs.cache.dir))

elif step == "raw":
    # the interpreter has no GPU driver: Triton's do_bench cannot run, so a CPU timer stands in
    @triton.autotune(configs=K.CONFIGS, key=["n"], do_bench=_tuned._wall_clock_bench)
    @triton.jit
    def raw_tuned(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)

    x = torch.randn(300)
    out = torch.empty(300)
    grid = lambda m: (triton.cdiv(300, m["BLOCK"]),)
    warmkit.monitor.arm("error")
    try:
        raw_tuned[grid](x, out, 300)
    except warmkit.RuntimeCompileError as exc:
        facts["refused_kind"] = exc.kind
        facts["refused_key"] = repr(exc.key)
    facts["benchmarked_before_refusal"] = hasattr(raw_tuned, "bench_time") or bool(raw_tuned.cache)
    warmkit.monitor.arm("warn")
    raw_tuned[grid](x, out, 300)
    raw_tuned[grid](x, out, 300)  # tuned now: no second event
    facts["ok"] = bool(torch.allclose(out, x + 1))
    facts["events"] = [
        (e.kind, e.kernel.rsplit(".", 1)[-1], repr(e.key), e.seconds > 0)
        for e in warmkit.monitor.events()
    ]

elif step in ("raw-record", "raw-replay"):
    # raw-record: a warmup with WARMKIT_RECORD set, then a raw autotuned kernel tunes at runtime;
    # raw-replay: a new process warms that manifest, then the same call benchmarks nothing.
    if step == "raw-record":
        reg = warmkit.WarmupRegistry()
        with reg.activate():
            K.HeurCopy().register_warmup(n=64)
    else:
        reg = warmkit.WarmupRegistry.load(os.environ["MANIFEST"])
    report = warmkit.warmup(warmkit.WarmupConfig.from_env(monitor="warn", progress="off"), reg)
    facts["rows"] = [[e.kind, e.status, e.tuning] for e in report.entries]
    x = torch.randn(300)
    out = torch.empty(300)
    grid = lambda m: (triton.cdiv(300, m["BLOCK"]),)
    K.raw_tuned_add[grid](x, out, 300)
    K.raw_tuned_add[grid](x, out, 300)
    facts["ok"] = bool(torch.allclose(out, x + 1))
    facts["events"] = [(e.kind, e.kernel.rsplit(".", 1)[-1]) for e in warmkit.monitor.events()]
    facts["winner"] = K.raw_tuned_add.cache[(300, "torch.float32", "torch.float32")].kwargs

elif step == "drift":
    os.environ["WARMKIT_TRITON_VERIFY"] = "1"
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        K.DriftingScale().register_warmup(n=1000)
    warmkit.warmup(warmkit.WarmupConfig(monitor="error", progress="off"), reg)
    x = torch.randn(1000)
    out = torch.empty(1000)
    try:
        K.DriftingScale()(x, out)
    except _autotune.AutotuneKeyMismatchError as exc:
        facts["parameter"] = exc.parameter
        facts["expected"] = exc.expected
        facts["got"] = exc.got
        facts["message"] = str(exc)

print(json.dumps(facts))
