"""What ``warmkit run`` adds to a launch before the hook, and what CUDA's start costs, on this host.

The real model's budget (issue 30: the first response sooner under ``warmkit
run``) is a few tenths of a second, so its parts are measured on their own,
each in fresh processes (medians):

* ``python -c pass``: the interpreter's own start and exit;
* ``warmkit run -m MANIFEST -- true``: ``warmkit run``'s process (the
  interpreter, the CLI's imports, the ``exec``) before a command that is not
  Python, so no hook runs;
* ``import warmkit._cli.commands``: the CLI's imports alone;
* libcuda through ctypes: ``cuInit`` and device 0's primary context, each
  timed inside the process (what the hook's ``warmkit-cuda-start`` thread
  makes beside torch's import, and what the plain command pays in its
  ``torch.cuda.is_available()`` and its first ``.to("cuda")``).

Usage (a GPU host, warmkit installed; ``run_gpu.sh`` installs it into /tmp/site)::

    PYTHONPATH=/tmp/site python3 examples/real_model/start_costs.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUDA = """
import ctypes, time
t0 = time.perf_counter()
lib = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
rc = lib.cuInit(0)
t1 = time.perf_counter()
rc = rc or lib.cuDeviceGet(ctypes.byref(dev), 0) or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
t2 = time.perf_counter()
print(f"cuInit {t1 - t0:.3f} s, primary context {t2 - t1:.3f} s" if not rc else f"driver error {rc}")
"""


def commands(manifest: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "warmkit run -m MANIFEST -- true": [py, "-m", "warmkit", "run", "-m", str(manifest), "--", "true"],
        "import warmkit._cli.commands": [py, "-c", "import warmkit._cli.commands"],
        "libcuda: cuInit + primary context": [py, "-c", CUDA],
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=7, help="fresh processes per row (default 7)")
    p.add_argument("--manifest", type=Path, default=HERE / "run_h100.json")
    a = p.parse_args()
    print("| process | median (s) | min (s) | its own output, first run |\n|---|---|---|---|")
    for name, cmd in commands(a.manifest).items():
        seconds, first = [], None
        for _ in range(a.runs):
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            seconds.append(time.perf_counter() - t0)
            if first is None:  # what it printed; else why it failed (no libcuda on a CPU host)
                why = (r.stderr.strip().splitlines() or [""])[-1]
                first = r.stdout.strip() or (f"exit {r.returncode}: {why}" if r.returncode else "")
        print(f"| {name} | {statistics.median(seconds):.3f} | {min(seconds):.3f} | {first} |")


if __name__ == "__main__":
    main()
