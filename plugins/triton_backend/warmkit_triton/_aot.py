"""Ahead-of-time compiles: targets, the target-reporting driver, and what an AOT cache is valid for.

An AOT compile runs the kernel's own ``JITFunction.warmup`` (Triton's JIT path:
its binder, its specialization, its attrs, its options) while Triton's active
driver reports the *declared* target instead of a live GPU. The cache entry it
writes therefore has exactly the hash the GPU runtime will look up, provided
the runtime uses the same Triton wheel, CPython ABI, ptxas, cache-relevant
environment and cache directory path (see :func:`validity_record`).

The driver swap is scoped to the compiling thread: while any AOT compile runs,
Triton's ``driver.active`` is a small router that answers with the AOT driver
in threads (contexts) that are compiling ahead of time and with the real
driver everywhere else, so a live GPU in the same process keeps working.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import attrs

import warmkit
from warmkit._plugin.contract import no_gpu_device

from . import _triton_api as api
from ._triton_api import require_triton

__all__ = [
    "AotArtifact",
    "AotDriver",
    "Target",
    "aot_driver",
    "parse_target",
    "validate_target",
]

logger = logging.getLogger(__name__)

#: File an AOT compile writes into each Triton cache entry it produced.
ACCEPTED_TARGETS = "'cuda:<compute capability>' such as 'cuda:80', 'cuda:90', 'cuda:100' (also 'sm_90', 'cuda:9.0')"


@attrs.frozen
class Target:
    """A parsed compile target.

    Attributes:
        backend: Triton's backend name (``"cuda"``).
        arch: the compute capability as Triton writes it (``90`` for sm_90).
        warp_size: threads per warp (32 on NVIDIA).
    """

    backend: str
    arch: int
    warp_size: int = 32

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"

    def gpu_target(self) -> Any:
        """The ``triton.backends.compiler.GPUTarget`` for this target."""
        return api.gpu_target(self.backend, self.arch, self.warp_size)


def parse_target(target: str | warmkit.Target) -> Target:
    """Parse a target string such as ``"cuda:90"``.

    Args:
        target: ``"cuda:<cc>"`` (``cuda:80``, ``cuda:90``, ``cuda:100`` ...),
            ``"sm_90"``/``"sm90"``, or ``"cuda:9.0"``.

    Raises:
        ValueError: any other string; the message names it and the accepted forms.
        TypeError: not a string.
    """
    if not isinstance(target, (str, warmkit.Target)):
        raise TypeError(
            f"Triton target must be a string, one of {ACCEPTED_TARGETS}; got {target!r}"
        )
    try:
        parsed = warmkit.Target.parse(target)
        ok = parsed.platform == "cuda" and not parsed.feature  # Triton picks sm_90a itself
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"unknown Triton target {target!r}; accepted: {ACCEPTED_TARGETS}")
    cc = parsed.capability
    if cc < 70:
        raise ValueError(
            f"unknown Triton target {target!r}: compute capability {cc} is below 70, which Triton "
            f"does not support; accepted: {ACCEPTED_TARGETS}"
        )
    return Target("cuda", cc)


@functools.lru_cache(maxsize=8)
def _ptxas_archs(path: str) -> frozenset[int]:
    """The ``sm_XY`` values a ptxas accepts for ``--gpu-name`` (from its ``--help``)."""
    out = subprocess.run(
        [path, "--help"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    return frozenset(int(m) for m in re.findall(r"'sm_(\d+)[af]?'", out))


def validate_target(target: str) -> Target:
    """``parse_target``, then check that the ptxas Triton would use can compile for it.

    Without this, ``cuda:999`` parses and ptxas fails per key with thousands of
    lines (a PTX dump) and half-written cache entries.

    Raises:
        ValueError: a malformed target, or one that ptxas does not support; the
            message names the accepted targets.
        TypeError: not a string.
    """
    tgt = parse_target(target)
    path = api.ptxas_path(tgt.arch)  # not its version: warmkit.prepare() calls this early
    try:
        archs = _ptxas_archs(str(path)) if path and os.path.isfile(path) else frozenset()
    except (OSError, subprocess.SubprocessError) as exc:  # cannot tell here; the compile will say
        logger.debug("cannot list the archs of ptxas %s for %s: %s", path, tgt, exc)
        return tgt
    if archs and tgt.arch not in archs:
        supported = ", ".join(f"cuda:{a}" for a in sorted(archs) if a >= 70)
        raise ValueError(
            f"unknown Triton target {target!r}: the ptxas Triton uses ({path}) cannot compile "
            f"for sm_{tgt.arch}; supported: {supported}"
        )
    return tgt


class AotDriver:
    """A Triton driver with no GPU that reports a declared target.

    It provides what ``JITFunction.warmup`` asks of a driver
    (``get_current_target``, ``get_current_device``, ``get_current_stream``)
    and nothing that needs a device; anything else raises a clear error.

    Args:
        target: the declared target.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._gpu_target = target.gpu_target()
        # A device id of its own, so the JITFunction's per-device binder and
        # in-memory cache for this target never mix with a real device 0's.
        self.device = f"warmkit-aot:{target}"

    def get_current_target(self) -> Any:
        return self._gpu_target

    def get_current_device(self) -> str:
        return self.device

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def set_current_device(self, device: Any) -> None:
        return None

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        return divmod(self.target.arch, 10)

    @staticmethod
    def is_active() -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"warmkit-triton: Triton asked the ahead-of-time driver for {name!r} while compiling "
            f"for {self.target} without a GPU; an AOT compile cannot load or launch kernels"
        )


