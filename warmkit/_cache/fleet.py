"""Compile once per fleet: single-flight on one host, a shared store across hosts, read-only serving.

For each key of a warmup whose backend can address its cache entries (the
*entries capability* below), ``Fleet.compile`` does, in order:

1. the backend computes the entry key, without compiling (Triton: its cache hash);
2. the entry is in the local cache: load it (``cached``);
3. read-only serving: a miss is a ``CacheMissError``; nothing is ever written;
4. take the host lock for the key (an OS file lock in the cache directory,
   through ``filelock``; a killed holder's lock is released by the kernel).
   Waiting for it is bounded by ``WARMKIT_WAIT_SECONDS``, then this process
   compiles itself and logs why. When another process of the host compiled
   the key meanwhile, load it (``waited``);
5. with a store: fetch the entry; check that its file names are names the
   backend declares (never paths), its signature when trust is configured
   (``WARMKIT_TRUST``), and every file against its sha256; install it into the
   local cache and load it (``fetched``). A bad entry is logged with its key,
   counted in ``Fleet.refused`` (the report's ``store_refused``) and the
   metrics, deleted from the store and never written or loaded;
6. with a store: take the key's fleet-wide lease (renewed while compiling;
   a dead holder's lease expires after ``WARMKIT_LEASE_SECONDS``). While
   another process holds it, poll the store for its result (``fetched``);
7. compile (``compiled``), then publish the entry in one atomic step.

An unreachable or failing store (any Redis or filesystem error) is warned
about once, naming it; the warmup goes on locally, unless ``store_required=True``
(then the keys fail naming the store).

A backend takes part by being a ``warmkit.FleetCapable`` (its entry key
without compiling, its local entry's directory and files, plus the bundle
capabilities); any other backend's keys compile as without a fleet.

Other entry kinds (autotune results, recorded kernels) use ``current_fleet()``
and ``Fleet.fetch`` / ``Fleet.publish`` with keys of their own kind.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from .. import _envs
from .._exceptions import (
    BundleError,
    CacheMissError,
    StoreError,
    StoreUnavailableError,
    WarmkitError,
)
from .._plugin.components import capability
from .._plugin.contract import FleetCapable, reports_cache_hit
from .misses import miss_reason
from .stores.base import (
    SIGNATURE,
    Lease,
    Store,
    StoredEntry,
    _redact,
    entry_meta,
    name_problems,
    open_store,
    signed_bytes,
    verify_entry,
)

__all__ = ["PROVENANCE", "Fleet", "current_fleet", "provenance_check", "provenance_problems"]

logger = logging.getLogger(__name__)

LOCK_DIR = ".warmkit-locks"
#: Next to an entry installed from a store: its signed manifest, for ``warmkit cache verify``.
PROVENANCE = "warmkit-store.json"

_current: contextvars.ContextVar[Fleet | None] = contextvars.ContextVar(
    "warmkit_fleet", default=None
)


#: ``Fleet.compile(probed=...)`` without the entry's files: ask the backend.
_ASK = object()


def current_fleet() -> Fleet | None:
    """The ``Fleet`` of the warmup in progress in this thread (None outside a warmup).

    A backend or kernel that produces entries of its own kind (autotune
    results, recorded kernels) calls ``fetch``/``publish`` on it.
    """
    return _current.get()


def _read_files(files: Mapping[str, Path]) -> dict[str, bytes]:
    return {name: Path(p).read_bytes() for name, p in files.items()}


@attrs.frozen
class _Job:
    """One key on its way through the fleet: what each step of :meth:`Fleet.compile` names."""

    backend: Any
    entries: FleetCapable  # the backend's (``capability``)
    kernel: Any
    key: Any
    target: str | None
    name: str
    ek: str
    store_key: str

    def compile(self) -> tuple[Any, bool]:
        """The backend's own compile (a load when the entry is there); ``(executor, cache hit)``."""
        executor, cached = self.kernel._warmkit_compile(self.key, self.target)
        return executor, cached or reports_cache_hit(executor)


