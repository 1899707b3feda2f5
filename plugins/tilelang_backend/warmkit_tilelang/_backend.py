"""``TileLangBackend``: the ``tilelang`` entry point of ``warmkit.backends``.

Both ways to compile a key elaborate the kernel's ``@tilelang.jit`` function
with ``compile_args(key)`` and pass the resulting ``PrimFunc`` to
``tilelang.compile`` with the function's own options and an **explicit**
target, ``{"kind": "cuda", "arch": "sm_90a"}`` for compute capability 9.0:

* **device** (``target=None``): for the local GPU's capability; the kernel
  goes into the function's in-process cache and is launched once on scratch
  inputs, so the first real call compiles and loads nothing. Returns a
  :class:`TileLangExecutor`.
* **ahead of time** (``target="cuda:90"``, no GPU needed): fills TileLang's
  disk cache. The key covers the TIR script, ``str(target)``, the execution
  backend, the pass configs and TileLang's version, and the device run builds
  the same target from the same function TileLang's auto-detection uses, so
  the device's lookup finds the entry. Returns a :class:`TileLangArtifact`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from warmkit import BackendStatus, Target
from warmkit._plugin.contract import early_context, local_capability

from . import _hooks
from . import _tilelang_api as api
from ._kernel import TileLangArtifact, TileLangExecutor

__all__ = ["TileLangBackend", "parse_target"]

logger = logging.getLogger(__name__)


def parse_target(target: str | Target) -> Target:
    """``"cuda:90"``, ``"sm_90"``, ``"sm_90a"``, ``"90"`` -> ``warmkit.Target("cuda", "90")``.

    TileLang compiles the ``a`` variant (``sm_90a``) of a capability, so the target
    is the capability alone. The spellings are ``warmkit.Target.parse``'s.

    Raises:
        ValueError: any other target (the message lists the accepted forms).
    """
    try:
        tgt = Target.parse(target)
        ok = tgt.platform == "cuda" and tgt.feature in ("", "a")
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"unknown TileLang target {target!r}: use 'cuda:90' (sm_90a, H100/H200) or "
            "'cuda:100' (sm_100a); 'sm_90' and 'sm_90a' are accepted too"
        )
    return Target("cuda", str(tgt.capability))


def _cuda_target(capability: tuple[int, int]) -> Target:
    return Target("cuda", f"{capability[0]}{capability[1]}")


class TileLangBackend:
    """The TileLang backend (entry point ``tilelang`` in ``warmkit.backends``).

    Constructed with no arguments by warmkit's plugin loader. See
    ``docs/architecture.md`` for the interface and ``docs/tilelang.md`` for
    what is cached where.
    """

    name = "tilelang"

    # -- availability and targets ---------------------------------------------------------

    def available(self) -> BackendStatus:
        """Whether TileLang is importable; the install hint when not."""

        try:
            version = api.tilelang_version()
        except api.TileLangNotInstalledError as exc:
            return BackendStatus(ok=False, reason=str(exc), install_hint=api.INSTALL_HINT)
        reason = f"TileLang {version}"
        if version != api.PINNED:
            reason += f" (warmkit-tilelang is checked against {api.PINNED})"
        return BackendStatus(ok=True, reason=reason, version=version)

    def default_target(self) -> str | None:
        """The local GPU's target (``"cuda:90"`` on an H100/H200), or None without one."""
        cap = local_capability()
        return None if cap is None else str(_cuda_target(cap))

    def canonical_target(self, target: str) -> str:
        """``"sm_90a"`` -> ``"cuda:90"``. Raises ValueError for an unknown target."""
        return str(parse_target(target))

    def parallelism(self, target: str | None) -> int:
        """Compiles worth running at once: TileLang compiles in threads (nvcc runs as a subprocess)."""
        return max(1, min(os.cpu_count() or 1, 16))

    def compile_scope(
        self, target: str | None, jobs: int
    ) -> contextlib.AbstractContextManager[object]:
        """Check the target string early; a device warmup starts CUDA beside TileLang's import.

        Each compile is independent otherwise. The start (``early_context``) overlaps
        the driver's and the device's start with the import of TileLang, TVM and
        torch that the first key makes (2.8 s on an H100), instead of after it.
        """
        if target is not None:
            parse_target(target)
        return early_context(target is None)

    # -- compiling ---------------------------------------------------------------------------

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        """Compile ``key`` of a ``TileLangKernel`` for ``target``; return its executor or artifact.

        Raises:
            TileLangNotInstalledError: TileLang is missing (with the install hint).
            ValueError: an unknown target.
            TypeError: ``kernel`` is not a ``TileLangKernel``.
            RuntimeError: device mode without a GPU (the message says how to compile ahead of time).
        """
        tilelang = api.require_tilelang()
        name = getattr(kernel, "name", type(kernel).__qualname__)
        jit_function = getattr(type(kernel), "jit_function", None)
        if jit_function is None:
            raise TypeError(
                f"kernel {name!r} uses the tilelang backend but is not a TileLangKernel; "
                "subclass warmkit_tilelang.TileLangKernel and set fn"
            )
        fn = jit_function()
        if target is None:
            cap = local_capability()
            if cap is None:
                raise RuntimeError(
                    f"kernel {name!r}: no CUDA GPU is visible, so TileLang cannot compile for this "
                    "device. For an ahead-of-time compile on this host pass a target, e.g. "
                    "warmkit.WarmupConfig(target='cuda:90')"
                )
            tgt = _cuda_target(cap)
        else:
            tgt = parse_target(target)
        tl_target = api.cuda_target((tgt.major, tgt.minor))
        args, kwargs = kernel.compile_args(key)
        with _hooks.outcome() as out:
            prim = fn.get_tir(*args, **kwargs)
            compiled = tilelang.compile(prim, target=tl_target, **api.compile_options(fn, prim))
        cache_key, entry = api.cache_entry_of(compiled)
        # No disk lookup at all with the cache on = an in-memory hit: nothing was compiled.
        hit = out.disk_hit if out.disk_hit is not None else api.cache_enabled()
        if target is not None:
            if cache_key is None or entry is None:
                raise RuntimeError(
                    f"kernel {name!r} key {key!r}: TileLang's disk cache is disabled "
                    "(TILELANG_DISABLE_CACHE), so an ahead-of-time compile would leave nothing "
                    "for the device to find; unset it"
                )
            logger.debug(
                "kernel %s key %r: %s for %s", name, key, "cached" if hit else "compiled", tgt
            )
            return TileLangArtifact(
                kernel=name,
                key=key,
                target=str(tgt),
                arch=tl_target["arch"],
                cache_key=cache_key,
                entry=entry,
                cache_hit=hit,
            )
        api.fill_jit_cache(fn, args, kwargs, compiled)
        executor = TileLangExecutor(
            kernel=name,
            key=key,
            jit_kernel=compiled,
            launch=compiled.torch_function,
            target=tl_target,
            cache_key=cache_key,
            cache_hit=hit,
        )
        if getattr(kernel, "prime", True):
            executor.primed = _prime(executor, kernel.prime_args(key))
        return executor

    # -- persistent cache (warmkit bundles) ---------------------------------------------------

    def cache_dir(self) -> Path:
        """Where TileLang looks entries up: ``TILELANG_CACHE_DIR/<version>/<os>-<machine>/kernels``."""
        return api.kernels_dir()

    def cache_fingerprint(self, target: str | None) -> dict[str, str]:
        """What entries built for ``target`` are valid for; every field is part of TileLang's lookup.

        The CPython version is not a field: the wheel is ``abi3`` and an entry's
        ``executable.so`` is a TVM-FFI module, not a Python extension.

        Raises:
            ValueError: an unknown target; no target and no GPU.
        """
        if target is None:
            target = self.default_target()
            if target is None:
                raise ValueError("no target given and no GPU here: pass a target, e.g. 'cuda:90'")
        tgt = parse_target(target)
        fields = {
            "target": str(tgt),
            "arch": api.cuda_target((tgt.major, tgt.minor))["arch"],
            "tilelang": api.tilelang_version(),
            "namespace": api.cache_namespace(),
            "tvm_ffi": str(api.tvm_ffi_version()),
        }
        fields.update({f"env.{k}": v for k, v in api.key_environment().items()})
        return fields

    @contextlib.contextmanager
    def cache_scope(self, directory: str | os.PathLike[str]) -> Iterator[Path]:
        """Redirect TileLang's disk cache to ``directory`` for the block; yield where entries go.

        The entries land in ``directory/<version>/<os>-<machine>/kernels``, the
        directory this yields (a bundle packs that one).
        """
        api.require_tilelang()
        path = Path(directory).resolve()
        path.mkdir(parents=True, exist_ok=True)
        with api.redirect_cache(path) as kernels:
            yield kernels

    def relocate_cache_entry(self, staged: Path, final: Path) -> None:
        """Nothing to rewrite: an entry holds no path of its own (its files are found by name)."""

    # -- runtime monitor -----------------------------------------------------------------------

    def install_monitor(self) -> None:
        """Report every runtime TileLang compile and disk load to ``warmkit.monitor`` (idempotent).

        The hooks go in once TileLang is imported: arming the monitor of a process
        that never imports it (``warmkit record`` of a Triton engine) no longer
        imports it (3 s on the CPU box, torch with it).
        """
        if importlib.util.find_spec("tilelang") is None:
            logger.debug("tilelang not installed: no runtime hooks to install")
            return
        _hooks.install_when_imported()

    def uninstall_monitor(self) -> None:
        """Remove the hooks, restoring exactly what was there before (idempotent).

        It never imports TileLang: hooks were installed only if it was imported, and
        ``monitor.disarm()`` (every warmup with ``monitor="off"``) calls this for every
        loaded backend; importing TileLang there cost a Triton-only warmup 1.3 s.
        """
        _hooks.uninstall()

    def __repr__(self) -> str:
        return "<TileLangBackend>"


def _prime(executor: TileLangExecutor, specs: Any) -> bool:
    """Launch once on zero-filled scratch inputs so the module is loaded on the device now."""
    import torch

    if specs is None:
        params = executor.jit_kernel.params
        result_idx = set(executor.jit_kernel.adapter.result_idx or ())
        specs = []
        for i, p in enumerate(params):
            if i in result_idx:
                continue
            shape = []
            for dim in p.shape:
                try:
                    shape.append(int(dim))
                except Exception:  # noqa: BLE001 -- a tir.Var: a dynamic size
                    logger.debug(
                        "kernel %s key %r: input %d has a dynamic shape; define prime_args() to "
                        "load it during warmup",
                        executor.kernel,
                        executor.key,
                        i,
                    )
                    return False
            specs.append((p.torch_dtype(), tuple(shape)))
    else:
        specs = [(getattr(torch, s.dtype), tuple(s.shape)) for s in specs]
    inputs = [torch.zeros(shape, dtype=dtype, device="cuda") for dtype, shape in specs]
    executor.launch(*inputs)
    torch.cuda.synchronize()
    return True
