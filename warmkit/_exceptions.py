"""Every exception warmkit raises, in one hierarchy.

```
WarmkitError
├── KernelDefinitionError (TypeError)      a JitKernel subclass is malformed
├── ManifestError (ValueError)             a manifest cannot be read or resolved
├── BundleError (ValueError)               a bundle is unreadable, corrupt, or built for another host
├── PluginLoadError (ImportError)          one or more plugins failed to import
├── BackendUnavailableError (RuntimeError) a backend is missing or cannot run here
├── BackendNotImplementedError (NotImplementedError)  a stub backend was asked to compile
├── WarmupError (RuntimeError)             a compile failed during warmup
│   └── CacheMissError                     read-only serving: a key is not in the cache
├── IdentityMismatchError (RuntimeError)   a key's pinned identity cannot be reproduced here
├── StoreError (RuntimeError)              a shared store refused an operation
│   └── StoreUnavailableError (ConnectionError)  the store cannot be reached
├── RuntimeCompileError (RuntimeError)     a compile after warmup, in monitor "error" mode
└── WorkerDiedError (RuntimeError)         a compile worker process died on one key
```

A plugin's own errors subclass ``WarmkitError`` too (with the builtin they
always were), e.g. ``warmkit_triton.TritonNotInstalledError`` (``ImportError``),
``warmkit_triton.SpecializationMismatchError`` (``RuntimeError``),
``warmkit_tilelang.TileLangNotInstalledError``, ``warmkit_cutedsl.CuteDSLNotInstalledError``:
``except warmkit.WarmkitError`` catches every error warmkit or a plugin raises.

Each error carries the object it is about as attributes (kernel, key, plugin,
backend ...) so callers never parse messages. A cause is said once: a log record
that a report's table says too carries ``extra=IN_REPORT``, and the CLI's log
leaves it out (:func:`not_in_report`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BackendNotImplementedError",
    "BackendUnavailableError",
    "BundleError",
    "CacheMissError",
    "IdentityMismatchError",
    "KernelDefinitionError",
    "ManifestError",
    "PluginError",
    "PluginFailure",
    "PluginLoadError",
    "RuntimeCompileError",
    "StoreError",
    "StoreUnavailableError",
    "WarmkitError",
    "WarmupError",
    "WorkerDiedError",
]

#: The ``extra`` of a log record that says what a report's table says too: the CLI and
#: ``warmkit run``, which print the table, leave such records out (a cause is said once).
#: Here, not beside the report: ``warmkit run``'s CLI process filters its log with it before
#: it execs the command, and imports nothing it does not need there (no attrs).
IN_REPORT = {"warmkit_in_report": True}


def not_in_report(record: Any) -> bool:
    """A ``logging`` filter: False for a record logged with ``extra=IN_REPORT``."""
    return not getattr(record, "warmkit_in_report", False)


class WarmkitError(Exception):
    """Base class of every warmkit error."""


class KernelDefinitionError(WarmkitError, TypeError):
    """A ``JitKernel`` subclass is malformed; raised when the class is defined.

    Attributes:
        kernel: the offending class.
    """

    def __init__(self, kernel: type, problem: str) -> None:
        self.kernel = kernel
        self.problem = problem
        super().__init__(f"{kernel.__module__}.{kernel.__qualname__}: {problem}")


class ManifestError(WarmkitError, ValueError):
    """A manifest is malformed, of an unknown version, or names a kernel that cannot be loaded.

    Attributes:
        path: the manifest's path, if it came from a file.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path is not None else message)