_current_aot: contextvars.ContextVar[AotDriver | None] = contextvars.ContextVar(
    "warmkit_triton_aot_driver", default=None
)


class _RoutingDriver:
    """Stands in Triton's active-driver slot (``api.installed_driver``) while AOT compiles run."""

    def __init__(self, previous: Any) -> None:
        self._previous = previous

    def _pick(self) -> Any:
        aot = _current_aot.get()
        if aot is not None:
            return aot
        if self._previous is None:
            self._previous = api.default_driver()  # raises as Triton would when there is no GPU
        return self._previous

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pick(), name)


_router_lock = threading.Lock()
_router_users = 0
_router: _RoutingDriver | None = None
_router_saved: Any = None


def _acquire_router() -> None:
    global _router_users, _router, _router_saved
    with _router_lock:
        if _router_users == 0:
            _router_saved = api.installed_driver()
            _router = _RoutingDriver(_router_saved)
            api.set_installed_driver(_router)
        _router_users += 1


def _release_router() -> None:
    global _router_users, _router, _router_saved
    with _router_lock:
        _router_users -= 1
        if _router_users == 0:
            if api.installed_driver() is _router:
                api.set_installed_driver(_router_saved)
            else:
                logger.warning(
                    "Triton's active driver was replaced during an AOT compile; leaving it as it is"
                )
            _router = None
            _router_saved = None


@contextlib.contextmanager
def routing() -> Iterator[None]:
    """Keep the routing driver installed for the duration of a block (refcounted)."""
    require_triton()
    _acquire_router()
    try:
        yield
    finally:
        _release_router()


@contextlib.contextmanager
def aot_driver(drv: AotDriver) -> Iterator[None]:
    """Make ``drv`` Triton's active driver in this thread/context for the block."""
    with routing():
        token = _current_aot.set(drv)
        try:
            yield
        finally:
            _current_aot.reset(token)


# -- what a cache entry is valid for ---------------------------------------------------------


def triton_key_digest() -> str:
    """sha256 of ``triton_key()``: Triton's own fingerprint of its wheel (version, sources, libtriton)."""
    return hashlib.sha256(api.triton_key().encode("utf-8")).hexdigest()


def cache_dir() -> str:
    """The absolute Triton cache directory in effect (``TRITON_CACHE_DIR`` or ``~/.triton/cache``)."""
    return api.cache_dir()


@attrs.frozen
class AotArtifact:
    """What an ahead-of-time compile returns: a record of a cache entry, not a launchable kernel.

    Attributes:
        kernel: the kernel's name.
        key: the warmkit compile key.
        target: the target string, e.g. ``"cuda:90"``.
        hash: Triton's cache hash of the entry (hex sha256).
        name: the compiled function's name.
        cache_dir: the Triton cache directory it was written to.
        cache_hit: True when the entry already existed on disk.
        launcher: what building its C launcher needs (``_triton_api.launcher_recipe``);
            ``warmkit bundle install`` builds it on the GPU host (``prepare_entries``).
    """

    kernel: str
    key: Any
    target: str
    hash: str
    name: str
    cache_dir: str
    cache_hit: bool = False
    launcher: dict[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    #: the function's identity it was compiled with (``_pins.pins_of``), for ``warmkit explain``
    identity: dict[str, Any] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def entry_dir(self) -> str:
        """The entry's directory inside the cache (Triton names it by the base32 hash)."""
        return api.cache_entry_dir(self.cache_dir, self.hash)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"kernel {self.kernel!r} key {self.key!r} was compiled ahead of time for {self.target}; "
            "an AOT artifact cannot launch. At runtime on the GPU, warm up for the device "
            "(target=None): the cache entry makes that a disk hit."
        )


def real_driver() -> Any:
    """Triton's driver for this process's device, never the AOT router; raises when there is no GPU."""
    active = api.installed_driver()
    if active is None or isinstance(active, _RoutingDriver):
        if no_gpu_here():
            raise RuntimeError(
                "0 active drivers: this host has no GPU (no /dev/nvidiactl, /dev/dxg or /dev/kfd, "
                "no libcuda.so.1)"
            )
        return api.default_driver()
    return active


@functools.cache
def no_gpu_here() -> bool:
    """Whether no driver of Triton's own backends can be active here, known without asking Triton.

    Triton picks its driver by asking every backend whether it is active, and its
    AMD backend imports torch to answer: 1.5 s of a CPU build host's every command
    went to learning that there is no GPU. With no GPU device at all
    (``warmkit._plugin.contract.no_gpu_device``), no ``TRITON_LIBCUDA_PATH`` and no
    backend but ``nvidia`` and ``amd``, neither can be active. Anything else asks Triton.
    """
    if set(api.backend_names()) - {"nvidia", "amd"} or os.environ.get("TRITON_LIBCUDA_PATH"):
        return False
    return no_gpu_device()


def require_device(name: str) -> None:
    """Raise, naming ``name`` and how to compile without a GPU, when Triton sees no GPU.

    Raises:
        RuntimeError: no GPU driver is active (the message says which target to give).
    """
    try:
        real_driver()
    except Exception as exc:
        raise RuntimeError(
            f"kernel {name!r}: no GPU is visible to Triton ({exc}). To compile ahead of time "
            "on this host, give a target: WARMKIT_TARGET=cuda:90 in the environment (any "
            "warmkit command, `warmkit run` too), `--target cuda:90` of `warmkit warmup`, "
            "`plan` or `bundle build`, or warmkit.WarmupConfig(target='cuda:90') in Python; "
            "to run kernels on CPU set TRITON_INTERPRET=1 before importing them"
        ) from exc
