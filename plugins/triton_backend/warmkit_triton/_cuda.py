"""The local device's target as Triton spells it, from libcuda, without importing torch.

Naming the target of a bundle install or a record through torch took 1.8 s of
its import on an H100, for a number libcuda gives in milliseconds. The driver
calls are warmkit's, shared by every DSL plugin (``warmkit._plugin.cuda``: also
the device warmup's early CUDA start, ``early_context``).
"""

from __future__ import annotations

from warmkit._plugin.contract import cuda_capability

__all__ = ["capability"]


def capability() -> int | None:
    """Device 0's compute capability as Triton spells it (90 on an H100), from libcuda; else None."""
    cc = cuda_capability()
    return None if cc is None else cc[0] * 10 + cc[1]
