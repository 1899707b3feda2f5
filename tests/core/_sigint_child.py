"""A warmup of 40 slow keys on 2 threads, for the SIGINT test: ``python -m core._sigint_child OUT``.

Each compile sleeps 0.4 s and appends a line to OUT when it *starts*, so the
test counts how many compiles began after the signal.
"""

from __future__ import annotations

import signal
import sys
import time

import attrs

import warmkit
from warmkit._cli.commands import main


class SlowKernel(warmkit.JitKernel["SlowKernel.CompileKey"]):
    name = "tests.SlowKernel"

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n: int):
        return self.CompileKey(n)

    def compile(self, key):
        with open(sys.argv[1], "a") as f:
            f.write(f"{time.monotonic()}\n")
        time.sleep(0.4)
        return object()


if __name__ == "__main__":
    # Started from a shell's background job (CI under `cmd &`), this process inherits an
    # ignored SIGINT; the test plays an operator's Ctrl-C, so take Python's default handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from core._sigint_child import SlowKernel as Importable  # not __main__'s: replayable

    reg = warmkit.WarmupRegistry()
    reg.add(Importable, n=warmkit.IntRange(0, 40))
    manifest = reg.save(sys.argv[1] + ".json")
    print("ready", flush=True)
    sys.exit(main(["warmup", str(manifest), "-j", "2", "--json"]))