class Fleet:
    """One warmup's view of the host's other processes and of the shared store.

    Args:
        store: a store URL or directory, or None (the local cache only).
        store_required: an unreachable store fails the keys instead of degrading.
        read_only: load only; write nothing; a miss is a ``CacheMissError``.
    """

    def __init__(
        self, store: str | None, *, store_required: bool = False, read_only: bool = False
    ) -> None:
        self.url = store
        self.store_required = store_required
        self.read_only = read_only
        self.wait_seconds: float = _envs.get("WARMKIT_WAIT_SECONDS")
        self.lease_seconds: float = _envs.get("WARMKIT_LEASE_SECONDS")
        self._store: Store | None = None
        self._down = False
        self._lock = threading.Lock()
        self._bypass_told: set[str] = set()  # kernels told to bypass the store (_bypassed)
        self._leases: dict[str, Lease] = {}
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._checked_dirs: set[Path] = set()
        # id(backend) -> (backend, what provides its FleetCapable, or None): one capability
        # lookup per backend, not per key; the reference keeps the id from being reused meanwhile
        self._entries: dict[int, tuple[Any, FleetCapable | None]] = {}
        self.counts: dict[str, int] = {}
        #: store key -> why its entry was refused (the report's ``store_refused``).
        self.refused: dict[str, str] = {}
        self.trusted: dict[str, Any] = {}
        self.signing_key: str | None = None
        if store is not None and not read_only:
            self.trusted, self.signing_key = _trust()
            if self.trusted and self.signing_key is None:
                logger.info(
                    "warmkit store %s: WARMKIT_TRUST is set and WARMKIT_SIGNING_KEY is not, so "
                    "this process fetches signed entries and publishes none (unsigned ones "
                    "would be refused by every trusting host)",
                    store,
                )
            try:
                self._store = open_store(store)
            except StoreUnavailableError as exc:
                self._degrade(exc)

    # -- the store, degrading when it goes away ---------------------------------------------------

    @property
    def store(self) -> Store | None:
        """The store, or None without one (or after it became unreachable)."""
        return None if self._down else self._store

    def _degrade(self, exc: StoreError) -> None:
        if self.store_required:
            raise exc
        with self._lock:
            first, self._down = not self._down, True
        if first:
            # exc names the store ("store <url>: unreachable or failing (...)")
            logger.warning(
                "warmkit %s; this warmup compiles locally. Set store_required=True "
                "(WARMKIT_STORE_REQUIRED=1) to fail instead.",
                exc if exc.url else f"store {self.url}: {exc}",
            )

    def _call(self, fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
        if self.store is None:
            return default
        try:
            return fn(*args)
        except StoreUnavailableError as exc:
            self._degrade(exc)
            return default

    def fetch(self, key: str) -> dict[str, bytes] | None:
        """The verified files of store entry ``key``; None when absent, unreachable or bad.

        A bad entry (any file whose sha256 or size differs from the manifest,
        a missing or extra file) is logged with its key and deleted from the
        store, so that the next process recompiles and republishes it.
        """
        found = self._fetch_entry(key)
        return dict(found.files) if found is not None else None

    def _fetch_entry(
        self, key: str, allowed: Callable[[str], bool] | None = None
    ) -> StoredEntry | None:
        entry = self._call(lambda: self.store.get(key))  # type: ignore[union-attr]
        if entry is None:
            return None
        problems = verify_entry(entry, allowed) or self._signature_problems(key, entry)
        if problems:
            self._refuse(key, entry, "; ".join(p.removeprefix(f"entry {key}: ") for p in problems))
            return None
        return entry

    def _signature_problems(self, key: str, entry: StoredEntry) -> list[str]:
        return _signature_problems(key, entry.meta, self.trusted)

    def _refuse(self, key: str, entry: StoredEntry, why: str) -> None:
        """Log, count and delete a bad entry: the next process recompiles and republishes it."""
        logger.error(
            "warmkit store %s: refusing entry %s (%s); deleting it from the store and compiling "
            "it again",
            self.url,
            key,
            why,
        )
        # Exactly the entry judged bad (its manifest's bytes as stored, however they are
        # spelled); without a manifest, whatever is there (at worst a good entry republished
        # meanwhile, which is published again).
        self._call(lambda: self.store.delete(key, entry.raw_meta))  # type: ignore[union-attr]
        self._count("refused")
        with self._lock:
            self.refused[key] = why
        from .. import metrics

        metrics.observe_store_refusal(key.split("/", 1)[0])

    def publish(self, key: str, files: Mapping[str, bytes], **info: Any) -> bool:
        """Publish ``files`` as store entry ``key`` in one atomic step; False if not published.

        With ``WARMKIT_SIGNING_KEY`` set, the entry is signed (its files' sha256s
        and its key). A read-only fleet, no store, an unreachable store, trust
        without a signing key (an unsigned entry would be refused), or an entry
        that is already there (it is kept: the first publisher wins) all
        return False.
        """
        if self.read_only or self.store is None or (self.trusted and self.signing_key is None):
            return False
        meta = entry_meta(key, files, **info)
        if self.signing_key is not None:
            from .signing import sign

            meta[SIGNATURE] = json.loads(sign(signed_bytes(meta), self.signing_key))
        return bool(self._call(lambda: self.store.put(key, files, meta), default=False))  # type: ignore[union-attr]

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    # -- leases --------------------------------------------------------------------------------------

    def _hold(self, lease: Lease) -> None:
        with self._lock:
            self._leases[lease.key] = lease
            if self._renewer is None:
                self._renewer = threading.Thread(
                    target=self._renew_loop, name="warmkit-lease", daemon=True
                )
                self._renewer.start()

    def _drop(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop(lease.key, None)
        self._call(lease.release)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            with self._lock:
                held = list(self._leases.values())
            for lease in held:
                if self._call(lease.renew, default=True) is False:
                    logger.warning(
                        "warmkit store %s: lost the lease on %s while compiling it (it expired "
                        "and another process took it over); both may compile it, the first "
                        "publish wins",
                        self.url,
                        lease.key,
                    )

    def close(self) -> None:
        """Release every lease still held, stop renewing and close the store."""
        self._stop.set()
        with self._lock:
            held = list(self._leases.values())
            self._leases.clear()
        for lease in held:
            self._call(lease.release)
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()

    @contextlib.contextmanager
    def active(self) -> Iterator[Fleet]:
        """Make this the ``current_fleet()`` for the block, and close it afterwards."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)
            self.close()

    # -- one key -------------------------------------------------------------------------------------

    def _bypassed(self, name: str) -> None:
        """Say once per kernel that its keys do not go through the configured store."""
        with self._lock:
            if name in self._bypass_told:
                return
            self._bypass_told.add(name)
        logger.warning(
            "kernel %r: its keys do not go through the store %s (their cache entry cannot be "
            "known before compiling: an autotuned or heuristic stack, or a backend without "
            "fleet entries); each host compiles them itself%s",
            name,
            _redact(self.url or ""),
            ", whatever store_required says" if self.store_required else "",
        )

    def compile(
        self, backend: Any, kernel: Any, key: Any, target: str | None, *, probed: Any = None
    ) -> tuple[Any, str]:
        """Compile (or load, wait for, fetch) one key; return ``(executor, status)``.

        ``status`` is ``compiled``, ``cached``, ``waited`` or ``fetched``.

        Args:
            probed: ``(entry_key, files)`` when the caller just asked
                :meth:`entry_key` and the backend's ``entry_files`` for this key
                (so neither is asked twice); files None: not complete then.

        Raises:
            CacheMissError: read-only serving, and the key is not in the cache.
            StoreUnavailableError: the store is unreachable and ``store_required``.
        """
        files: Any = _ASK
        if probed is not None:
            ek, files = probed
        else:
            ek = None if backend is None else self._entry_key(backend, kernel, key, target)
        if ek is None:
            if self.url is not None:
                self._bypassed(type(kernel).name)
            executor, cached = kernel._warmkit_compile(key, target)
            hit = cached or reports_cache_hit(executor)
            if self.read_only and not hit:
                name = type(kernel).name
                raise CacheMissError(
                    f"read-only serving: kernel {name!r} key {key!r} was not in the cache and "
                    "was compiled in memory; add it to the bundle baked into the image",
                    kernel=name,
                    key=key,
                )
            return executor, "cached" if hit else "compiled"

        name, entries = type(kernel).name, self.entries_of(backend)
        assert entries is not None  # an entry key came from it
        job = _Job(backend, entries, kernel, key, target, name, ek, f"{backend.name}/{ek}")
        if (entries.entry_files(ek) if files is _ASK else files) is not None:
            return self._load(job, "cached")
        if self.read_only:
            raise CacheMissError(
                f"read-only serving: kernel {name!r} key {key!r} (entry {ek}) is not in the cache "
                f"{entries.cache_dir()}; nothing may be compiled or written. Add the key to the "
                "bundle baked into the image, or drop read_only (WARMKIT_READ_ONLY)",
                kernel=name,
                key=key,
                directory=str(entries.cache_dir()),
                reason=miss_reason(backend, kernel, key, target),
            )
        with self._host_lock(entries, ek, name, key) as waited:
            if waited and entries.entry_files(ek) is not None:
                return self._load(job, "waited")
            if self.store is None:
                return self._produce(job, None)
            return self._through_store(job)

    def entry_key(self, backend: Any, kernel: Any, key: Any, target: str | None) -> str | None:
        """The backend's entry key for ``key`` (None: unknown, or nothing to load); see :meth:`compile`.

        Raises:
            WarmkitError: the cache directory is not writable (and not ``read_only``).
        """
        return self._entry_key(backend, kernel, key, target)

    @staticmethod
    def entry_files(backend: Any, ek: str | None) -> Mapping[str, Path] | None:
        """The files of entry ``ek`` when it is complete in the local cache (loading it compiles nothing)."""
        entries = None if ek is None else capability(backend, FleetCapable)
        return None if entries is None or ek is None else entries.entry_files(ek)

    def entries_of(self, backend: object) -> FleetCapable | None:
        """What provides ``backend``'s ``FleetCapable`` (``capability``), looked up once per backend."""
        known = self._entries.get(id(backend))
        if known is None:
            known = self._entries[id(backend)] = (backend, capability(backend, FleetCapable))
        return known[1]

    def _entry_key(self, backend: Any, kernel: Any, key: Any, target: str | None) -> str | None:
        entries = None if backend is None else self.entries_of(backend)
        if entries is None or kernel._warmkit_in_memory(key, target):
            return None
        # A kernel whose compile() does not use the backend's entry is caught by _load():
        # it reports what its executor says (cache_hit), never a status it did not earn.
        ek = entries.entry_key(kernel, key, target)
        if ek is not None and not self.read_only:
            self._check_writable(backend.name, entries)
        return ek

    def _check_writable(self, backend: str, entries: FleetCapable) -> None:
        directory = Path(entries.cache_dir())
        if directory in self._checked_dirs:
            return
        try:
            (directory / LOCK_DIR).mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory / LOCK_DIR, prefix=".probe-"):
                pass
        except OSError as exc:
            raise WarmkitError(
                f"the {backend} cache directory {directory} is not writable ({exc}). For a "
                "read-only cache baked into an image, warm up with read_only=True "
                "(WARMKIT_READ_ONLY=1); otherwise point the cache at a writable directory"
            ) from exc
        self._checked_dirs.add(directory)

    @staticmethod
    def _load(job: _Job, status: str) -> tuple[Any, str]:
        executor, hit = job.compile()
        if not hit:
            # The entry vanished or did not match after all (e.g. pruned meanwhile): it was
            # compiled here, and the report must say so.
            logger.info(
                "kernel %s key %r: entry %s was not a cache hit; compiled",
                job.name,
                job.key,
                job.ek,
            )
            return executor, "compiled"
        return executor, status

    @contextlib.contextmanager
    def _host_lock(self, entries: FleetCapable, ek: str, name: str, key: Any) -> Iterator[bool]:
        """Hold the host's lock for ``ek``; yields True when another process held it first."""
        from filelock import FileLock, Timeout

        lock = FileLock(Path(entries.cache_dir()) / LOCK_DIR / f"{ek}.lock", thread_local=False)
        waited = False
        try:
            lock.acquire(timeout=0)
        except Timeout:
            waited = True
            try:
                lock.acquire(timeout=self.wait_seconds)
            except Timeout:
                logger.warning(
                    "kernel %s key %r: waited %.0fs (WARMKIT_WAIT_SECONDS) for another process "
                    "of this host to compile entry %s; compiling it here",
                    name,
                    key,
                    self.wait_seconds,
                    ek,
                )
                yield True
                return
        try:
            yield waited
        finally:
            lock.release()

    def _through_store(self, job: _Job) -> tuple[Any, str]:
        backend, ek, store_key, target = job.backend, job.ek, job.store_key, job.target
        deadline = time.monotonic() + self.wait_seconds
        pause = 0.02
        while True:
            if self._install(backend, ek, store_key, target):
                return self._load(job, "fetched")
            if self.store_required and store_key in self.refused:
                raise StoreError(
                    f"entry {store_key} of kernel {job.name!r} key {job.key!r} was refused "
                    f"({self.refused[store_key]}) and deleted; with store_required "
                    "(WARMKIT_STORE_REQUIRED) it is not compiled here. Warm up again: the next "
                    "publisher replaces it",
                    url=self.url,
                    key=store_key,
                )
            if self.store is None:  # went away: compile locally
                return self._produce(job, None)
            lease = self._call(lambda: self.store.acquire(store_key, self.lease_seconds))  # type: ignore[union-attr]
            if lease is not None:
                # Published between our fetch and our lease?
                if self._install(backend, ek, store_key, target):
                    self._call(lease.release)
                    return self._load(job, "fetched")
                return self._produce(job, lease)
            if time.monotonic() > deadline:
                logger.warning(
                    "kernel %s key %r: waited %.0fs (WARMKIT_WAIT_SECONDS) for the process "
                    "holding the lease on %s; compiling it here",
                    job.name,
                    job.key,
                    self.wait_seconds,
                    store_key,
                )
                return self._produce(job, None)
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    def _produce(self, job: _Job, lease: Lease | None) -> tuple[Any, str]:
        if lease is not None:
            self._hold(lease)
        try:
            executor, hit = job.compile()
            if self.store is not None:
                files = job.entries.entry_files(job.ek)
                if files is None:
                    logger.warning(
                        "kernel %s key %r: no complete local entry %s after compiling; not "
                        "published",
                        job.name,
                        job.key,
                        job.ek,
                    )
                else:
                    self.publish(
                        job.store_key,
                        _read_files(files),
                        kernel=job.name,
                        warmkit_key=repr(job.key),
                        target=job.target,
                        fingerprint=job.entries.cache_fingerprint(job.target),
                    )
        finally:
            if lease is not None:
                self._drop(lease)
        return executor, "cached" if hit else "compiled"

    def _install(
        self,
        backend: Any,
        ek: str,
        store_key: str,
        target: str | None,
        entry: StoredEntry | None = None,
    ) -> bool:
        """Fetch ``store_key`` (unless given, verified), and publish it into the local cache.

        Returns:
            True when the entry is now in the local cache.
        """
        entries = self.entries_of(backend)
        assert entries is not None  # only the keys of a backend with entries reach the store
        allowed = entries.entry_file_allowed
        entry = entry or self._fetch_entry(store_key, allowed)
        if entry is None:
            return False
        # Checked again here, where the bytes are written (an entry may come from elsewhere):
        # every name is one plain name the backend declares, so nothing lands outside `staged`.
        problems = name_problems(list(entry.files), allowed)
        if problems:
            self._refuse(store_key, entry, "; ".join(problems))
            return False
        recorded = entry.meta.get("fingerprint")
        here = entries.cache_fingerprint(target)
        if recorded != here:
            diff = sorted(
                f for f in set(recorded or {}) | set(here) if (recorded or {}).get(f) != here.get(f)
            )
            logger.error(
                "warmkit store %s: entry %s was built for another %s; not loading it",
                self.url,
                store_key,
                ", ".join(diff) or "fingerprint",
            )
            return False
        from .bundle import _publish

        final = Path(entries.entry_dir(ek))
        final.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=".warmkit-fetch-", dir=final.parent))
        try:
            for fname, data in entry.files.items():
                (staged / fname).write_bytes(data)
            # Relocates, records the files' sha256 (warmkit._cache.integrity), checks the entry's
            # structure with the backend, then renames it into place.
            _publish(backend, staged, final, {}, store_key)
        except BundleError as exc:
            self._refuse(store_key, entry, str(exc))
            return False
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        self._record_provenance(final, store_key, entry)
        self._count("fetched")
        return True

    def _record_provenance(self, final: Path, store_key: str, entry: StoredEntry) -> None:
        """Keep the entry's signed manifest next to it, so ``warmkit cache verify`` re-checks it."""
        from .integrity import read_record

        try:
            installed = read_record(final) or {}
        except ValueError:
            installed = {}
        listed = entry.meta.get("files") or {}
        # Files the backend rewrote when it installed the entry (Triton's group files hold
        # absolute paths): what they became, since they no longer match the signed sha256s.
        rewritten = {
            n: installed[n]
            for n in listed
            if n in installed and installed[n]["sha256"] != listed[n]["sha256"]
        }
        doc = {
            "store": self.url,
            "key": store_key,
            "meta": dict(entry.meta),
            "rewritten": rewritten,
        }
        tmp = final / f".{PROVENANCE}.{os.getpid()}.tmp"
        try:
            tmp.write_text(json.dumps(doc, sort_keys=True))
            os.replace(tmp, final / PROVENANCE)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            logger.warning(
                "cannot record where entry %s came from (%s); `warmkit cache verify` will not "
                "re-check its signature",
                store_key,
                exc,
            )


