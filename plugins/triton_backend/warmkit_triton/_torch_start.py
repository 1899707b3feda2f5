"""torch's own one-time CUDA starts, made beside a device warmup's imports (``WARMKIT_TRITON_TORCH_START=1``).

Why: after a warmup that leaves 0 JIT events, the real model's first
``generate()`` still took 1.7-1.9 s against a steady 0.14 s on an H100, most of
it (on that host) inside torch's first ``scaled_dot_product_attention`` and matmul
calls: torch loading its own CUDA libraries and kernels on first use, not Triton's
JIT. How much those calls cost depends on the host: 1.4 s on one H100 host, 0.04-0.07
s each on another, where the thread gained nothing (docs/benchmarks.md). Those
costs are per process, and a device warmup spends seconds importing the kernels'
modules (torch, transformers, ...) on one thread while the device idles, so a
background thread can pay them then, instead of the first request paying them
after.

What it cannot take: most of the first ``generate()`` on session 24's host
(60 % of a native profile's samples) was torch's cuDNN attention building an
execution plan, NVRTC compile included, for each new shape; torch keys those
plans by shape and keeps them per thread, so calls on tiny tensors in another
thread leave them all to the first request (docs/performance.md).

What the thread does (:func:`warm`), on the device the warmup loads into, once
per float dtype (bf16, fp16, fp32): a matmul and a ``linear`` with a bias
(cuBLAS and cuBLASLt: the handle, its workspace, the first kernels) and
``scaled_dot_product_attention``, causal and one-query (the SDPA backend's
choice and the first load of its kernels), on tiny tensors. Only torch's public
ops, on the default stream of that device.

Why it is safe to run beside the imports: torch is fully imported, and its
CUDA started, before the thread starts (``_setup.settle_torch``, then the
scope's device), so the thread does not import torch while another thread
does; torch drops the GIL inside each op, which is what lets the work overlap.
The library starts are per process; the per-thread handles go back to torch's
handle pools when the thread ends, for the next thread that asks. The
warmup's end waits for the thread (the release), so none of it runs beside
the command's own code.

Why it is off by default: it allocates on the device (a few MiB in torch's
caching allocator, cuBLAS's workspace) and launches kernels there before the
command does; a command that sizes its memory from what is free at start (a
serving engine's KV-cache planner) sees that much less. It speeds up only what
it warms: a kernel of another shape or dtype may still load on first use.
A failure is logged once as a warning and changes nothing else: the warmup's
result does not depend on it. A device warmup that finds no GPU makes none,
and says so once per process (:func:`not_made`): a set variable is not
dropped in silence. An ahead-of-time warmup (for a target, a compile worker's
included) loads into no device, so the variable does not apply to it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["not_made", "start", "warm"]

logger = logging.getLogger(__name__)

_said: list[bool] = []  # [True] once not_made() has warned in this process
_said_lock = threading.Lock()


def warm(device: Any) -> None:
    """torch's one-time starts on ``device`` (a ``torch.device`` or its string): see the module docstring.

    Raises:
        Exception: whatever torch raises (no such device, out of memory).
    """
    import torch
    import torch.nn.functional as F

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        a = torch.ones(16, 16, dtype=dtype, device=device)
        a @ a
        F.linear(a, a, a[0])
        q = torch.ones(1, 2, 4, 64, dtype=dtype, device=device)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        F.scaled_dot_product_attention(q[:, :, :1], q, q)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def start(device: int) -> Callable[[], bool]:
    """Run :func:`warm` on CUDA device ``device`` in a background thread; returns its release.

    Returns at once. The release waits for the thread and returns whether
    the starts were made; where they failed, the reason is logged once, as a
    warning, by the thread.

    Args:
        device: the ordinal of the device the warmup loads into.
    """
    done: dict[str, float] = {}

    def run() -> None:
        t0 = time.perf_counter()
        try:
            warm(f"cuda:{int(device)}")
        except Exception as exc:  # noqa: BLE001 - a speed-up only: the warmup goes on without it
            logger.warning(
                "WARMKIT_TRITON_TORCH_START: torch's CUDA starts on device %s failed (%s: %s); "
                "the command pays them on first use, as without it. Unset "
                "WARMKIT_TRITON_TORCH_START to stop trying.",
                device,
                type(exc).__name__,
                exc,
            )
            return
        done["s"] = time.perf_counter() - t0

    thread = threading.Thread(target=run, name="warmkit-torch-start", daemon=True)
    thread.start()

    def release() -> bool:
        thread.join()
        if "s" in done:
            logger.debug("torch's CUDA starts on device %s made in %.3f s", device, done["s"])
        return "s" in done

    return release


def not_made() -> None:
    """Say, once per process, that the variable is set but a device warmup found no GPU.

    A setting that is silently not applied would read as a start that was
    made; it is said once, not per warmup.
    """
    with _said_lock:
        if _said:
            return
        _said.append(True)
    logger.warning(
        "WARMKIT_TRITON_TORCH_START is set, but no GPU is visible to this device warmup: "
        "torch's CUDA starts were not made"
    )
