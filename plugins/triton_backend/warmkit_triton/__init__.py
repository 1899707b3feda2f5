"""warmkit's Triton backend: exact specialization, device and ahead-of-time warmup, runtime monitor.

Public names:

* :class:`TritonKernel`: the kernel contract for a ``@triton.jit`` function;
* :func:`specialization_rep`: the representative of an int's Triton specialization class;
* :class:`WarmupTensor`: a storage-less tensor descriptor for warmup arguments;
* :class:`TritonBackend`: the ``triton`` entry point of ``warmkit.backends``;
* :class:`TritonExecutor`, :class:`AotArtifact`: what a compile returns on a
  GPU and ahead of time;
* :func:`check_aot_cache`, :func:`validity_record`, :func:`parse_target`:
  ahead-of-time cache helpers;
* :class:`TritonNotInstalledError`, :class:`SpecializationMismatchError`.

Importing this package does not import Triton.
"""

from __future__ import annotations

import logging

from . import _keycache, _triton_api
from ._aot import AotArtifact, Target, parse_target
from ._backend import TritonBackend
from ._entry import check_aot_cache, validity_record
from ._kernel import InterpretedExecutor, SpecializationMismatchError, TritonExecutor, TritonKernel
from ._specialize import specialization_rep
from ._tensor import WarmupTensor
from ._triton_api import TritonNotInstalledError

__all__ = [
    "AotArtifact",
    "InterpretedExecutor",
    "SpecializationMismatchError",
    "Target",
    "TritonBackend",
    "TritonExecutor",
    "TritonKernel",
    "TritonNotInstalledError",
    "WarmupTensor",
    "check_aot_cache",
    "parse_target",
    "specialization_rep",
    "validity_record",
]

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
# The first require_triton() installs the cross-process triton_key() cache; registered here,
# above _triton_api, so that layer imports nothing of the plugin.
_triton_api.on_first_import(_keycache.install)
