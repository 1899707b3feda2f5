"""warmkit's CuTe DSL backend: sm_90a export on any host, load on the device, bundles, monitor.

Public names: :class:`CuteDSLKernel`, :class:`FakeTensor`, :class:`CuteDSLBackend`
(the ``cutedsl`` entry point), :class:`CuteExecutor`, :class:`CuteArtifact`,
:class:`VectorAdd` (entry point ``cutedsl.vector_add``), :class:`CuteDSLNotInstalledError`.

Importing this package does not import CuTe.
"""

from __future__ import annotations

import logging

from ._backend import CuteDSLBackend
from ._cute_api import CuteDSLNotInstalledError
from ._kernel import CuteArtifact, CuteDSLKernel, CuteExecutor, FakeTensor
from ._vector_add import VectorAdd

__all__ = [
    "CuteArtifact",
    "CuteDSLBackend",
    "CuteDSLKernel",
    "CuteDSLNotInstalledError",
    "CuteExecutor",
    "FakeTensor",
    "VectorAdd",
]

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
