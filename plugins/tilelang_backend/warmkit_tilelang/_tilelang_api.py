"""Every TileLang name that is not documented public API, reached from this one module.

``import warmkit_tilelang`` never imports TileLang: the backend must be able
to say "TileLang is not installed, run ..." instead of failing at import.
Everything that needs TileLang calls :func:`require_tilelang` first.

Checked against tilelang 0.1.15 (the version the ``tilelang`` extra pins).
Each accessor below names the private TileLang object it relies on, so a
TileLang upgrade breaks here, in one place (``tests/tilelang_backend/
testapi.py`` exercises every accessor).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from warmkit import WarmkitError

__all__ = [
    "INSTALL_HINT",
    "PINNED",
    "TileLangNotInstalledError",
    "cache_enabled",
    "cache_entry_of",
    "cache_namespace",
    "compile_options",
    "cuda_target",
    "disk_load_hook_point",
    "fill_jit_cache",
    "forget_in_memory",
    "host_platform",
    "is_jit_function",
    "jit_compile_hook_point",
    "jit_function_name",
    "kernel_cache_hook_point",
    "kernels_dir",
    "key_environment",
    "prim_func_name",
    "redirect_cache",
    "require_tilelang",
    "tilelang_version",
    "tvm_ffi_version",
]

#: The version the ``tilelang`` extra pins and this module was checked against.
PINNED = "0.1.15"
INSTALL_HINT = "pip install 'warmkit-tilelang[tilelang]'"

#: TileLang's variables that change its cache key (``normalize_pass_configs`` and the
#: key's lib stamp) or the execution backend the key names.
_KEY_VARIABLES = (
    "TILELANG_EXECUTION_BACKEND",
    "TILELANG_KERNEL_CACHE_USE_LIB_STAMP",
    "TILELANG_LAYOUT_COST_MODEL",
)

_redirect_lock = threading.Lock()


class TileLangNotInstalledError(WarmkitError, ImportError):
    """TileLang is missing.

    Attributes:
        install_hint: the command that fixes it.
    """

    def __init__(self, reason: str) -> None:
        self.install_hint = INSTALL_HINT
        super().__init__(f"warmkit-tilelang: {reason}. Install it with: {INSTALL_HINT}")


def require_tilelang() -> ModuleType:
    """The ``tilelang`` module, imported on first use.

    Raises:
        TileLangNotInstalledError: it is not importable (the message says why and how to fix it).
    """
    try:
        return importlib.import_module("tilelang")
    except ImportError as exc:
        raise TileLangNotInstalledError(f"tilelang cannot be imported ({exc})") from exc


def tilelang_version() -> str:
    """The installed TileLang's version, from its distribution's metadata: no import.

    Importing TileLang (and TVM, torch) takes seconds; ``warmkit list`` and
    ``available()`` need only whether it is installed and which version.

    Raises:
        TileLangNotInstalledError: no ``tilelang`` module is installed.
    """
    if importlib.util.find_spec("tilelang") is None:
        raise TileLangNotInstalledError("tilelang is not installed")
    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:  # a source checkout: only the module knows
        return str(require_tilelang().__version__)


def tvm_ffi_version() -> str | None:
    """The installed apache-tvm-ffi: the ABI that ``executable.so`` entries link against."""
    try:
        return importlib.metadata.version("apache-tvm-ffi")
    except importlib.metadata.PackageNotFoundError:
        return None


# -- targets ------------------------------------------------------------------------------


def cuda_target(capability: tuple[int, int]) -> dict[str, str]:
    """The explicit TileLang target for a compute capability, e.g. ``(9, 0)`` -> ``sm_90a``.

    Built with ``tilelang.contrib.nvcc.get_target_arch``, the function that
    TileLang's own GPU auto-detection uses (``tilelang.cuda.target``), so a key
    built on a CPU host for ``(9, 0)`` is the key an H100/H200 builds. A plain
    ``sm_90`` target would fail on ``warpgroup_reg_alloc``.
    """
    if "tilelang" not in sys.modules:  # a bundle's install or check: no import (seconds)
        major, minor = capability
        return {"kind": "cuda", "arch": f"sm_{_target_arch_unimported(major, minor)}"}
    require_tilelang()
    from tilelang.contrib import nvcc

    return {"kind": "cuda", "arch": f"sm_{nvcc.get_target_arch(capability)}"}


def _target_arch_unimported(major: int, minor: int) -> str:
    """``nvcc.get_target_arch((major, minor))`` as TileLang 0.1.15 computes it, no import.

    ``test_cache_no_import`` checks both agree for every capability TileLang targets.
    """
    return f"{major * 10 + minor}{'a' if major >= 9 else ''}"


# -- the disk cache -------------------------------------------------------------------------


def _kernel_cache_class() -> Any:  # tilelang is untyped
    require_tilelang()
    from tilelang.cache.kernel_cache import KernelCache  # private module, 0.1.15

    return KernelCache


def cache_namespace() -> str:
    """``<version>/<os>-<machine>``: the part of the cache path below ``TILELANG_CACHE_DIR``.

    Before TileLang is imported, computed without importing it, as :func:`kernels_dir`.
    """
    if "tilelang" not in sys.modules:
        return _namespace_unimported()
    return str(_kernel_cache_class()._get_cache_namespace())


def kernels_dir() -> Path:
    """Where TileLang looks entries up now: ``TILELANG_CACHE_DIR/<namespace>/kernels`` (absolute).

    Before TileLang is imported, computed without importing it (TileLang and
    TVM take seconds to import, and ``warmkit cache`` commands ask every
    backend for its directory); ``test_tilelang_api`` checks both agree.
    """
    if "tilelang" not in sys.modules:
        return _kernels_dir_unimported()
    return Path(_kernel_cache_class()._get_cache_root()).resolve()


def _sanitize(component: str) -> str:  # KernelCache._sanitize_path_component, 0.1.15
    sanitized = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in component)
    return sanitized.strip("._-") or "unknown"


def _namespace_unimported() -> str:
    """``cache_namespace()`` as TileLang 0.1.15 computes it (``KernelCache._get_cache_namespace``)."""
    public, sep, local = tilelang_version().partition("+")  # _format_version_namespace
    version = _sanitize(public)
    local = "".join(ch if ch.isalnum() else "_" for ch in local).strip("_") if sep else ""
    version = f"{version}_{local}" if local else version
    return f"{version}/{_sanitize(sys.platform)}-{_sanitize(platform.machine())}"


def _kernels_dir_unimported() -> Path:
    """``kernels_dir()`` as TileLang 0.1.15 computes it (``KernelCache._get_cache_root``), no import."""
    base = os.environ.get("TILELANG_CACHE_DIR") or os.path.expanduser("~/.tilelang/cache")
    return (Path(base) / _namespace_unimported() / "kernels").resolve()


def _cache_dir_var() -> Any:
    from tilelang import env

    return type(env).__dict__["TILELANG_CACHE_DIR"]  # an EnvVar descriptor with a forced value


@contextlib.contextmanager
def redirect_cache(directory: Path) -> Iterator[Path]:
    """Point TileLang's disk cache at ``directory`` (process-wide) for the block; yield the kernels dir.

    In-memory caches are dropped on entry, so that a variant compiled before
    is looked up (and written) in the new directory.
    """
    var = _cache_dir_var()
    with _redirect_lock:
        previous = var._forced_value
        var._forced_value = str(directory)
    try:
        _kernel_cache_class()._create_dirs()
        forget_in_memory()
        yield kernels_dir()
    finally:
        with _redirect_lock:
            var._forced_value = previous
        forget_in_memory()


def forget_in_memory() -> None:
    """Drop the in-memory caches of TileLang's kernel caches (one singleton per execution backend)."""
    require_tilelang()
    from tilelang import cache

    for instance in cache._dispatch_map.values():
        with instance._lock:
            instance._memory_cache.clear()


