"""The process's one-time Triton setup that ``warmkit.prepare()`` runs early, and the runtime component.

``TritonRuntime`` is ``TritonBackend``'s runtime component (``backend.runtime``): this
setup (``warmkit.Prepares``), compile workers (``warmkit.ProcessCompiles``,
``warmkit.PrimesWorkers``) and the runtime-compile hooks of ``warmkit.monitor``
(``warmkit.MonitorHooks``, ``_hooks``).

A warm restart's warmup spent most of its time on costs every process pays
once before its first Triton cache lookup, not on its keys (``docs/performance.md``):

* ``import triton`` and its fingerprint ``triton_key()`` (the stored digest
  of ``libtriton.so``, or on a machine's first run its ~0.3 s sha256);
* the C specializer's lazy imports on its first call, ``triton.experimental.gluon``
  among them (70-95 ms on the CPU box);
* for a CUDA target: the ptxas lookup (``ptxas --version``), the target check's
  ``ptxas --help``, and the ptxas version every cache key contains (one more
  ``ptxas --version``);
* with a GPU, Triton's driver (its ``cuda_utils`` module, built with gcc on first use),
  only once torch is imported (choosing the driver imports it: ``_torch_settled``).

:func:`prepare` does them in ``warmkit.prepare()``'s background thread. None of
them reads the kernels. One reads a setting a warmup reads again later: Triton
caches the ptxas version per architecture only, for the life of the process, so
a ``TRITON_PTXAS_PATH`` (or ``TRITON_MOCK_PTX_VERSION``) set after
``prepare()`` would leave it stale. :func:`prepare` remembers what the version
was read with, and :func:`check` (called by ``compile_scope``, before any key)
drops Triton's cached version when that changed, so the warmup asks the ptxas
it will compile with.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from . import _hooks
from . import _triton_api as api
from ._aot import AotDriver, aot_driver, parse_target, validate_target

__all__ = ["TritonRuntime", "check", "prepare", "prime_worker", "settle_torch"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
#: arch -> what Triton's cached ptxas version for it was read with (``api.ptxas_version_inputs``)
_primed: dict[int, Any] = {}


def prepare(target: str | None) -> None:
    """Do the one-time setup for ``target`` (None = this device); see the module docstring.

    Raises:
        ValueError: ``target`` is malformed or this ptxas cannot compile for it.
    """
    try:
        api.require_triton()
    except api.TritonNotInstalledError:
        return  # warmup reports it per key, with the install hint
    # The ptxas probes are two subprocesses (~20 ms on the CPU box): they run beside the
    # specializer's imports (~40 ms of Python), which hold the GIL they wait without.
    with ThreadPoolExecutor(1, thread_name_prefix="warmkit-ptxas") as ptxas:
        probed = None
        if target is not None and target != "interpreter":
            probed = ptxas.submit(_probe_ptxas, target)
        api.triton_key()
        try:
            api.prime_specializer()
        except AttributeError as exc:
            if "partially initialized module 'torch'" not in str(exc):
                raise
            # the engine is importing torch meanwhile (settle_torch); the first key primes it
            logger.debug(
                "prepare: the specializer's first call met a half-imported torch (%s)", exc
            )
        if probed is not None:
            probed.result()  # a target this ptxas cannot compile for raises here, as before
    if not api.interpreting() and _torch_settled():
        try:
            api.default_driver()
        except Exception as exc:  # noqa: BLE001 - no GPU: a device warmup says so per key
            logger.debug("prepare: no Triton driver (%s)", exc)


def _probe_ptxas(target: str) -> None:
    """Check that this ptxas compiles for ``target``, then read its version as Triton caches it."""
    arch = validate_target(target).arch
    inputs = api.prime_ptxas_version(arch)
    with _lock:
        _primed[arch] = inputs


def _torch_settled() -> bool:
    """Whether choosing Triton's driver here (it imports torch) cannot race the engine's own import.

    Two threads importing torch at once can hand one of them a partially
    initialized module ("partially initialized module 'torch' has no attribute
    'Tensor'"): seen when an engine imported torch right after
    ``warmkit.prepare()``, as the docs say to. So the driver is set up here only
    when torch is fully imported already, or not installed; otherwise the
    warmup's first device compile does it, in the warmup's thread.
    """
    mod = sys.modules.get("torch")
    if mod is None:
        return importlib.util.find_spec("torch") is None
    return not getattr(getattr(mod, "__spec__", None), "_initializing", False)


def settle_torch() -> None:
    """Finish importing torch in this thread, if it is installed, before a warmup's threads run.

    Triton 3.9's C specializer reads ``torch.Tensor`` from ``sys.modules`` on
    each call while torch is not fully imported, without waiting for the thread
    that imports it: a compile thread specializing while another one imports
    torch (a ``WarmupTensor`` does, for its torch dtype) failed its key with
    "partially initialized module 'torch' has no attribute 'Tensor'". The
    threads of a warmup would import torch anyway (every ``WarmupTensor`` does,
    and so does Triton's driver with a GPU), so doing it before they start
    costs nothing they would not pay; it only orders it. ``import torch`` waits
    for another thread's import of it, as the C specializer does not.
    """
    if not _torch_settled():  # installed, and not (fully) imported yet
        import torch  # noqa: F401 - imported for its side effect: torch fully in sys.modules


def check() -> None:
    """Drop Triton's cached ptxas version if what :func:`prepare` read it with has changed since.

    Every warmup checks every arch a ``prepare()`` primed (a dict lookup and a
    path per arch): a ``prepare()`` for another target that runs during a
    warmup stays checked for its own warmup.
    """
    with _lock:
        changed = []
        for arch, inputs in _primed.items():
            now = api.ptxas_version_inputs(arch)
            if now != inputs:
                changed.append((arch, inputs, now))
                _primed[arch] = now  # what Triton reads it with from now on
    for arch, inputs, now in changed:
        logger.info(
            "ptxas for sm_%d changed since warmkit.prepare() (%s -> %s): Triton asks it again",
            arch,
            inputs,
            now,
        )
    if changed:
        api.forget_ptxas_version()


def prime_worker(target: str) -> None:
    """In a compile worker: one throwaway compile for ``target``, into a temporary cache.

    A worker's first compile pays, besides :func:`prepare`'s costs, the first
    run of every compiler stage in the process (Triton's lazy imports of its
    passes, the MLIR and LLVM contexts, the first ptxas run): measured as most
    of what separated 8 workers from 8x on the H200 host (B1). This pays them
    while the engine is still being built. The temporary cache directory is
    set for the whole process, which is safe only where nothing else compiles
    at the same time: in a worker, before its first task.
    """
    import tempfile

    from ._tensor import WarmupTensor

    kernel = api.probe_kernel()
    drv = AotDriver(parse_target(target))
    with (
        tempfile.TemporaryDirectory(prefix="warmkit-prime-") as tmp,
        api.cache_dir_scope(tmp),
        aot_driver(drv),
    ):
        device = api.prepare_function(kernel)
        x = WarmupTensor("float32", (256,))
        api.warmup(kernel, (x, x, 256), {"BLOCK": 128}, {"num_warps": 4})
        api.drop_device(kernel, device)


class WorkerTargets(Protocol):
    """What :class:`TritonRuntime` needs of the compiler (``TritonCompiler.worker_target``)."""

    def worker_target(self, target: str | None) -> str | None:
        """The target a compile worker compiles for, or None when workers cannot help now."""


class TritonRuntime:
    """Triton in this process: its one-time setup, compile workers, the monitor's hooks.

    Args:
        compiler: says what a compile worker compiles for (it knows the cache redirect).
    """

    def __init__(self, compiler: WorkerTargets) -> None:
        self._compiler = compiler

    prepare = staticmethod(prepare)  # the one-time setup that warmkit.prepare() runs early
    prime_worker = staticmethod(prime_worker)  # in a compile worker: one throwaway compile

    def worker_target(self, target: str | None) -> str | None:
        """What a compile worker process compiles for (``TritonCompiler.worker_target``)."""
        return self._compiler.worker_target(target)

    def install_monitor(self) -> None:
        """Report every runtime Triton compile, disk hit and module load to ``warmkit.monitor`` (idempotent)."""
        try:
            api.require_triton()
        except api.TritonNotInstalledError:
            logger.debug("triton not installed: no runtime hooks to install")
            return
        _hooks.install()

    def uninstall_monitor(self) -> None:
        """Remove the hooks, restoring the ones installed before (idempotent)."""
        try:
            api.require_triton()
        except api.TritonNotInstalledError:
            return
        _hooks.uninstall()