class BundleError(WarmkitError, ValueError):
    """A bundle cannot be read, is corrupt, or was built for a different host.

    Attributes:
        path: the bundle's path, if known.
        backend: the backend whose entries are concerned, if any.
        field: the fingerprint field that differs, for a mismatch.
        entry: the file that failed verification, for corruption.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        backend: str | None = None,
        field: str | None = None,
        entry: str | None = None,
    ) -> None:
        self.path = path
        self.backend = backend
        self.field = field
        self.entry = entry
        super().__init__(f"{path}: {message}" if path is not None else message)


class PluginFailure:
    """One plugin that failed to load.

    Attributes:
        name: the entry-point name.
        group: the entry-point group.
        value: the entry point's ``module:attr``.
        distribution: the distribution that provides it, if known.
        version: that distribution's version, if known.
        error: the exception raised while loading it.
    """

    __slots__ = ("distribution", "error", "group", "name", "value", "version")

    def __init__(
        self,
        name: str,
        group: str,
        value: str,
        distribution: str | None,
        version: str | None,
        error: BaseException,
    ) -> None:
        self.name = name
        self.group = group
        self.value = value
        self.distribution = distribution
        self.version = version
        self.error = error

    def __str__(self) -> str:
        dist = (
            f"{self.distribution} {self.version}" if self.distribution else "unknown distribution"
        )
        return (
            f"plugin {self.name!r} ({self.group}, {self.value}, from {dist}): "
            f"{type(self.error).__name__}: {self.error}"
        )

    def __repr__(self) -> str:
        return f"<PluginFailure {self}>"


class PluginLoadError(WarmkitError, ImportError):
    """One or more plugins could not be loaded.

    Attributes:
        failures: one ``PluginFailure`` per plugin, with its distribution, version and cause.
    """

    def __init__(self, failures: Sequence[PluginFailure]) -> None:
        self.failures = tuple(failures)
        lines = "\n".join(f"  - {f}" for f in self.failures)
        super().__init__(
            f"{len(self.failures)} warmkit plugin(s) failed to load:\n{lines}\n"
            "Fix or uninstall the plugin, or leave it out of WARMKIT_PLUGINS."
        )


class PluginError(WarmkitError, RuntimeError):
    """A plugin's hook raised: the error of the plugin (or its environment), named as such.

    Attributes:
        plugin: the plugin's entry-point name (e.g. ``"triton"``).
        hook: the hook that raised (e.g. ``"available"``, ``"prepare_entries"``).
        cause: the exception the hook raised (also ``__cause__``).
    """

    def __init__(self, plugin: str | None, hook: str, where: str, cause: BaseException) -> None:
        self.plugin = plugin
        self.hook = hook
        self.cause = cause
        super().__init__(
            f"{type(cause).__name__}: {cause} (raised by backend plugin {plugin!r} in its "
            f"{hook}() hook, {where}): a fault of the plugin or of what it needs; fix or report it "
            "to the plugin's authors, or leave the plugin out (WARMKIT_PLUGINS, --backends)"
        )


class BackendUnavailableError(WarmkitError, RuntimeError):
    """A backend is not installed, failed its availability check, or is not allowed.

    Attributes:
        backend: the backend's entry-point name.
        kernel: the kernel that needed it, if any.
        reason: why it is unavailable.
        install_hint: the command that fixes it, if known.
    """

    def __init__(
        self,
        backend: str,
        reason: str,
        *,
        kernel: str | None = None,
        install_hint: str | None = None,
    ) -> None:
        self.backend = backend
        self.kernel = kernel
        self.reason = reason
        self.install_hint = install_hint
        who = f"kernel {kernel!r} needs backend {backend!r}" if kernel else f"backend {backend!r}"
        hint = f"; to fix: {install_hint}" if install_hint else ""
        super().__init__(f"{who}, which is unavailable: {reason}{hint}")


class BackendNotImplementedError(WarmkitError, NotImplementedError):
    """A stub backend was asked to compile.

    Attributes:
        backend: the stub's name.
    """

    def __init__(self, backend: str, message: str) -> None:
        self.backend = backend
        super().__init__(message)


class WarmupError(WarmkitError, RuntimeError):
    """A compile failed during warmup.

    Attributes:
        kernel: the kernel's name (of the first failure).
        key: the compile key (of the first failure).
        elapsed: seconds spent on that key before it failed.
        failures: every ``ReportEntry`` that failed (one in fail-fast mode).
        report: the ``WarmupReport`` so far: what succeeded is listed too.
    """

    def __init__(
        self,
        message: str,
        *,
        kernel: str | None = None,
        key: object = None,
        elapsed: float | None = None,
        failures: Sequence[Any] = (),
        report: Any = None,
    ) -> None:
        self.kernel = kernel
        self.key = key
        self.elapsed = elapsed
        self.failures = tuple(failures)
        self.report = report
        super().__init__(message)


class IdentityMismatchError(WarmkitError, RuntimeError):
    """A key's pinned identity (``docs/bundles.md``) cannot be reproduced on this host.

    A backend raises it rather than build another variant than the one the
    manifest pinned; the message names the kernel, each global or function,
    and the pinned and local values. ``build_bundle(skip_refused=True)``
    leaves such keys out of a bundle and lists them; every other failure
    still fails the build.
    """


class CacheMissError(WarmupError):
    """Read-only serving (``WarmupConfig(read_only=True)``) found a key missing from the cache.

    Attributes:
        kernel: the kernel's name.
        key: the key that is missing.
        directory: the read-only cache directory it was looked up in.
        reason: why it is missing, in one line (``warmkit explain``'s), if known.
    """

    def __init__(
        self,
        message: str,
        *,
        kernel: str,
        key: object,
        directory: str | os.PathLike[str] | None = None,
        reason: str | None = None,
    ) -> None:
        self.directory = directory
        self.reason = reason
        super().__init__(message + (f"; why: {reason}" if reason else ""), kernel=kernel, key=key)


class StoreError(WarmkitError, RuntimeError):
    """A shared compile store (``WarmupConfig.store``) is misconfigured or refused an operation.

    Attributes:
        url: the store's URL or directory (passwords removed).
        key: the entry concerned, if any.
    """

    def __init__(self, message: str, *, url: str | None = None, key: str | None = None) -> None:
        self.url = url
        self.key = key
        super().__init__(f"store {url}: {message}" if url else message)


class StoreUnavailableError(StoreError, ConnectionError):
    """The shared store cannot be reached (server down, network, permissions of a directory)."""


class RuntimeCompileError(WarmkitError, RuntimeError):
    """A kernel variant would compile, or autotune, after warmup while the monitor is in ``"error"`` mode.

    Raised *before* compiling (or benchmarking).

    Attributes:
        kernel: the kernel's name.
        key: the key (or backend specialization, or autotune key) that missed.
        backend: the backend's name.
        context: the caller's runtime context, if any.
        kind: ``"compile"``, or ``"autotune"`` for a runtime autotune benchmark.
    """

    def __init__(
        self,
        kernel: str,
        key: object,
        backend: str | None,
        context: object = None,
        *,
        kind: str = "compile",
    ) -> None:
        self.kernel = kernel
        self.key = key
        self.backend = backend
        self.context = context
        self.kind = kind
        ctx = f" (context: {context})" if context is not None else ""
        what = "autotune benchmark" if kind == "autotune" else "compile"
        super().__init__(
            f"runtime {what} of kernel {kernel!r} key {key!r} on backend {backend!r}{ctx} "
            "after warmup. Add this variant to the kernel's registrations or manifest, "
            "wrap a legitimate lazy compile in warmkit.monitor.allow(reason), "
            "or set the monitor to 'warn'."
        )


class WorkerDiedError(WarmkitError, RuntimeError):
    """A compile worker process died while compiling one key (``docs/performance.md``).

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        exitcode: the worker's exit code (negative: the signal), if known.
    """

    def __init__(self, kernel: str, key: object, exitcode: int | None, detail: str) -> None:
        self.kernel = kernel
        self.key = key
        self.exitcode = exitcode
        super().__init__(
            f"kernel {kernel!r} key {key!r}: the compile worker process died (exit code "
            f"{exitcode}) while compiling it: {detail}. The compiler crashes on this key; "
            "WARMKIT_COMPILE_PROCESSES=off compiles in-process (where a crash stops the warmup)"
        )


def naming(exc: Exception, where: str) -> Exception:
    """``exc`` with ``where`` in its message: the same type, so callers' ``except`` still match.

    An exception of a type that cannot be rebuilt from one message (a custom
    ``__init__``) keeps its own message and gets ``where`` as a note (PEP 678),
    which the CLI and the report print with it.
    """
    if where in str(exc):
        return exc
    try:
        named = type(exc)(f"{where}: {exc}")
    except Exception:  # noqa: BLE001 -- a constructor of its own: a note instead
        named = None
    if named is None or where not in str(named):
        exc.add_note(f"warmkit: {where}")
        return exc
    return named
