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

A backend supports bundles by satisfying ``warmkit.BundleCapable``
(``cache_fingerprint``, ``cache_dir``, ``cache_scope``, ``relocate_cache_entry``;
``cache_scope(directory)`` yields the directory whose children are the
entries, None = ``directory``), and optionally ``tuned_results(directory) -> list[dict]``: the tuned results
(autotune winners) among the entries, recorded in ``bundle.json`` under the
backend's ``tuned`` and listed by ``bundle inspect``. Building a bundle
(``build_bundle``, which runs a warmup) is in ``_build``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gzip
import hashlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from .. import _envs
from .._exceptions import BundleError
from .._plugin.components import capability, component_of
from .._plugin.contract import (
    BundleCapable,
    CanonicalTargets,
    PreparesEntries,
    entry_check,
    missing_members,
)
from . import signing as _signing
from .integrity import identity, verify_entry, write_record

__all__ = ["BundleInstall", "inspect_bundle", "install_bundle"]

logger = logging.getLogger(__name__)

BUNDLE_FORMAT = "warmkit.bundle"
BUNDLE_VERSION = 1
_META = "bundle.json"


def _bundle_backend(name: str, kernel: str | None = None) -> tuple[Any, BundleCapable]:
    """Backend ``name`` and what provides its ``BundleCapable`` (``capability``).

    Raises:
        BundleError: it has none; the message names what its cache component (or
            the backend itself) lacks.
    """
    from .._plugin.discovery import get_backend

    backend = get_backend(name, kernel=kernel)
    cache = capability(backend, BundleCapable)
    if cache is None:
        missing = missing_members(component_of(backend, BundleCapable), BundleCapable)
        raise BundleError(
            f"backend {name!r} does not support bundles (it lacks {', '.join(missing)} of "
            "warmkit.BundleCapable)",
            backend=name,
        )
    return backend, cache


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
    refused = meta.get("refused", [])
    if not isinstance(refused, list) or not all(
        isinstance(r, dict) and all(isinstance(r.get(f), str) for f in ("kernel", "key", "reason"))
        for r in refused
    ):
        raise BundleError(
            "bundle.json is malformed: 'refused' (the keys a --skip-refused build left out) must "
            "be a list of {kernel, key, reason} strings; rebuild the bundle",
            path=path,
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
        prepared: backend name -> what its ``prepare_entries`` did on this
            host (``warmkit.PreparesEntries``), or why it did not; a backend
            without the capability is absent.
    """

    installed: tuple[str, ...]
    unchanged: tuple[str, ...]
    replaced: tuple[str, ...]
    directories: dict[str, str]
    signed_by: str | None = None
    prepared: dict[str, str] = attrs.field(factory=dict)

    @property
    def present(self) -> tuple[str, ...]:
        """The former name of ``unchanged``."""
        return self.unchanged


def _check_fingerprint(
    name: str, recorded: Mapping[str, Any], here: Mapping[str, Any], path: Path
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
    cache_dirs: Mapping[str, str | os.PathLike[str]] | None = None,
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
            the bundle; default ``WARMKIT_TRUST`` (or its alias
            ``WARMKIT_BUNDLE_TRUST``); none = signatures are not required
            (hashes are always checked).

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
            backend, cache = _bundle_backend(name)
            here = _serving_target(backend, name, meta.get("target"), serving, p)
            _check_fingerprint(name, info["fingerprint"], cache.cache_fingerprint(here), p)
            dest = Path((cache_dirs or {}).get(name) or cache.cache_dir())
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
    prepared = {
        name: _prepare_entries(name, preparer, dest, expected)
        for name, backend, dest, expected in plans
        if (preparer := capability(backend, PreparesEntries)) is not None
    }
    logger.info(
        "bundle %s: %d entr(ies) installed, %d unchanged, %d replaced%s",
        path,
        len(installed),
        len(unchanged),
        len(replaced),
        f", signed by {signed_by}" if signed_by else "",
    )
    return BundleInstall(
        tuple(installed), tuple(unchanged), tuple(replaced), directories, signed_by, prepared
    )


def _prepare_entries(
    name: str, preparer: PreparesEntries, dest: Path, expected: dict[str, Any]
) -> str:
    """The backend's ``prepare_entries`` over every entry of the bundle; a failure is a warning.

    The entries are published and sound either way: what preparing builds,
    the runtime builds at its first load instead, so the install stands.
    """
    from .._plugin.discovery import call_hook

    entries = sorted({PurePosixPath(r).parts[0] for r in expected})
    try:
        summary = call_hook(name, "prepare_entries", preparer.prepare_entries, dest, entries)
    except Exception as exc:  # noqa: BLE001 - a plugin's failure is reported, never hidden
        summary = (
            f"not prepared: {exc} (the runtime builds what is missing at its first load of "
            "each entry)"
        )
        logger.warning("bundle install: backend %r: %s", name, summary)
        return summary
    logger.info("bundle install: backend %r: %s", name, summary)
    return str(summary)


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
    targets = capability(backend, CanonicalTargets)
    spell = targets.canonical_target if targets is not None else str
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
        dst = staging / rel if staging is not None else None
        h, size = _copy_member(src, dst, member.name, key, path)
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


#: Write errors that are the local disk's, not the bundle's: what each means.
_DISK_ERRORS = {
    errno.ENOSPC: "the disk is full (ENOSPC)",
    errno.EDQUOT: "the disk quota is exceeded (EDQUOT)",
    errno.EFBIG: "the file is larger than its filesystem or a limit allows (EFBIG)",
}


def _copy_member(src: Any, dst: Path | None, name: str, key: str, path: Path) -> tuple[Any, int]:
    """Read one bundle member to its end (hashing it), copying it to ``dst`` unless None.

    A read that fails is the bundle's fault (truncated, corrupt); a write
    that fails is this host's (a full disk, a file size limit), and says so
    with the path it was writing.

    Raises:
        BundleError: naming the member and what failed.
    """
    h = hashlib.sha256()
    size = 0
    try:
        with contextlib.ExitStack() as stack:
            if dst is not None:
                dst.parent.mkdir(parents=True, exist_ok=True)
                out = stack.enter_context(open(dst, "wb"))
            while True:
                try:
                    chunk = src.read(1 << 20)
                except Exception as exc:
                    raise BundleError(
                        f"bundle entry {name!r} cannot be read ({exc}); the bundle is truncated "
                        "or corrupt",
                        path=path,
                        entry=key,
                    ) from exc
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
                if dst is not None:
                    out.write(chunk)
    except OSError as exc:  # creating, writing or closing dst: the bundle was read fine
        what = _DISK_ERRORS.get(exc.errno or 0, f"{exc.strerror or exc}")
        raise BundleError(
            f"cannot install bundle entry {name!r}: writing {dst} failed: {what}; free space "
            "or raise the limit on that filesystem (the cache directory), then install again",
            path=path,
            entry=key,
        ) from exc
    return h, size


def _publish(backend: Any, staged: Path, final: Path, expected: dict[str, Any], entry: str) -> str:
    cache = capability(backend, BundleCapable)
    assert cache is not None  # install_bundle's and the fleet's backends have bundles
    cache.relocate_cache_entry(staged, final)
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
