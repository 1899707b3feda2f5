"""Run by test_kernel.py in a subprocess with TRITON_INTERPRET=1: TritonKernel end to end on CPU tensors."""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch
from warmkit_triton import InterpretedExecutor, TritonBackend

import warmkit
from warmkit import monitor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from triton_backend._kernels import Add, ScaleRows

assert TritonBackend().default_target() == "interpreter"
reg = warmkit.WarmupRegistry()
with reg.activate():
    Add().register_warmup(dtype="float32", n=[1000, 1024])
    ScaleRows().register_warmup(dtype="float32", n_cols=[48], stride=48)
report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), registry=reg)
print("statuses", sorted({e.status for e in report.entries}))
assert isinstance(Add().get_or_compile(Add().dispatch(n=1000)), InterpretedExecutor)

x = torch.arange(1000, dtype=torch.float32)
y = torch.ones(1000)
out = torch.zeros(1000)
Add()(x, y, out)
assert torch.equal(out, x + y), "Add gave the wrong result"

m = torch.arange(4 * 48, dtype=torch.float32).reshape(4, 48)
o = torch.zeros_like(m)
ScaleRows()(m, o, 0.5)
assert torch.allclose(o, m * 0.5), "ScaleRows gave the wrong result"
assert monitor.events() == (), monitor.events()

# A memoized dispatch returns one key object per input, and run() finds its executor by
# identity; an input of another specialization still reaches the monitor (exact, not stale).
assert Add().dispatch(dtype="float32", n=1000) is Add().dispatch(dtype="float32", n=1000)
for _ in range(3):
    out.zero_()
    Add()(x, y, out)
    assert torch.equal(out, x + y), "Add gave the wrong result on the identity path"
one = torch.ones(1)
try:
    Add()(one, one, torch.zeros(1))  # n=1: a specialization nobody warmed
except warmkit.RuntimeCompileError as exc:
    assert exc.kernel == Add.name, exc
else:
    raise AssertionError("n=1 launched without a runtime compile event")
print("interpreter ok")
