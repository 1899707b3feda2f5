"""Bundles: precompile once on any host, ship the backend's cache entries, install them anywhere.

A bundle (``.wkb``) is a gzipped tar holding ``bundle.json`` and, per backend,
the cache entries a warmup produced, under ``backends/<backend>/<entry>/<file>``.
``bundle.json`` records the target, each backend's *fingerprint* (what the
entries are valid for: DSL version, CPython ABI, assembler version,
cache-relevant environment ...) and a sha256 and size per file.

Install refuses a fingerprint mismatch (naming the field), verifies every
hash before anything becomes visible, lets the backend relocate each entry
(Triton's group files hold absolute paths), and publishes each entry with one
atomic ``rename``, so concurrent installs end with a correct cache and a
repeated install changes nothing.

A backend supports bundles by providing, besides the core interface:

``cache_fingerprint(target) -> dict[str, str]``
    the fields that must match between the building and the installing host;
``cache_dir() -> pathlib.Path``
    where the runtime looks entries up;
``cache_scope(directory) -> ContextManager[Path | None]``
    redirect the persistent cache to ``directory`` while a bundle is built; it
    yields the directory whose children are the entries (None = ``directory``),
    the same layout ``cache_dir()`` names on the installing host;
``relocate_cache_entry(staged: Path, final: Path) -> None``
    rewrite whatever in ``staged`` refers to its own location, for ``final``.

and optionally ``tuned_results(directory) -> list[dict]``: the tuned results
(autotune winners) among the entries, recorded in ``bundle.json`` under the
backend's ``tuned`` and listed by ``bundle inspect``.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import errno
import functools
import gzip
import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
import tempfile
import uuid
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from . import _envs, _signing
from ._backend import BundleCapable, CanonicalTargets, TunedResults, entry_check, missing_members
from ._exceptions import BundleError
from ._integrity import identity, iter_entries, sha256_file, verify_entry, write_record
from ._record import resolve_recorded

__all__ = ["BundleInstall", "build_bundle", "inspect_bundle", "install_bundle"]

logger = logging.getLogger(__name__)

BUNDLE_FORMAT = "warmkit.bundle"
BUNDLE_VERSION = 1
_META = "bundle.json"


def _bundle_backend(name: str, kernel: str | None = None) -> Any:
    from ._plugins import get_backend

    backend = get_backend(name, kernel=kernel)
    missing = missing_members(backend, BundleCapable)
    if missing:
        raise BundleError(
            f"backend {name!r} does not support bundles (it lacks {', '.join(missing)} of "
            "warmkit.BundleCapable)",
            backend=name,
        )
    return backend


def build_bundle(
    registry: Any,
    out: str | os.PathLike[str],
    *,
    target: str | None = None,
    jobs: int | None = None,
    progress: str = "auto",
    sign: str | os.PathLike[str] | None = None,
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

    Returns:
        The bundle's metadata (what ``inspect_bundle`` returns).

    Raises:
        BundleError: a backend without bundle support, or a warmup that wrote no entries.
        WarmupError: a key failed to compile.
        ValueError: an unknown target, an unusable output path or signing key;
            all checked before anything compiles.
    """
    from . import __version__
    from ._warmup import WarmupConfig, warmup

    # The registrations name the kernels and backends; the keys come from the warmup's
    # own report, so the (possibly large) space is expanded only once.
    classes = {reg.kernel: reg.kernel_cls for reg in registry}
    for item in resolve_recorded(registry.recorded()):
        if item.kernel is not None:  # the others fail (or are skipped) in the warmup below
            classes.setdefault(type(item.kernel).name, type(item.kernel))
    backends: dict[str, Any] = {}
    for name, cls in classes.items():
        b = cls.backend
        if b is None:
            raise BundleError(
                f"kernel {name!r} compiles itself (no backend); it cannot be bundled", backend=None
            )
        if b not in backends:
            backends[b] = _bundle_backend(b, kernel=name)

    # Before compiling anything: an unknown target is a ValueError (a usage error), not
    # a failed key per compile.
    fingerprints = {b: backend.cache_fingerprint(target) for b, backend in backends.items()}
    out = Path(out)
    _check_output(out)
    if sign is not None:
        _signing.sign(b"", sign)  # an unreadable or wrong key fails now, not after compiling
    with tempfile.TemporaryDirectory(prefix="warmkit-bundle-") as tmp:
        roots = {b: Path(tmp, b) for b in backends}
        with contextlib.ExitStack() as stack:
            for b, backend in backends.items():
                roots[b].mkdir()
                # A backend may keep its entries below the directory it was given
                # (TileLang: <dir>/<version>/<os-arch>/kernels): it yields where they go.
                entries_root = stack.enter_context(backend.cache_scope(roots[b]))
                if entries_root is not None:
                    roots[b] = Path(entries_root)
            for cls in classes.values():
                cls.clear_executors()  # in-memory executors would skip the cache
            report = warmup(
                WarmupConfig(target=target, jobs=jobs, monitor="off", progress=progress),
                registry,
            )
        kernels: dict[str, list[str]] = {}
        for e in report.entries:
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
        files: list[tuple[str, Path]] = []
        for b, backend in backends.items():
            entries = []
            check = entry_check(backend)
            for entry in iter_entries(roots[b]):
                # Never pack what could not be trusted at install.
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
                        rel = path.relative_to(roots[b]).as_posix()
                        entries.append(
                            {"path": rel, "sha256": sha256_file(path), "size": path.stat().st_size}
                        )
                        files.append((f"backends/{b}/{rel}", path))
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
            if isinstance(backend, TunedResults):  # e.g. Triton autotune winners
                meta["backends"][b]["tuned"] = backend.tuned_results(roots[b])
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
    logger.info(
        "bundle %s: %d kernel(s), %d file(s), target %s",
        out,
        len(kernels),
        len(files),
        target or "this device",
    )
    return meta


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


