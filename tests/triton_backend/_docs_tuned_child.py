"""A workload that launches the docs' autotuned and heuristic functions raw, on a CPU host.

As ``_record_child``: ``fn.warmup`` under a minimal sm_90 driver fires the
hooks a real launch fires. ``python _docs_tuned_child.py N_HEUR...``: the
autotuned function for n=4096 (every config), the heuristic one for each n.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _docs_tuned as D
import triton
from _record_child import _Driver, _Tensor
from triton.runtime.driver import driver

if __name__ == "__main__":
    driver.set_active(_Driver())
    f32 = _Tensor("float32")
    D.tuned_scale_kernel.warmup(f32, f32, 4096, 2.0, grid=(1,))
    for n in map(int, sys.argv[1:]):  # what the heuristic layer would pass at a launch
        D.heur_copy_kernel.fn.warmup(f32, f32, n, BLOCK=triton.next_power_of_2(n), grid=(1,))
