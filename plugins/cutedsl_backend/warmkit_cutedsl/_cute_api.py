"""Every CuTe DSL name warmkit relies on, reached from this one module (nvidia-cutlass-dsl 4.8.1).

``import warmkit_cutedsl`` never imports CuTe: the backend must be able to say
"not installed, run ..." instead of failing. :func:`require_cute` imports it,
after preloading ``libcute_dsl_runtime.so`` with ``RTLD_GLOBAL``: without it,
a host with no GPU fails with ``Symbols not found: _cudaLibraryLoadData``
(SGLang and vLLM's FA4 code preload it the same way).
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.metadata
import os
import threading
from types import ModuleType
from typing import Any

from warmkit import WarmkitError

__all__ = [
    "INSTALL_HINT",
    "PINNED",
    "CuteDSLNotInstalledError",
    "backend_compile_hook_point",
    "compile_hook_point",
    "compile_options",
    "cute_version",
    "export",
    "fake_tensor",
    "load",
    "numeric",
    "require_cute",
    "tvm_ffi_version",
]

PINNED = "4.8.1"
INSTALL_HINT = "pip install 'warmkit-cutedsl[cutedsl]'"

_lock = threading.Lock()
_runtime: ctypes.CDLL | None = None


class CuteDSLNotInstalledError(WarmkitError, ImportError):
    """nvidia-cutlass-dsl is missing. Attributes: install_hint."""

    def __init__(self, reason: str) -> None:
        self.install_hint = INSTALL_HINT
        super().__init__(f"warmkit-cutedsl: {reason}. Install it with: {INSTALL_HINT}")


def _preload_runtime() -> None:
    global _runtime
    with _lock:
        if _runtime is not None:
            return
        try:
            pkg = importlib.import_module("nvidia_cutlass_dsl")
        except ImportError as exc:
            raise CuteDSLNotInstalledError(
                f"nvidia-cutlass-dsl cannot be imported ({exc})"
            ) from exc
        libs = sorted(
            glob.glob(os.path.join(pkg.__path__[0], "cu*", "lib", "libcute_dsl_runtime.so"))
        )
        if not libs:
            raise CuteDSLNotInstalledError(
                "libcute_dsl_runtime.so was not found: install one of nvidia-cutlass-dsl-libs-cu12/-cu13"
            )
        _runtime = ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)


def require_cute() -> ModuleType:
    """``cutlass.cute``, imported on first use (runtime library preloaded).

    Raises:
        CuteDSLNotInstalledError: it is not importable (the message says how to fix it).
    """
    _preload_runtime()
    try:
        return importlib.import_module("cutlass.cute")
    except ImportError as exc:
        raise CuteDSLNotInstalledError(f"cutlass.cute cannot be imported ({exc})") from exc


def cute_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError as exc:
        raise CuteDSLNotInstalledError("nvidia-cutlass-dsl is not installed") from exc


def tvm_ffi_version() -> str | None:
    try:
        return importlib.metadata.version("apache-tvm-ffi")
    except importlib.metadata.PackageNotFoundError:
        return None


def numeric(name: str) -> Any:
    """``"float16"`` -> ``cutlass.Float16`` (the CuTe numeric type of a torch dtype name)."""
    require_cute()
    import cutlass

    table = {
        "float16": cutlass.Float16,
        "bfloat16": cutlass.BFloat16,
        "float32": cutlass.Float32,
        "int32": cutlass.Int32,
        "int64": cutlass.Int64,
    }
    try:
        return table[name]
    except KeyError:
        raise ValueError(
            f"unsupported CuTe dtype {name!r}; use one of {', '.join(table)}"
        ) from None


def fake_tensor(dtype: str, shape: tuple[int, ...], align: int) -> Any:
    """A storage-less tensor for ``cute.compile`` (``cute.runtime.make_fake_compact_tensor``)."""
    require_cute()
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(numeric(dtype), tuple(shape), assumed_align=align)


def compile_options(arch: str) -> str:
    """``cute.compile`` options: the GPU arch and a TVM-FFI entry (called with torch tensors)."""
    return f"--gpu-arch {arch} --enable-tvm-ffi"


def export(compiled: Any, path: str, symbol: str) -> None:
    """Write the compiled function's object file (host code + cubin) to ``path`` under ``symbol``."""
    compiled.export_to_c(path, symbol)


def load(path: str, symbol: str) -> Any:
    """Load an exported object file; return its TVM-FFI function (callable with torch tensors)."""
    cute = require_cute()
    module = cute.runtime.load_module(path, enable_tvm_ffi=True)
    return module[symbol]


def compile_hook_point() -> tuple[type, str]:
    """``CompileCallable.__call__``: what ``cute.compile(fn, ...)`` runs, before tracing anything."""
    require_cute()
    from cutlass.base_dsl.compiler import CompileCallable

    return CompileCallable, "__call__"


def backend_compile_hook_point() -> tuple[type, str]:
    """``CompilerBackend.compile``: every real compile, also a raw ``@cute.jit`` call's implicit one."""
    require_cute()
    from cutlass.base_dsl.compile_backend import CompilerBackend

    return CompilerBackend, "compile"
