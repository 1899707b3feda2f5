"""A warmup whose keys hang in worker processes, for the SIGINT tests.

``python -m core._sigint_proc_child DIR [stuck-scope]``: 4 workers, 24 keys
(2 that hang, 2 that ignore SIGTERM and hang, 20 that sleep). Writes the
workers' pids to ``DIR/pids`` and each compile's start to ``DIR/log``
(``_proc_kernels``), prints ``ready``, then runs ``warmkit warmup -j 4 --json``.
With ``stuck-scope`` the backend's compile scope never ends once entered (as a
backend whose own pool waits for a compile that never returns): only a
second Ctrl-C ends the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import warmkit
from warmkit._cli.commands import main
from warmkit._warmup import workers as _workers
from warmkit.testing import backend_override

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # see _sigint_child
    from core._proc_kernels import LOG_ENV, ProcBackend, ProcKernel

    out = sys.argv[1]
    os.environ[LOG_ENV] = os.path.join(out, "log")
    os.environ["WARMKIT_COMPILE_PROCESSES"] = "on"
    backend = ProcBackend()
    if sys.argv[2:] == ["stuck-scope"]:

        @contextlib.contextmanager
        def stuck(target, jobs):
            try:
                yield
            finally:
                threading.Event().wait()  # never set

        backend.compile_scope = stuck  # type: ignore[method-assign]
    reg = warmkit.WarmupRegistry()
    reg.add(ProcKernel, mode=["hang", "ignore_term"], n=[0, 1])
    reg.add(ProcKernel, mode="sleep", n=warmkit.IntRange(0, 20))
    manifest = reg.save(os.path.join(out, "manifest.json"))
    _workers.start_workers(4, modules=[])
    for future in [_workers._pool.schedule(_workers._ping) for _ in range(8)]:
        future.result()
    pids = [p.pid for p in _workers._processes(_workers._pool)]
    with open(os.path.join(out, "pids"), "w") as f:
        f.write(" ".join(map(str, pids)))
    print("ready", flush=True)
    with backend_override("fakeproc", backend):
        sys.exit(main(["warmup", str(manifest), "-j", "4", "--json"]))