def cache_entry_of(kernel: Any) -> tuple[str | None, Path | None]:
    """``(cache key, entry directory)`` of a compiled ``JITKernel``; ``(None, None)`` with the cache off."""
    key = getattr(kernel, "_tilelang_cache_key", None)
    path = getattr(kernel, "_tilelang_cache_path", None)
    return key, (Path(path) if path else None)


def key_environment() -> dict[str, str]:
    """The TileLang variables that are set and change the cache key."""
    return {name: os.environ[name] for name in _KEY_VARIABLES if name in os.environ}


def host_platform() -> str:
    return platform.machine()


# -- @tilelang.jit functions ---------------------------------------------------------------


def is_jit_function(obj: Any) -> bool:
    """Whether ``obj`` is what ``@tilelang.jit`` returns (a ``JITImpl``)."""
    return hasattr(obj, "get_tir") and hasattr(obj, "_kernel_cache") and hasattr(obj, "func")


def jit_function_name(fn: Any) -> str:
    """``module.qualname`` of the Python function behind a ``JITImpl``."""
    inner = getattr(fn, "func", None)
    inner = getattr(inner, "orig_func", inner)  # a JITFunc wraps the user's function
    module = getattr(inner, "__module__", None) or "?"
    qualname = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or "?"
    return f"{module}.{qualname}"


