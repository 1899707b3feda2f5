"""The CUDA driver through ``libcuda`` (ctypes), for what a warmup needs before or beside torch.

* :func:`capability`: device 0's compute capability without importing torch
  (naming the target of a bundle install or a record took 1.8 s of torch's
  import on an H100, for a number libcuda gives in milliseconds).
* :func:`start_context`: a device warmup's CUDA start, in a background thread,
  while the process imports what it imports anyway.

Why a background thread: a device warmup's first module load creates the CUDA
context (``cuInit``, 0.1 s of the real model's warmup on an H100, then the
device's primary context), and until now it waited for the imports before it
(torch's, then the kernels' own modules, seconds of Python). ctypes drops the
GIL for the length of each foreign call, so the driver's start runs beside
those imports instead of after them. It is the same driver state the warmup
would make: the primary context of the device it loads into (Triton's loads
and torch retain that context, never another), made a little earlier. Only the
warmup's end waits for the thread; a load that comes first waits in the driver for the
context being made.

What it does not change: a process whose warmup loads kernels into a device
has a CUDA context either way, so a command that forks after it must use
``spawn``, as before.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any

from warmkit._plugin.contract import cuda_capability

__all__ = ["capability", "start_context"]

logger = logging.getLogger(__name__)


def _libcuda() -> Any:
    """The loaded ``libcuda.so.1``; raises ``OSError`` where there is none (no NVIDIA driver)."""
    return ctypes.CDLL("libcuda.so.1")


def capability() -> int | None:
    """Device 0's compute capability as Triton spells it (90 on an H100), from libcuda; else None.

    ``warmkit._plugin.contract.cuda_capability``, which every DSL plugin shares.
    """
    cc = cuda_capability()
    return None if cc is None else cc[0] * 10 + cc[1]


def start_context(device: int) -> Callable[[], bool]:
    """Start the driver and ``device``'s primary context in a background thread; returns its release.

    Returns at once. The release, called when the warmup is over, waits for
    the thread and drops this retain, so the context then lives exactly as
    long as it would have without the early start (while Triton's loads and
    torch hold it); it returns whether the context had been retained. Where
    there is no libcuda, or the driver refuses (no such device, a broken
    install), nothing is retained and the reason is logged at debug: the
    warmup's own first use of the device reports it, per key.

    Args:
        device: the ordinal of the device the warmup loads into (libcuda
            numbers devices as torch does).
    """
    state: dict[str, Any] = {}

    def retain() -> None:
        try:
            lib = _libcuda()
            dev, ctx = ctypes.c_int(), ctypes.c_void_p()
            rc = lib.cuInit(0) or lib.cuDeviceGet(ctypes.byref(dev), int(device))
            rc = rc or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        except (OSError, AttributeError) as exc:
            logger.debug("no early CUDA start for device %s: %s", device, exc)
            return
        if rc:
            logger.debug("no early CUDA start for device %s: the driver returned %d", device, rc)
            return
        state["lib"], state["dev"] = lib, dev

    thread = threading.Thread(target=retain, name="warmkit-cuda-start", daemon=True)
    thread.start()

    def release() -> bool:
        thread.join()
        if "lib" not in state:
            return False
        lib = state.pop("lib")
        # cuda.h maps the name to _v2 since CUDA 11; the v1 symbol is kept for old binaries
        drop = getattr(lib, "cuDevicePrimaryCtxRelease_v2", None) or lib.cuDevicePrimaryCtxRelease
        drop(state["dev"])
        return True

    return release