def provenance_problems(backend: Any, entry: Path, trusted: dict[str, Any]) -> list[str]:
    """What is wrong with a local entry that came from a store (``PROVENANCE``); [] otherwise.

    Its recorded manifest must be for this entry's key, signed by a trusted key
    when trust is configured, and every file must still have its signed sha256
    (or, for a file the backend rewrote at install, what it became then).
    """
    try:
        doc = json.loads((Path(entry) / PROVENANCE).read_text())
    except FileNotFoundError:
        return []  # compiled here, or installed from a bundle: nothing to re-check
    except (OSError, ValueError) as exc:
        return [f"unreadable store provenance {PROVENANCE} ({exc})"]
    try:
        meta, key = doc["meta"], doc["key"]
        listed: dict[str, dict[str, Any]] = dict(meta["files"])
        rewritten: dict[str, dict[str, Any]] = dict(doc.get("rewritten") or {})
        entries = capability(backend, FleetCapable)
        ek = entries.entry_key_of(entry) if entries is not None else None
        if ek is not None and (key != f"{backend.name}/{ek}" or meta.get("key") != key):
            return [f"came from store entry {meta.get('key')!r}, not this entry's key"]
        problems = _signature_problems(key, meta, trusted)
        from .integrity import compare, sha256_file

        # each listed file by name (the integrity record leaves warmkit's own files out)
        actual = {
            n: {"sha256": sha256_file(p), "size": p.stat().st_size}
            for n in listed
            if not name_problems([n]) and (p := Path(entry) / n).is_file()
        }
        expected = {n: rewritten.get(n, want) for n, want in listed.items()}
        return problems + [f"{p} (signed in store entry {key})" for p in compare(expected, actual)]
    except (KeyError, TypeError, AttributeError) as exc:
        return [f"malformed store provenance {PROVENANCE} ({type(exc).__name__}: {exc})"]


