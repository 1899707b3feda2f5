"""How the committed ``run.json`` was first made on a CPU host (no GPU), until the H200 recording replaces it.

``warmkit record`` sees Triton's compiles through Triton's own hooks, which a
CPU host never reaches: with no GPU driver Triton cannot even pick a target.
This script runs gen.py's real model (same config, same prompt, same
``generate()``) on CPU tensors with two stand-ins, so that every Liger kernel
launch becomes a real Triton compile for ``cuda:90`` that fires those hooks:

* a minimal driver that reports sm_90 (as tests/triton_backend/_record_child.py
  does), so Triton compiles for the H100/H200 target;
* ``JITFunction.run`` forced to ``warmup=True``: compile, never launch. The
  kernels' outputs stay uninitialized, so the generated tokens are meaningless
  here; the shapes, dtypes, strides and constexprs of every launch are the
  model's own, which is what a recording keeps.

Usage (transformers and liger-kernel importable; nothing is downloaded)::

    TRITON_CACHE_DIR=$(mktemp -d) warmkit record -o examples/real_model/run.json \\
        -- python examples/real_model/record_cpu.py

What differs from a GPU recording: the pointers are CPU allocations (torch
aligns both to at least 16 bytes, so Triton's alignment specialization agrees)
and the Triton is this host's, not the GPU host's. The GPU recording
(``bench.py`` writes it) is the one to trust; ``warmkit bundle check`` against
it says whether a bundle built from this one would be complete.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _Sm90Driver:
    """Only what ``JITFunction.run`` asks a driver for before it compiles."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def _compile_only() -> None:
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    driver.set_active(_Sm90Driver())
    run = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        return run(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = compile_only


def main() -> None:
    import torch

    if torch.cuda.is_available():
        raise SystemExit("record_cpu.py: a GPU is visible; record gen.py itself (README.md)")
    _compile_only()
    import gen

    model = gen.build_model("cpu")
    tokens = gen.generate(model, "cpu")
    print(
        f"generated {len(tokens)} tokens on CPU (values meaningless: kernels compiled, never run)"
    )


if __name__ == "__main__":
    main()
