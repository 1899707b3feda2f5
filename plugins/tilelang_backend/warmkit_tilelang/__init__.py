"""warmkit's TileLang backend: device and ahead-of-time warmup, bundles, runtime monitor.

Public names:

* :class:`TileLangKernel`: the kernel contract for a ``@tilelang.jit`` function;
* :class:`TensorSpec`: a storage-less tensor descriptor (priming launches);
* :class:`TileLangBackend`: the ``tilelang`` entry point of ``warmkit.backends``;
* :class:`TileLangExecutor`, :class:`TileLangArtifact`: what a compile returns
  on a GPU and ahead of time;
* :class:`TiledGemm`: a real kernel (entry point ``tilelang.gemm``);
* :func:`parse_target`, :class:`TileLangNotInstalledError`.

Importing this package does not import TileLang.
"""

from __future__ import annotations

import logging

from ._backend import TileLangBackend, parse_target
from ._gemm import TiledGemm
from ._kernel import TensorSpec, TileLangArtifact, TileLangExecutor, TileLangKernel
from ._tilelang_api import TileLangNotInstalledError

__all__ = [
    "TensorSpec",
    "TileLangArtifact",
    "TileLangBackend",
    "TileLangExecutor",
    "TileLangKernel",
    "TileLangNotInstalledError",
    "TiledGemm",
    "parse_target",
]

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