def _signature_problems(key: str, meta: Mapping[str, Any], trusted: dict[str, Any]) -> list[str]:
    """Why entry ``key``'s manifest is not signed by a trusted key; [] when it is, or no trust."""
    if not trusted:
        return []
    from .signing import verify

    sig = meta.get(SIGNATURE)
    try:
        verify(
            signed_bytes(meta),
            None if sig is None else json.dumps(sig).encode(),
            trusted,
            what=f"store entry {key}",
            error=ValueError,
        )
    except ValueError as exc:
        return [str(exc)]
    return []


def provenance_check(backend: Any, check: Any) -> Any:
    """``check`` (a backend's structural check, or None) plus ``provenance_problems`` under trust.

    Raises:
        ValueError: the trust settings are unusable (``_trust``).
    """
    trusted, _ = _trust()

    def run(entry: Path) -> list[str]:
        return [
            *(check(entry) if check is not None else ()),
            *provenance_problems(backend, entry, trusted),
        ]

    return run


def _trust() -> tuple[dict[str, Any], str | None]:
    """The trusted public keys (``WARMKIT_TRUST``) and the signing key, checked now.

    Raises:
        ValueError: a trust or signing setting is empty, unreadable, not an
            Ed25519 key, or the two trust variables differ; the message names it.
    """
    from .signing import load_trusted, sign, trusted_keys

    try:
        paths = trusted_keys()
        trusted = load_trusted(paths) if paths else {}
        signing_key = _envs.get("WARMKIT_SIGNING_KEY")
        if signing_key is not None:
            sign(b"", signing_key)  # an unreadable or wrong key fails now, not at each publish
    except (OSError, TypeError) as exc:
        raise ValueError(f"store trust settings are unusable: {exc}") from exc
    return trusted, signing_key


def fleet_for(config: Any) -> Fleet:
    """The ``Fleet`` a ``WarmupConfig`` asks for."""
    return Fleet(config.store, store_required=config.store_required, read_only=config.read_only)