def _read_meta(tar: tarfile.TarFile, path: Path) -> dict[str, Any]:
    try:
        member = tar.getmember(_META)
        f = tar.extractfile(member)
        meta = json.loads(f.read()) if f is not None else None
    except (KeyError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"not a warmkit bundle ({exc})", path=path) from exc
    if not isinstance(meta, dict) or meta.get("format") != BUNDLE_FORMAT:
        raise BundleError("not a warmkit bundle (bad bundle.json)", path=path)
    if not isinstance(meta.get("backends"), dict):
        raise BundleError("not a warmkit bundle (bundle.json lists no backends)", path=path)
    for name, info in meta["backends"].items():
        if not (
            isinstance(info, dict)
            and isinstance(info.get("fingerprint"), dict)
            and isinstance(info.get("entries"), list)
            and all(
                isinstance(e, dict) and {"path", "sha256", "size"} <= set(e)
                for e in info["entries"]
            )
        ):
            raise BundleError(
                f"bundle.json is malformed: backend {name!r} needs a 'fingerprint' object and "
                "'entries' of {path, sha256, size}; rebuild the bundle",
                path=path,
                backend=name,
            )
    if meta.get("version") != BUNDLE_VERSION:
        raise BundleError(
            f"bundle version {meta.get('version')!r} is not supported (this warmkit reads "
            f"version {BUNDLE_VERSION}); rebuild it with this warmkit",
            path=path,
        )
    return meta


@contextlib.contextmanager
def _open(path: str | os.PathLike[str]) -> Iterator[tuple[tarfile.TarFile, dict[str, Any], Path]]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such bundle: {p}")
    try:
        with tarfile.open(p, "r:*") as tar:
            yield tar, _read_meta(tar, p), p
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BundleError(
            f"cannot read bundle ({type(exc).__name__}: {exc}): it is truncated or corrupt",
            path=p,
        ) from exc


def _drain(tar: tarfile.TarFile) -> None:
    """Read the archive to its end, so gzip checks its CRC: a flipped bit anywhere is found."""
    tar.getmembers()
    while tar.fileobj is not None and tar.fileobj.read(1 << 20):
        pass


