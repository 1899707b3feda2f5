"""The Triton backend's environment variables, in one table (``warmkit.EnvVar``, the core's rules).

``docs/configuration.md`` lists them with the core's; a test keeps it equal to this table.
"""

from __future__ import annotations

from typing import Any

from warmkit import EnvVar

__all__ = ["ENVIRONMENT", "get"]

ENVIRONMENT: dict[str, EnvVar] = {
    # Check every launch's argument specialization against its key's variant (slow; debugging).
    "WARMKIT_TRITON_VERIFY": EnvVar.flag(
        False,
        "TritonKernel.verify_launches for every kernel: 1 checks each launch's specialization.",
    ),
    # Device warmup runs each executor's launch path once with a null function (nothing runs).
    "WARMKIT_TRITON_PRIME": EnvVar.flag(True, "Launch priming at device warmup; 0 turns it off."),
    # The cross-process cache of triton_key()'s libtriton.so digest.
    "WARMKIT_TRITON_KEY_CACHE": EnvVar.flag(
        True, "Cache triton_key()'s libtriton.so digest across processes; 0 leaves Triton's own."
    ),
    # torch's one-time CUDA starts beside a device warmup's imports (_torch_start).
    "WARMKIT_TRITON_TORCH_START": EnvVar.flag(
        False,
        "Device warmup also makes torch's one-time CUDA starts (cuBLAS, SDPA) in a thread.",
    ),
}


def get(name: str) -> Any:
    """The parsed value of ``name`` (one of this table's) now, or its default.

    Raises:
        KeyError: not a variable of this table.
        ValueError: set to a value that does not parse (named in the message).
    """
    return ENVIRONMENT[name].read(name)
