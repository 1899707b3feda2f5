"""``CuteDSLBackend``: the ``cutedsl`` entry point of ``warmkit.backends``.

CuTe DSL keeps no persistent cache of its own that a device run would find, so
this backend keeps one: each variant is compiled with ``cute.compile(fn,
*fake args, options="--gpu-arch sm_90a --enable-tvm-ffi")`` and exported
(``export_to_c``) to ``<cache_dir>/<id>/kernel.o``, with ``entry.json``
recording its sha256 and size. ``<id>`` is a sha256 of the kernel's name and
function source, its compile arguments, the arch, the options, the CuTe DSL and
TVM-FFI versions, so a CPU host and the H200 compute the same id.

* **ahead of time** (``target="cuda:90"``): compile and export, no GPU needed;
* **device** (``target=None``): the same id; if its export is there and
  verifies, load it (``cute.runtime.load_module``), else compile, export and
  load; then launch once on scratch tensors, so the first real call loads nothing.

An entry that fails its check is never loaded: it is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from warmkit import BackendStatus, Target
from warmkit._plugin.contract import early_context, local_capability

from . import _cute_api as api
from . import _hooks
from ._kernel import CuteArtifact, CuteExecutor, FakeTensor

__all__ = ["CuteDSLBackend"]

logger = logging.getLogger(__name__)

OBJECT = "kernel.o"
RECORD = "entry.json"
SYMBOL = "warmkit_entry"

_scope_lock = threading.Lock()
_redirect: list[Path] = []


def _arch(target: str | Target) -> str:
    """``"cuda:90"`` (any of ``warmkit.Target.parse``'s spellings) -> ``"sm_90a"``, what CuTe DSL compiles."""
    try:
        tgt = Target.parse(target)
        ok = tgt.platform == "cuda" and tgt.feature in ("", "a") and tgt.capability in (90, 100)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"unknown CuTe DSL target {target!r}: use 'cuda:90' (sm_90a) or 'cuda:100' (sm_100a)"
        )
    return f"sm_{tgt.capability}a"


def _device_target() -> str | None:
    cc = local_capability()  # libcuda's before torch is imported (no import: 1.5-1.8 s)
    return None if cc is None else f"cuda:{cc[0]}{cc[1]}"


def _source_identity(fn: Any) -> str:
    """``module.qualname`` and the sha256 of the defining module's file.

    Not the function's own source: CuTe's preprocessor rewrites the function
    behind ``__wrapped__`` when it compiles, so that would change mid-process.
    """
    module = sys.modules.get(getattr(fn, "__module__", ""))
    try:
        text = Path(inspect.getfile(module)).read_bytes() if module is not None else b""
    except (OSError, TypeError):
        text = b""
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
    return f"{name}:{hashlib.sha256(text).hexdigest()}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(entry: Path) -> bool:
    try:
        record = json.loads((entry / RECORD).read_text())
        obj = entry / OBJECT
        return obj.stat().st_size == record["size"] and _sha256(obj) == record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


