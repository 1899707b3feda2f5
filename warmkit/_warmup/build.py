"""Building a bundle: warm a registry up into fresh caches, verify the entries, pack them.

This is orchestration (it runs ``warmkit.warmup``), so it lives apart from
``_bundle`` (the format, inspection and installation), which never imports the
warmup back. See ``docs/bundles.md``.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import logging
import os
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any

from .._cache import signing as _signing
from .._cache.bundle import _META, BUNDLE_FORMAT, BUNDLE_VERSION, _bundle_backend
from .._cache.integrity import iter_entries, sha256_file, verify_entry
from .._exceptions import BundleError, IdentityMismatchError, WarmupError
from .._plugin.components import capability
from .._plugin.contract import BundleCapable, TunedResults, entry_check
from .._registry.recorded import resolve_recorded
from .._version import __version__
from .config import WarmupConfig, deliberate
from .orchestrate import warmup

__all__ = ["build_bundle"]

logger = logging.getLogger(__name__)


def build_bundle(
    registry: Any,
    out: str | os.PathLike[str],
    *,
    target: str | None = None,
    jobs: int | None = None,
    progress: str = "auto",
    sign: str | os.PathLike[str] | None = None,
    skip_refused: bool = False,
) -> dict[str, Any]:
    """Compile every key of ``registry`` for ``target`` into fresh caches and pack them into ``out``.

    Run it in a process that has not compiled these kernels yet (the CLI
    does): a variant already in memory writes no cache entry.

    Args:
        registry: a ``WarmupRegistry`` (e.g. ``WarmupRegistry.load(manifest)``).
        out: the ``.wkb`` file to write (atomically).
        target: e.g. ``"cuda:90"``; None = this host's device.
        jobs: parallel compiles; None = automatic.
        progress: as ``WarmupConfig.progress``.
        sign: an Ed25519 private key (PEM) to sign the bundle with (``docs/bundles.md``).
        skip_refused: leave out the keys whose pinned identity this host cannot
            reproduce (``IdentityMismatchError``) instead of failing; they are
            listed in the metadata's ``"refused"`` (kernel, key, reason), and the
            GPU host compiles them. Any other failure still fails the build.

    Returns:
        The bundle's metadata (what ``inspect_bundle`` returns).

    Raises:
        BundleError: a backend without bundle support, or a warmup that wrote no entries.
        WarmupError: a key failed to compile (with ``skip_refused``: a key
            failed for another reason than a refused identity).
        ValueError: an unknown target, an unusable output path or signing key;
            all checked before anything compiles.
    """

    classes, backends = _bundle_backends(registry)
    # Before compiling anything: an unknown target is a ValueError (a usage error), not
    # a failed key per compile.
    fingerprints = {b: cache.cache_fingerprint(target) for b, (_, cache) in backends.items()}
    out = Path(out)
    _check_output(out)
    if sign is not None:
        _signing.sign(b"", sign)  # an unreadable or wrong key fails now, not after compiling
    with tempfile.TemporaryDirectory(prefix="warmkit-bundle-") as tmp:
        roots = {b: Path(tmp, b) for b in backends}
        with contextlib.ExitStack() as stack:
            for b, (_, cache) in backends.items():
                roots[b].mkdir()
                # A backend may keep its entries below the directory it was given
                # (TileLang: <dir>/<version>/<os-arch>/kernels): it yields where they go.
                entries_root = stack.enter_context(cache.cache_scope(roots[b]))
                if entries_root is not None:
                    roots[b] = Path(entries_root)
            for cls in classes.values():
                cls.clear_executors()  # in-memory executors would skip the cache
            report, refused = _build_warmup(registry, target, jobs, progress, skip_refused)
        meta = _metadata(registry, target, report, refused if skip_refused else None)
        kernels = meta["kernels"]
        files: list[tuple[str, Path]] = []
        for b, (backend, _) in backends.items():
            entries = _pack_entries(b, backend, roots[b], out, files)
            if not entries:
                raise BundleError(
                    f"backend {b!r} wrote no cache entries while warming up "
                    f"{len(report.entries)} key(s); were they already "
                    "compiled in this process? Build bundles in a fresh process.",
                    backend=b,
                )
            meta["backends"][b] = {
                "fingerprint": fingerprints[b],
                "entries": entries,
            }
            tuned = capability(backend, TunedResults)
            if tuned is not None:  # e.g. Triton autotune winners
                meta["backends"][b]["tuned"] = tuned.tuned_results(roots[b])
        _write_bundle(out, meta, files, sign)
    logger.info(
        "bundle %s: %d kernel(s), %d file(s), target %s",
        out,
        len(kernels),
        len(files),
        target or "this device",
    )
    return meta


def _metadata(
    registry: Any, target: str | None, report: Any, refused: list[Any] | None
) -> dict[str, Any]:
    """The bundle's metadata before its backends' entries: the keys built, and those left out."""
    kernels: dict[str, list[str]] = {}
    for e in report.entries:
        if e.status != "failed":
            kernels.setdefault(e.kernel, []).append(repr(e.key))
    meta: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "warmkit_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "target": target,
        "kernels": kernels,
        "manifest": registry.to_dict(),
        "warmup_seconds": round(report.seconds, 3),
        "backends": {},
    }
    if refused is not None:  # skip_refused: listed even when empty, so "none" is said
        meta["refused"] = [
            {"kernel": e.kernel, "key": repr(e.key), "reason": str(e.exception)}
            for e in refused
        ]
    return meta


def _build_warmup(
    registry: Any, target: str | None, jobs: int | None, progress: str, skip_refused: bool
) -> tuple[Any, list[Any]]:
    """The build's warmup: its report, and the keys it refused (``skip_refused`` only)."""
    config = WarmupConfig(
        target=target,
        jobs=jobs,
        monitor="off",
        progress=progress,
        on_error="collect" if skip_refused else "raise",
    )
    try:
        # WARMKIT_STORE, _RECORD, _MONITOR ... do not apply to a build, on purpose
        return warmup(deliberate(config), registry), []
    except WarmupError as exc:
        if not skip_refused or exc.report is None:
            raise
        if not all(_refusal(e.exception) for e in exc.failures):
            raise  # every failure is listed, the refused ones included: said once
        refused = list(exc.failures)
        logger.warning(
            "bundle build: %d key(s) left out, their pinned identity cannot be reproduced on "
            "this host (the serving host will compile them):\n%s",
            len(refused),
            "\n".join(f"  - {e.kernel} {e.key!r}: {e.exception}" for e in refused),
        )
        return exc.report, refused


