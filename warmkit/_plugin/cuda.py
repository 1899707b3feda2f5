"""The CUDA driver through ``libcuda`` (ctypes), for what a plugin needs before or beside torch.

* :func:`no_gpu_device`: a host with no GPU at all, known in a millisecond;
* :func:`cuda_capability`: device 0's compute capability without importing torch
  (naming the target of a bundle install or a record took 1.5-1.8 s of torch's
  import on an H100, for two numbers libcuda gives in milliseconds);
* :func:`local_capability`: the local device's, as a DSL plugin names its target:
  libcuda's before torch is imported, torch's current device's after;
* :func:`early_context`: a device warmup's CUDA start, in a background thread,
  while the process imports what it imports anyway.

Why a background thread: a device warmup's first module load creates the CUDA
context (``cuInit``, 0.1 s of the real model's warmup on an H100, then the
device's primary context), and without it that start waits for the imports
before it (torch's, the DSL's, the kernels' own modules: seconds of Python; 2.8 s
of TileLang's alone on an H100). ctypes drops the GIL for the length of each
foreign call, so the driver's start runs beside those imports instead of after
them. It is the same driver state the warmup would make: the primary context of
the device it loads into (Triton's loads, TileLang's and CuTe DSL's, and torch
retain that context, never another), made a little earlier. Only the warmup's
end waits for the thread; a load that comes first waits in the driver for the
context being made.

What it does not change: a process whose warmup loads kernels into a device has
a CUDA context either way, so a command that forks after it must use ``spawn``,
as before.

ctypes is imported inside each function: 2 ms of ``import warmkit`` otherwise (B7).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "cuda_capability",
    "early_context",
    "local_capability",
    "no_gpu_device",
    "start_context",
]

logger = logging.getLogger(__name__)

#: a GPU driver's device nodes: NVIDIA's (native; WSL2's /dev/dxg) and ROCm's
_GPU_NODES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")

# CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR (cuda.h)
_CC_MAJOR, _CC_MINOR = 75, 76


def _libcuda() -> Any:
    """The loaded ``libcuda.so.1``; raises ``OSError`` where there is none (no NVIDIA driver)."""
    import ctypes

    return ctypes.CDLL("libcuda.so.1")


@functools.cache
def no_gpu_device() -> bool:
    """Whether this host has no GPU at all: no NVIDIA or ROCm device node and no ``libcuda.so.1``.

    Known in about a millisecond, where asking torch (every plugin's way to name
    the local device) imports it first: 1.5 s of every ``bundle install``,
    ``explain`` or ``record`` on a CPU build host. True only when neither
    driver could be present; a host where it is False asks its DSL as before.
    """
    if any(os.path.exists(node) for node in _GPU_NODES):
        return False
    try:
        _libcuda()
    except OSError:
        return True
    return False


def cuda_capability() -> tuple[int, int] | None:
    """Device 0's compute capability, ``(9, 0)`` on an H100, from libcuda; else None.

    libcuda counts devices as torch does (``CUDA_VISIBLE_DEVICES``), and device 0
    is the current device of a process that has not imported torch; a plugin
    whose process has imported it asks torch, whose current device may differ.
    None without libcuda or a device (an AMD host, a CPU box).
    """
    if no_gpu_device():
        return None
    import ctypes

    try:
        lib = _libcuda()
        count, dev, major, minor = (ctypes.c_int() for _ in range(4))
        if lib.cuInit(0) or lib.cuDeviceGetCount(ctypes.byref(count)) or count.value < 1:
            return None
        if lib.cuDeviceGet(ctypes.byref(dev), 0):
            return None
        if lib.cuDeviceGetAttribute(
            ctypes.byref(major), _CC_MAJOR, dev
        ) or lib.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev):
            return None
    except (OSError, AttributeError):
        return None
    return major.value, minor.value


def local_capability() -> tuple[int, int] | None:
    """The compute capability of the device this process's kernels run on; None without one.

    Before torch is imported it is libcuda's device 0 (:func:`cuda_capability`),
    which is torch's current device until torch is imported and told otherwise:
    asking torch would import it, 1.5 s of a CPU host's command and of a GPU
    host's ``bundle install``. After, it is torch's current device. This never
    imports torch: ``import`` here only waits for an import another thread has
    begun, as torch's users' calls would.
    """
    if "torch" not in sys.modules:
        return cuda_capability()
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    except Exception as exc:  # noqa: BLE001 -- no driver, a broken install: no device
        logger.debug("no CUDA device through torch: %s", exc)
        return None
    return major, minor


def start_context(device: int) -> Callable[[], bool]:
    """Start the driver and ``device``'s primary context in a background thread; returns its release.

    Returns at once. The release, called when the warmup is over, waits for
    the thread and drops this retain, so the context then lives exactly as
    long as it would have without the early start (while the DSL's loads and
    torch hold it); it returns whether the context had been retained. Where
    there is no libcuda, or the driver refuses (no such device, a broken
    install), nothing is retained and the reason is logged at debug: the
    warmup's own first use of the device reports it, per key.

    Args:
        device: the ordinal of the device the warmup loads into (libcuda
            numbers devices as torch does).
    """
    import ctypes

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


def _torch_cuda_started() -> bool:
    """Whether torch's CUDA has started (or may have: torch half imported), so its device is known."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - torch still importing in another thread: leave it be
        return True


@contextlib.contextmanager
def early_context(device_warmup: bool) -> Iterator[None]:
    """A backend's ``compile_scope`` part: a device warmup's CUDA start beside its imports.

    In a device warmup (``device_warmup``) whose process has not started torch's
    CUDA, device 0's primary context is started in a background thread on entry
    (:func:`start_context`; device 0 is torch's current device until its CUDA
    has started) and released on exit. Otherwise it does nothing: an
    ahead-of-time warmup loads into no device, and where torch's CUDA has
    started the context exists.

    Args:
        device_warmup: whether the warmup loads its kernels into this host's device
            (target None, and not Triton's interpreter).
    """
    release = start_context(0) if device_warmup and not _torch_cuda_started() else None
    try:
        yield
    finally:
        if release is not None:
            release()