def _member(tar: tarfile.TarFile, name: str) -> bytes | None:
    """The bytes of member ``name``, or None when the bundle has none."""
    try:
        f = tar.extractfile(tar.getmember(name))
    except KeyError:
        return None
    return f.read() if f is not None else None


def inspect_bundle(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The bundle's metadata, totals (tuned results too) and signature, after checking every sha256.

    Raises:
        BundleError: not a readable bundle, or a file that does not match its sha256.
    """
    with _open(path) as (_tar, meta, _p):
        totals = {
            "kernels": len(meta.get("kernels", {})),
            "keys": sum(len(v) for v in meta.get("kernels", {}).values()),
            "files": sum(len(b["entries"]) for b in meta["backends"].values()),
            "bytes": sum(e["size"] for b in meta["backends"].values() for e in b["entries"]),
            "tuned": sum(len(b.get("tuned", ())) for b in meta["backends"].values()),
        }
        # Every file against its recorded sha256: inspect says whether the bundle is intact.
        for name, info in meta["backends"].items():
            _extract_verified(_tar, name, {e["path"]: e for e in info["entries"]}, None, _p)
        _drain(_tar)
        signature = _signing.describe(_member(_tar, _signing.SIGNATURE_MEMBER))
        return meta | {"totals": totals, "signature": signature}


@attrs.frozen
class BundleInstall:
    """What ``install_bundle`` did.

    Attributes:
        installed: cache entries published by this call.
        unchanged: entries already there and identical (a re-install).
        replaced: entries that were there but differed (e.g. a half-written or corrupt one).
        directories: backend name -> the cache directory it installed into.
        signed_by: the id of the trusted key that signed the bundle, or None
            when no trust is configured.
    """

    installed: tuple[str, ...]
    unchanged: tuple[str, ...]
    replaced: tuple[str, ...]
    directories: dict[str, str]
    signed_by: str | None = None

    @property
    def present(self) -> tuple[str, ...]:
        """The former name of ``unchanged``."""
        return self.unchanged


def _check_fingerprint(
    name: str, recorded: dict[str, Any], here: dict[str, Any], path: Path
) -> None:
    for field in sorted(set(recorded) | set(here)):
        if recorded.get(field) != here.get(field):
            raise BundleError(
                f"bundle was built for {field}={recorded.get(field)!r} but this host has "
                f"{field}={here.get(field)!r} (backend {name!r}); its entries would never be "
                "looked up here. Rebuild the bundle with the same "
                f"{field} as this host.",
                path=path,
                backend=name,
                field=field,
            )


def _safe_rel(name: str, prefix: str) -> PurePosixPath | None:
    if not name.startswith(prefix):
        return None
    rel = PurePosixPath(name[len(prefix) :])
    if rel.is_absolute() or ".." in rel.parts or len(rel.parts) != 2:
        raise BundleError(f"unsafe or unexpected path in bundle: {name!r}")
    return rel


def install_bundle(
    path: str | os.PathLike[str],
    *,
    cache_dirs: dict[str, str | os.PathLike[str]] | None = None,
    target: str | None = None,
    trust: Sequence[str | os.PathLike[str]] | None = None,
) -> BundleInstall:
    """Verify a bundle and publish its entries where each backend looks them up at runtime.

    Args:
        path: the ``.wkb`` file.
        cache_dirs: backend name -> directory, overriding ``backend.cache_dir()``.
        target: the target the entries will serve; default ``WARMKIT_TARGET``,
            else each backend's local device. A bundle built for another
            target is refused, naming both.
        trust: Ed25519 public keys (PEM files) one of which must have signed
            the bundle; default ``WARMKIT_BUNDLE_TRUST``; none = signatures
            are not required (hashes are always checked).

    Returns:
        A ``BundleInstall`` listing what was installed, already present or replaced.

    Raises:
        BundleError: unreadable bundle, target or fingerprint mismatch (names
            the field), an unsigned or badly signed bundle when trust is
            configured, a truncated or tampered entry (names it), or an unsafe
            path. Nothing is published when verification fails.
        FileNotFoundError: no such bundle file.
    """
    installed: list[str] = []
    unchanged: list[str] = []
    replaced: list[str] = []
    directories: dict[str, str] = {}
    trusted = _signing.trusted_keys(trust)
    with _open(path) as (tar, meta, p):
        signed_by = _signing.verify(
            _member(tar, _META) or b"", _member(tar, _signing.SIGNATURE_MEMBER), trusted, path=p
        )
        unknown = sorted(set(cache_dirs or {}) - set(meta["backends"]))
        if unknown:
            raise ValueError(
                f"cache_dirs names backend {unknown[0]!r}, which has no entries in bundle {p}; "
                f"its backends are {', '.join(sorted(meta['backends']))}"
            )
        serving = target if target is not None else _envs.get("WARMKIT_TARGET")
        # Check every backend's target and fingerprint, then verify every file of every
        # backend, and only then publish: a refusal anywhere installs nothing of the bundle.
        plans = []
        for name, info in meta["backends"].items():
            backend = _bundle_backend(name)
            here = _serving_target(backend, name, meta.get("target"), serving, p)
            _check_fingerprint(name, info["fingerprint"], backend.cache_fingerprint(here), p)
            dest = Path((cache_dirs or {}).get(name) or backend.cache_dir())
            plans.append((name, backend, dest, {e["path"]: e for e in info["entries"]}))
        stagings: list[Path] = []
        try:
            for name, _backend, dest, expected in plans:
                dest.mkdir(parents=True, exist_ok=True)
                directories[name] = str(dest)
                stagings.append(Path(tempfile.mkdtemp(prefix=".warmkit-staging-", dir=dest)))
                _extract_verified(tar, name, expected, stagings[-1], p)
            _drain(tar)
            for (name, backend, dest, expected), staging in zip(plans, stagings):
                for entry in sorted({PurePosixPath(r).parts[0] for r in expected}):
                    outcome = _publish(backend, staging / entry, dest / entry, expected, entry)
                    {"installed": installed, "unchanged": unchanged, "replaced": replaced}[
                        outcome
                    ].append(f"{name}/{entry}")
        finally:
            for staging in stagings:
                shutil.rmtree(staging, ignore_errors=True)
    logger.info(
        "bundle %s: %d entr(ies) installed, %d unchanged, %d replaced%s",
        path,
        len(installed),
        len(unchanged),
        len(replaced),
        f", signed by {signed_by}" if signed_by else "",
    )
    return BundleInstall(
        tuple(installed), tuple(unchanged), tuple(replaced), directories, signed_by
    )


def _serving_target(
    backend: Any, name: str, built: str | None, serving: str | None, path: Path
) -> str | None:
    """The target this install serves for ``backend``; refuse a bundle built for another one."""
    if serving is None:
        serving = backend.default_target()
    if serving is None:
        logger.warning(
            "bundle %s: backend %s has no device here and no target is configured, so the "
            "bundle's target (%s) cannot be checked; pass target= (--target, WARMKIT_TARGET)",
            path,
            name,
            built or "its build host's device",
        )
        return built
    spell = backend.canonical_target if isinstance(backend, CanonicalTargets) else str
    if built is not None and spell(built) != spell(serving):
        raise BundleError(
            f"bundle was built for target {spell(built)} but is installed to serve "
            f"{spell(serving)} (backend {name!r}); its entries would never be looked up. "
            f"Build it with --target {spell(serving)}",
            path=path,
            backend=name,
            field="target",
        )
    return serving


def _extract_verified(
    tar: tarfile.TarFile, backend: str, expected: dict[str, Any], staging: Path | None, path: Path
) -> None:
    """Check every file of ``backend`` against ``bundle.json``, copying it under ``staging`` (None: check only)."""
    prefix = f"backends/{backend}/"
    seen: set[str] = set()
    for member in tar.getmembers():
        rel = _safe_rel(member.name, prefix)
        if rel is None:
            continue
        key = rel.as_posix()
        if not member.isfile():
            raise BundleError(f"bundle entry {member.name!r} is not a regular file", path=path)
        if key not in expected:
            raise BundleError(
                f"bundle entry {member.name!r} is not listed in bundle.json", path=path
            )
        want = expected[key]
        src = tar.extractfile(member)
        assert src is not None
        h = hashlib.sha256()
        size = 0
        dst = staging / rel if staging is not None else None
        try:
            with contextlib.ExitStack() as stack:
                if dst is not None:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    out = stack.enter_context(open(dst, "wb"))
                for chunk in iter(functools.partial(src.read, 1 << 20), b""):
                    h.update(chunk)
                    size += len(chunk)
                    if dst is not None:
                        out.write(chunk)
        except (tarfile.TarError, OSError, EOFError, Exception) as exc:
            raise BundleError(
                f"bundle entry {member.name!r} cannot be read ({exc}); the bundle is truncated",
                path=path,
                entry=key,
            ) from exc
        if size != want["size"] or h.hexdigest() != want["sha256"]:
            raise BundleError(
                f"bundle entry {member.name!r} is corrupt: sha256 {h.hexdigest()[:16]}… size {size}, "
                f"expected {want['sha256'][:16]}… size {want['size']}; refusing to install it",
                path=path,
                entry=key,
            )
        seen.add(key)
    missing = sorted(set(expected) - seen)
    if missing:
        raise BundleError(
            f"bundle is missing {len(missing)} file(s) listed in bundle.json, e.g. {missing[0]!r}",
            path=path,
            entry=missing[0],
        )


def _publish(backend: Any, staged: Path, final: Path, expected: dict[str, Any], entry: str) -> str:
    backend.relocate_cache_entry(staged, final)
    # The record is taken after relocation: it is what the runtime will read.
    write_record(staged)
    problems = verify_entry(staged, entry_check(backend))
    if problems:
        raise BundleError(
            f"bundle entry {entry!r} is unsound ({'; '.join(problems)}); refusing to publish it",
            entry=entry,
        )
    if final.exists():
        if _same(final, staged):
            return "unchanged"
        # A different (e.g. half-written) entry: swap the two directories in one step, so
        # a concurrent reader sees the old entry or the new one, never none.
        try:
            _exchange(staged, final)
        except FileNotFoundError:
            pass  # another installer moved it away first: publish as new, below
        else:
            shutil.rmtree(staged, ignore_errors=True)  # now holds the old entry
            return "replaced"
    try:
        os.rename(staged, final)
    except OSError as exc:
        _raise_unless_published(exc, final, entry)
        return "unchanged"
    return "installed"


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories atomically (Linux ``renameat2(RENAME_EXCHANGE)``).

    Where that is unavailable (another OS, or a filesystem without it), each
    file of ``a`` replaces its namesake in ``b`` with ``os.replace`` (atomic per
    file, so no reader finds a file missing), then ``b``'s extra files go; ``a``
    is left holding nothing of value.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.ENOENT:
            raise FileNotFoundError(err, os.strerror(err), str(b))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(b))
    names = {p.name for p in a.iterdir() if p.is_file()}
    for name in sorted(names):
        os.replace(a / name, b / name)
    for p in b.iterdir():
        if p.name not in names:
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def _raise_unless_published(exc: OSError, final: Path, entry: str) -> None:
    """A rename onto an entry another installer published first is fine; anything else is not."""
    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) and final.is_dir():
        return  # that installer verified the same bundle
    raise BundleError(
        f"cannot publish cache entry {entry!r} at {final}: {exc.strerror or exc}; entries "
        "published before it stay (each one is complete and verified)",
        entry=entry,
    ) from exc


def _same(a: Path, b: Path) -> bool:
    try:
        return identity(a) == identity(b)
    except OSError:
        # ``a`` is being swapped out by a concurrent installer: not the same; the
        # replace path that follows tolerates the race.
        return False