def _refusal(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps, e.g. a ``PluginError``) is an ``IdentityMismatchError``."""
    while exc is not None:
        if isinstance(exc, IdentityMismatchError):
            return True
        exc = exc.__cause__ or getattr(exc, "cause", None)
    return False


def _bundle_backends(
    registry: Any,
) -> tuple[dict[str, Any], dict[str, tuple[Any, BundleCapable]]]:
    """The kernel classes of ``registry`` by name, and their backends with their ``BundleCapable``.

    The registrations name the kernels and backends; the keys come from the
    warmup's own report, so the (possibly large) space is expanded only once.

    Raises:
        BundleError: a kernel without a backend, or a backend without bundle support.
    """
    classes = {reg.kernel: reg.kernel_cls for reg in registry}
    for item in resolve_recorded(registry.recorded()):
        if item.kernel is not None:  # the others fail (or are skipped) in the warmup below
            classes.setdefault(type(item.kernel).name, type(item.kernel))
    backends: dict[str, tuple[Any, BundleCapable]] = {}
    for name, cls in classes.items():
        b = cls.backend
        if b is None:
            raise BundleError(
                f"kernel {name!r} compiles itself (no backend); it cannot be bundled", backend=None
            )
        if b not in backends:
            backends[b] = _bundle_backend(b, kernel=name)
    return classes, backends


def _pack_entries(
    b: str, backend: Any, root: Path, out: Path, files: list[tuple[str, Path]]
) -> list[dict[str, Any]]:
    """The file records of backend ``b``'s entries under ``root``; adds each file to ``files``.

    Raises:
        BundleError: an entry is corrupt right after compiling: never pack what install
            could not trust.
    """
    entries = []
    check = entry_check(backend)
    for entry in iter_entries(root):
        problems = verify_entry(entry, check)
        if problems:
            raise BundleError(
                f"cache entry {entry.name} of backend {b!r} is corrupt right after "
                f"compiling it ({'; '.join(problems)}); nothing was written to {out}",
                backend=b,
                entry=entry.name,
            )
        for path in sorted(entry.rglob("*")):
            if path.is_file():
                rel = path.relative_to(root).as_posix()
                entries.append(
                    {"path": rel, "sha256": sha256_file(path), "size": path.stat().st_size}
                )
                files.append((f"backends/{b}/{rel}", path))
    return entries


def _write_bundle(
    out: Path, meta: dict[str, Any], files: list[tuple[str, Path]], sign: Any
) -> None:
    """The ``.wkb``: metadata, its signature when ``sign``, then the files; written atomically."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{uuid.uuid4().hex}.partial")
    try:
        with tarfile.open(partial, "w:gz") as tar:
            data = json.dumps(meta, indent=2, sort_keys=True).encode()
            info = tarfile.TarInfo(_META)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
            if sign is not None:
                sig = _signing.sign(data, sign)
                info = tarfile.TarInfo(_signing.SIGNATURE_MEMBER)
                info.size = len(sig)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(sig))
            for arcname, path in files:
                tar.add(path, arcname=arcname, recursive=False)
        os.replace(partial, out)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write bundle {out}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


def _check_output(out: Path) -> None:
    """Refuse an output path that cannot be written before compiling anything into it.

    Raises:
        ValueError: ``out`` is a directory, or its parent cannot be a directory.
        PermissionError: the parent directory is not writable (names it).
    """
    if out.is_dir():
        raise ValueError(
            f"bundle output {out} is a directory; give a file name, e.g. {out}/kernels.wkb"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ValueError(
            f"bundle output {out}: {exc.filename or out.parent} is not a directory"
        ) from exc
    if not os.access(out.parent, os.W_OK):
        raise PermissionError(f"bundle output {out}: directory {out.parent} is not writable")