class CuteDSLBackend:
    """The CuTe DSL backend (entry point ``cutedsl`` in ``warmkit.backends``). See ``docs/cutedsl.md``."""

    name = "cutedsl"

    def available(self) -> BackendStatus:

        try:
            # Metadata, not an import: importing the DSL takes seconds, and `warmkit list`
            # asks every backend (a broken install fails at its first compile, naming it).
            version = api.cute_version()
            if importlib.util.find_spec("cutlass") is None:
                raise api.CuteDSLNotInstalledError("the cutlass module is missing")
        except api.CuteDSLNotInstalledError as exc:
            return BackendStatus(ok=False, reason=str(exc), install_hint=api.INSTALL_HINT)
        return BackendStatus(ok=True, reason=f"CuTe DSL {version}", version=version)

    def default_target(self) -> str | None:
        return _device_target()

    def canonical_target(self, target: str) -> str:
        return "cuda:" + _arch(target)[3:-1]

    def parallelism(self, target: str | None) -> int:
        return (
            1  # cute.compile holds DSL-global state (compile options, kernel info): one at a time
        )

    def compile_scope(
        self, target: str | None, jobs: int
    ) -> contextlib.AbstractContextManager[object]:
        """Check the target string early; a device warmup starts CUDA beside CuTe DSL's import.

        The start (``early_context``) overlaps the driver's and the device's start
        with the imports the first key makes (CuTe DSL's, torch's), not after them.
        """
        if target is not None:
            _arch(target)
        return early_context(target is None)

    # -- compiling ---------------------------------------------------------------------------

    def _entry_id(self, kernel: Any, fn: Any, args: tuple[Any, ...], arch: str) -> str:
        doc = {
            "kernel": kernel.name,
            "source": _source_identity(fn),
            "args": [repr(a) for a in args],
            "arch": arch,
            "options": api.compile_options(arch),
            "cutedsl": api.cute_version(),
            "tvm_ffi": api.tvm_ffi_version(),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
        """Compile (or find) ``key``'s export for ``target``; load it when ``target`` is None.

        Raises:
            CuteDSLNotInstalledError; ValueError (unknown target); RuntimeError
            (device mode without a GPU; the message says how to compile ahead of time).
        """
        api.require_cute()
        name = kernel.name
        tgt = target if target is not None else _device_target()
        if tgt is None:
            raise RuntimeError(
                f"kernel {name!r}: no CUDA GPU is visible, so CuTe DSL cannot compile for this device. "
                "Compile ahead of time with a target, e.g. warmkit.WarmupConfig(target='cuda:90')"
            )
        arch = _arch(tgt)
        fn = type(kernel).jit_function()
        args = tuple(kernel.compile_args(key))
        entry = self.cache_dir() / self._entry_id(kernel, fn, args, arch)
        hit = _verified(entry)
        if not hit:
            if entry.exists():
                logger.warning(
                    "kernel %s key %r: export %s fails its check; rebuilding", name, key, entry
                )
            self._build(fn, args, arch, entry)
        if target is not None:
            return CuteArtifact(name, key, tgt, arch, entry, hit)
        executor = CuteExecutor(name, key, api.load(str(entry / OBJECT), SYMBOL), entry, hit)
        if getattr(kernel, "prime", True):
            executor.primed = _prime(executor, args)
        return executor

    def _build(self, fn: Any, args: tuple[Any, ...], arch: str, entry: Path) -> None:
        cute = api.require_cute()
        real = [
            api.fake_tensor(a.dtype, a.shape, a.align) if isinstance(a, FakeTensor) else a
            for a in args
        ]
        with _hooks_probe():
            compiled = cute.compile(fn, *real, options=api.compile_options(arch))
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
        try:
            api.export(compiled, str(staging / OBJECT), SYMBOL)
            obj = staging / OBJECT
            record = {"sha256": _sha256(obj), "size": obj.stat().st_size, "arch": arch}
            (staging / RECORD).write_text(json.dumps(record, sort_keys=True))
            if entry.exists():  # a bad entry: swap it out
                shutil.rmtree(entry, ignore_errors=True)
            try:
                os.rename(staging, entry)
            except OSError:
                if not _verified(entry):  # another process published a good one first, else fail
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # -- persistent cache (bundles) -------------------------------------------------------------

    def cache_dir(self) -> Path:
        """``CUTE_DSL_CACHE_DIR/warmkit-exports`` if set, else ``~/.cache/warmkit/cutedsl`` (absolute)."""
        with _scope_lock:
            if _redirect:
                return _redirect[-1]
        base = os.environ.get("CUTE_DSL_CACHE_DIR")
        root = (
            Path(base) / "warmkit-exports"
            if base
            else Path.home() / ".cache" / "warmkit" / "cutedsl"
        )
        return root.resolve()

    def cache_fingerprint(self, target: str | None) -> dict[str, str]:
        """``target``, ``arch``, ``cutedsl`` and ``tvm_ffi`` versions: all part of an entry's id."""
        target = target or self.default_target()
        if target is None:
            raise ValueError("no target given and no GPU here: pass a target, e.g. 'cuda:90'")
        return {
            "target": self.canonical_target(target),
            "arch": _arch(target),
            "cutedsl": api.cute_version(),
            "tvm_ffi": str(api.tvm_ffi_version()),
        }

    @contextlib.contextmanager
    def cache_scope(self, directory: str | os.PathLike[str]) -> Iterator[Path]:
        path = Path(directory).resolve()
        path.mkdir(parents=True, exist_ok=True)
        with _scope_lock:
            _redirect.append(path)
        try:
            yield path
        finally:
            with _scope_lock:
                _redirect.remove(path)

    def relocate_cache_entry(self, staged: Path, final: Path) -> None:
        """Nothing to rewrite: an export holds no path."""

    def verify_cache_entry(self, entry: Path) -> list[str]:
        """Problems of one export (empty = good)."""
        return [] if _verified(Path(entry)) else [f"{entry}: {OBJECT} does not match {RECORD}"]

    # -- monitor ----------------------------------------------------------------------------------

    def install_monitor(self) -> None:
        """Report every runtime CuTe DSL compile to ``warmkit.monitor`` (idempotent).

        The hooks go in once ``cutlass.cute`` is imported: arming the monitor of a
        process that never imports it no longer imports it (seconds).
        """
        if importlib.util.find_spec("cutlass") is None:  # the package: finding it imports nothing
            return
        _hooks.install_when_imported()

    def uninstall_monitor(self) -> None:
        _hooks.uninstall()

    def __repr__(self) -> str:
        return "<CuteDSLBackend>"


@contextlib.contextmanager
def _hooks_probe() -> Iterator[None]:
    from warmkit import monitor

    with monitor.managed_compile():
        yield


def _prime(executor: CuteExecutor, args: tuple[Any, ...]) -> bool:
    import torch

    real = [
        torch.zeros(a.shape, dtype=getattr(torch, a.dtype), device="cuda")
        if isinstance(a, FakeTensor)
        else a
        for a in args
    ]
    executor.launch(*real)
    torch.cuda.synchronize()
    return True