def compile_options(fn: Any, prim: Any) -> dict[str, Any]:
    """The options ``JITImpl.compile`` passes to ``tilelang.compile`` for ``prim``, target excluded.

    ``out_idx`` is a fresh list in non-negative form. TileLang's adapter
    rewrites the list it is given in place (``BaseKernelAdapter.
    _legalize_result_idx`` turns ``-1`` into ``len(params) - 1``), and a
    ``@tilelang.jit`` function hands it its own ``out_idx``. So the disk-cache
    key, which includes ``out_idx``, changes once any kernel of the function has
    been built in the process: a key compiled first in one process and second in
    another would get two entries, and a device run would miss what the CPU
    host compiled. The normalized copy gives one key whatever ran before, and
    it equals what TileLang's own calls use after their first kernel.
    """
    return {
        "out_idx": _normalized_out_idx(fn.out_idx, len(prim.params)),
        "execution_backend": fn.execution_backend,
        "target_host": fn.target_host,
        "verbose": fn.verbose,
        "pass_configs": fn.pass_configs,
        "compile_flags": fn.compile_flags,
    }


def _normalized_out_idx(out_idx: Any, params: int) -> list[int] | None:
    if out_idx is None:
        return None
    indices = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    return [i + params if i < 0 else i for i in indices]


def fill_jit_cache(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], kernel: Any) -> None:
    """Put ``kernel`` into the ``JITImpl``'s in-process cache under the key a call with these arguments uses.

    After this, ``fn(*args, **kwargs)`` anywhere in the process returns
    ``kernel`` without compiling (``JITImpl.__call__`` -> ``func.parse_args``
    -> ``_kernel_cache``), which is how vLLM warms ``@tilelang.jit`` functions.
    """
    key, _ = fn.func.parse_args(*args, **dict(kwargs))
    fn._kernel_cache[key] = kernel


def prim_func_name(func: Any) -> str:
    try:
        return str(func.attrs["global_symbol"])
    except Exception:  # noqa: BLE001 -- a PrimFunc without attrs still gets a name
        return "<tilelang kernel>"


# -- hook points (see _hooks) ----------------------------------------------------------------


def kernel_cache_hook_point() -> tuple[type, str]:
    """``KernelCache.cached``: every compile goes through it ("the ONLY place", says its docstring)."""
    return _kernel_cache_class(), "cached"


def disk_load_hook_point() -> tuple[type, str]:
    """``KernelCache._load_kernel_from_disk``: called after an in-memory miss, before any compile."""
    return _kernel_cache_class(), "_load_kernel_from_disk"


def jit_compile_hook_point() -> tuple[type, str]:
    """``JITImpl.compile``: what a ``@tilelang.jit`` function calls on an in-process miss."""
    require_tilelang()
    from tilelang.jit import JITImpl

    return JITImpl, "compile"


def cache_enabled() -> bool:
    from tilelang import env

    return bool(env.is_cache_enabled())
