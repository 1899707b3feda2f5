"""Shared compile stores: where a fleet of processes finds the entries one of them compiled.

A store maps an entry key (``"<backend>/<backend's own cache key>"``, e.g.
``"triton/<sha256 hex>"``) to a whole cache entry: its files and a manifest
(``meta``) with the sha256 and size of every file, the backend's validity
record, and who produced it. Two kinds, chosen by ``open_store(url)``:

* ``redis://host:port/db`` / ``rediss://`` (TLS): a Redis server, through
  redis-py (``pip install 'warmkit[redis]'``). An entry is one Redis hash,
  written by one Lua script (all fields or none) and read by one ``HGETALL``,
  so no reader ever sees half an entry. Leases are ``SET NX PX`` with a token,
  renewed and released by token-checking scripts.
* a directory (a shared filesystem): an entry is a directory made complete in
  ``<root>/.staging`` and published with one ``rename``; leases are files with
  an expiry (best effort across hosts: it relies on the hosts' clocks, and a
  rare double compile is harmless because the first publish wins).

Nothing here trusts what it reads. An entry is data, never paths:
``verify_entry`` refuses any file name that is not one plain name (no
separator, no ``..``, no leading dot, not absolute, no link) or that the
backend does not declare, then checks every file against the manifest; callers
refuse and delete an entry that fails before writing a byte of it. A signed
entry's signature (``warmkit._cache.signing``) covers ``signed_bytes(meta)``: the
manifest, so every file's sha256 and the key it is stored under.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import urlsplit, urlunsplit

import attrs

from ... import _envs
from ..._exceptions import StoreError, StoreUnavailableError
from ..integrity import compare

__all__ = [
    "REDIS_INSTALL_HINT",
    "SIGNATURE",
    "Lease",
    "Store",
    "StoredEntry",
    "check_url",
    "entry_meta",
    "name_problems",
    "open_store",
    "signed_bytes",
    "verify_entry",
]

logger = logging.getLogger(__name__)

REDIS_INSTALL_HINT = "pip install 'warmkit[redis]'  (or: pip install redis)"
ENTRY_FORMAT = 1
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_PREFIX = "warmkit:"


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key) or len(key) > 300:
        raise ValueError(
            f"store entry key {key!r} is invalid: use '<kind>/<id>' of letters, digits, '.', '_', '-'"
        )
    return key


@attrs.frozen
class StoredEntry:
    """One entry as read from a store (not yet verified).

    Attributes:
        key: the entry key, e.g. ``"triton/<hash>"``.
        files: file name -> content.
        meta: the manifest written with it (``entry_meta``).
        odd: members that are not plain files (links, directories, names
            that are not text); an entry with any is refused.
        raw_meta: the manifest's bytes as stored: ``delete(key, raw_meta)``
            removes exactly this entry, however its writer spelled the JSON.
    """

    key: str
    files: Mapping[str, bytes]
    meta: Mapping[str, Any]
    odd: tuple[str, ...] = ()
    raw_meta: bytes | None = attrs.field(default=None, repr=False)


#: The field of an entry's manifest that holds its signature document (``warmkit._cache.signing``).
SIGNATURE = "signature"


def signed_bytes(meta: Mapping[str, Any]) -> bytes:
    """What an entry's signature covers: its manifest (less the signature), canonical JSON.

    The manifest holds the store key and every file's sha256 and size, so a
    signature can serve neither other files nor another key. The prefix keeps
    a bundle's signature from ever passing for an entry's.
    """
    body = {k: v for k, v in meta.items() if k != SIGNATURE}
    return (
        b"warmkit-store-entry\n" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    )


def name_problems(
    names: Iterator[str] | list[str], allowed: Callable[[str], bool] | None = None
) -> list[str]:
    """Every file name of an entry that may not be written: a path, a dot-name, an undeclared name.

    Args:
        names: the entry's file names (from its files and its manifest).
        allowed: the backend's declaration (``FleetCapable.entry_file_allowed``);
            None checks only that each is one plain name.
    """
    problems = []
    for name in sorted({str(n) for n in names}):
        if not _FILE_RE.match(name) or name == DirectoryStore.META:
            problems.append(
                f"file name {name!r} is not a plain file name (a path, link or dot-name)"
            )
        elif allowed is not None and not allowed(name):
            problems.append(f"file name {name!r} is not one its backend declares")
    return problems


def entry_meta(key: str, files: Mapping[str, bytes], **info: Any) -> dict[str, Any]:
    """The manifest published with an entry: sha256 and size of each file, plus ``info``.

    ``info`` holds what the entry is (kernel, key, the backend's validity
    record ...); the producer's host and pid are added for ``warmkit cache info``.
    """
    return {
        "format": ENTRY_FORMAT,
        "key": key,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in sorted(files.items())
        },
        "producer": {"host": socket.gethostname(), "pid": os.getpid()},
        "created": time.time(),
        **info,
    }


def verify_entry(entry: StoredEntry, allowed: Callable[[str], bool] | None = None) -> list[str]:
    """Every way ``entry`` differs from its own manifest; empty when it is intact.

    Checks every file name first (``name_problems``: members that are not plain
    files, paths, dot-names, names ``allowed`` refuses), then the format and
    the key, then every listed file's size and sha256
    (``warmkit._cache.integrity.compare``, the same check as for local entries), and
    refuses files the manifest does not list.

    Args:
        entry: what the store returned.
        allowed: the backend's declared file names, when the entry is one of its cache entries.
    """
    meta = entry.meta
    listed = meta.get("files") if isinstance(meta, Mapping) else None
    names = [*entry.files, *(listed if isinstance(listed, Mapping) else ())]
    bad = [f"{n!r} is not a plain file (a link or directory)" for n in entry.odd]
    bad += name_problems(names, allowed)
    if bad:
        return [f"entry {entry.key}: {p}" for p in bad]
    if not isinstance(meta, Mapping) or meta.get("format") != ENTRY_FORMAT:
        return [f"entry {entry.key}: unreadable manifest (format {meta.get('format')!r})"]
    if meta.get("key") != entry.key:
        return [f"entry {entry.key}: manifest is for {meta.get('key')!r}"]
    listed = meta.get("files")
    if not isinstance(listed, Mapping) or not listed:
        return [f"entry {entry.key}: manifest lists no files"]
    if not all(_is_file_record(v) for v in listed.values()):
        return [f"entry {entry.key}: unreadable manifest (a file without its sha256 and size)"]
    actual = {
        name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for name, data in entry.files.items()
    }
    problems = compare(dict(listed), actual)
    problems += [f"{name} is not in its manifest" for name in sorted(set(actual) - set(listed))]
    return [f"entry {entry.key}: {p}" for p in problems]


def _is_file_record(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("sha256"), str)
        and isinstance(value.get("size"), int)
    )


class Lease(Protocol):
    """A fleet-wide claim on one key: held by one process until released or expired."""

    key: str

    def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired and taken over)."""
        ...

    def release(self) -> None:
        """Give the lease up (only if still ours)."""
        ...


class Store(Protocol):
    """What ``open_store`` returns. Every method may raise ``StoreUnavailableError``."""

    url: str

    def get(self, key: str) -> StoredEntry | None:
        """The entry, or None when absent."""
        ...

    def put(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> bool:
        """Publish atomically; False when an entry was already there (it is kept)."""
        ...

    def delete(self, key: str, meta: Mapping[str, Any] | bytes | None = None) -> None:
        """Remove the entry; with ``meta`` (a manifest or its stored bytes), only if still that entry."""
        ...

    def keys(self) -> Iterator[str]:
        """Every entry key."""
        ...

    def acquire(self, key: str, ttl: float) -> Lease | None:
        """Take the lease on ``key`` for ``ttl`` seconds; None when another process holds it."""
        ...

    def holds_lease(self, key: str) -> bool:
        """Whether any process holds the lease on ``key`` now."""
        ...

    def close(self) -> None: ...


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


def check_url(url: str) -> None:
    """Refuse a store URL that can never work, before any key is compiled.

    Raises:
        ValueError: an unknown scheme, or a ``redis://`` URL whose port or
            database is not a number; the message names the URL (redacted).
    """
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme not in ("", "file", "redis", "rediss"):
        raise ValueError(
            f"store {_redact(url)!r}: unknown scheme {scheme!r}; use redis://host:port/db, "
            "rediss://..., or a directory path"
        )
    if scheme in ("redis", "rediss"):
        parts = urlsplit(url)
        try:
            parts.port  # noqa: B018 -- parsing it is the check
            db = parts.path.strip("/")
            if db and not db.isdigit():
                raise ValueError(f"database {db!r} is not a number")
        except ValueError as exc:
            raise ValueError(
                f"store {_redact(url)!r} is malformed ({exc}); use redis://[user:password@]host:port/db"
            ) from None


def open_store(url: str | os.PathLike[str]) -> Store:
    """The store at ``url``: ``redis://``/``rediss://`` or a directory path (``file://`` too).

    Args:
        url: ``redis://[user:password@]host:port/db``; the password may instead
            come from ``WARMKIT_STORE_PASSWORD``. Anything without a scheme is a
            directory (created if missing).

    Raises:
        StoreError: the redis extra is missing (with the install hint), or an
            unknown scheme.
        StoreUnavailableError: the directory cannot be created.
    """
    text = os.fspath(url)
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme in ("redis", "rediss"):
        return RedisStore(text)
    if scheme == "file":
        text = urlsplit(text).path
    elif scheme:
        raise StoreError(
            f"unknown store scheme {scheme!r}: use redis://host:port/db, rediss://..., or a "
            "directory path",
            url=_redact(text),
        )
    return DirectoryStore(text)


# -- Redis ----------------------------------------------------------------------------------------

# KEYS[1] = entry hash; ARGV = field, value, ... : all fields or none, and never over an entry.
_PUT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""
# KEYS[1] = entry hash; ARGV[1] = its manifest: delete only the entry that was judged bad.
_DELETE_IF = """
if redis.call('HGET', KEYS[1], 'meta') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class _RedisLease:
    def __init__(self, store: RedisStore, key: str, token: str, ttl: float) -> None:
        self.key, self._store, self._token, self._ttl = key, store, token, ttl

    def renew(self) -> bool:
        return bool(
            self._store._call(
                self._store._renew,
                keys=[self._store._lease(self.key)],
                args=[self._token, int(self._ttl * 1000)],
            )
        )

    def release(self) -> None:
        self._store._call(
            self._store._release, keys=[self._store._lease(self.key)], args=[self._token]
        )


class RedisStore:
    """Entries in a Redis server (see the module docstring for the layout)."""

    def __init__(self, url: str) -> None:
        self.url = _redact(url)
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise StoreError(
                f"a redis:// store needs the redis client: {REDIS_INSTALL_HINT}", url=self.url
            ) from None
        # Every error of the server or the link (an -OOM reply, WRONGTYPE, a dropped
        # connection) is the store's trouble, never the key's: Fleet degrades on it.
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        self._response_error = redis.exceptions.ResponseError
        password = None if urlsplit(url).password else _envs.get("WARMKIT_STORE_PASSWORD")
        try:
            # Fail fast: a store that does not answer must degrade a warmup, not stall it.
            self._r = redis.Redis.from_url(
                url,
                password=password,
                socket_timeout=5,
                socket_connect_timeout=2,
                retry_on_timeout=False,
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as exc:  # a malformed port or db: a configuration error
            raise StoreError(
                f"malformed store URL ({exc}); use redis://[user:password@]host:port/db",
                url=self.url,
            ) from None
        self._put = self._r.register_script(_PUT)
        self._delete_if = self._r.register_script(_DELETE_IF)
        self._renew = self._r.register_script(_RENEW)
        self._release = self._r.register_script(_RELEASE)

    def _entry(self, key: str) -> str:
        return f"{_PREFIX}entry:{_check_key(key)}"

    def _lease(self, key: str) -> str:
        return f"{_PREFIX}lease:{_check_key(key)}"

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            raise StoreUnavailableError(
                f"unreachable or failing ({type(exc).__name__}: {exc})", url=self.url
            ) from exc

    def get(self, key: str) -> StoredEntry | None:
        try:
            # from_url without decode_responses (above): field names and values are bytes
            raw = cast("dict[bytes, bytes]", self._r.hgetall(self._entry(key)))
        except self._response_error as exc:
            if "WRONGTYPE" not in str(exc):
                raise StoreUnavailableError(f"failing ({exc})", url=self.url) from exc
            # Something else (not a hash) sits at the entry's key: an unreadable entry, which
            # the fleet deletes and replaces with its own compile's.
            return StoredEntry(key, {}, {"format": None})
        except self._errors as exc:
            raise StoreUnavailableError(
                f"unreachable or failing ({type(exc).__name__}: {exc})", url=self.url
            ) from exc
        if not raw:
            return None
        files, odd = {}, []
        for k, v in raw.items():
            if k.startswith(b"file:"):
                try:
                    files[k[5:].decode()] = v
                except UnicodeDecodeError:
                    odd.append(repr(k[5:]))
        try:
            meta = json.loads(raw.get(b"meta", b"null"))
        except ValueError:
            meta = {"format": None}
        meta = meta if isinstance(meta, dict) else {"format": None}
        return StoredEntry(key, files, meta, tuple(odd), raw.get(b"meta"))

    def put(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> bool:
        args: list[Any] = ["meta", json.dumps(meta, sort_keys=True)]
        for name, data in files.items():
            args += [f"file:{name}", data]
        return bool(self._call(self._put, keys=[self._entry(key)], args=args))

    def delete(self, key: str, meta: Mapping[str, Any] | bytes | None = None) -> None:
        if meta is None:
            self._call(self._r.delete, self._entry(key))
        else:
            raw = meta if isinstance(meta, bytes) else json.dumps(meta, sort_keys=True)
            self._call(self._delete_if, keys=[self._entry(key)], args=[raw])

    def keys(self) -> Iterator[str]:
        start = len(f"{_PREFIX}entry:")
        for k in self._call(lambda: list(self._r.scan_iter(f"{_PREFIX}entry:*", count=500))):
            yield k.decode()[start:]

    def acquire(self, key: str, ttl: float) -> Lease | None:
        token = uuid.uuid4().hex
        ok = self._call(self._r.set, self._lease(key), token, nx=True, px=max(1, int(ttl * 1000)))
        return _RedisLease(self, key, token, ttl) if ok else None

    def holds_lease(self, key: str) -> bool:
        return bool(self._call(self._r.exists, self._lease(key)))

    def close(self) -> None:
        self._r.close()

    def __repr__(self) -> str:
        return f"<RedisStore {self.url}>"


# -- a directory ------------------------------------------------------------------------------------


class _FileLease:
    def __init__(self, store: DirectoryStore, key: str, token: str, ttl: float) -> None:
        self.key, self._store, self._token, self._ttl = key, store, token, ttl

    def renew(self) -> bool:
        path = self._store._lease(self.key)
        if self._store._lease_token(path) != self._token:
            return False
        self._store._write_lease(path, self._token, self._ttl)
        return True

    def release(self) -> None:
        path = self._store._lease(self.key)
        if self._store._lease_token(path) == self._token:
            self._store._io(path.unlink, True)


class DirectoryStore:
    """Entries under a directory, e.g. on a shared filesystem (see the module docstring)."""

    META = "warmkit-entry.json"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path).expanduser().absolute()
        self.url = str(self.root)
        # The lifetime a lease's holder renews it within (acquire() sets the fleet's own).
        self.lease_seconds: float = _envs.get("WARMKIT_LEASE_SECONDS")
        try:
            for sub in ("entries", "leases", ".staging"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot create the store directory ({exc})", url=self.url)

    def _dir(self, key: str) -> Path:
        return self.root / "entries" / _check_key(key)

    def _lease(self, key: str) -> Path:
        return self.root / "leases" / (_check_key(key).replace("/", "__") + ".lease")

    def _io(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StoreUnavailableError(f"unreachable ({exc})", url=self.url) from exc

    def get(self, key: str) -> StoredEntry | None:
        d = self._dir(key)
        files, odd = {}, []
        try:
            meta_raw = self._io((d / self.META).read_bytes)
            for p in self._io(lambda: sorted(d.iterdir())):
                if p.name == self.META:
                    continue
                # A link is never followed: it could serve any file of this host as the entry's.
                if p.is_symlink() or not p.is_file():
                    odd.append(p.name)
                else:
                    files[p.name] = self._io(p.read_bytes)
        except FileNotFoundError:
            return None  # absent, or removed while being read
        try:
            meta = json.loads(meta_raw)
        except ValueError:
            meta = {"format": None}
        meta = meta if isinstance(meta, dict) else {"format": None}
        return StoredEntry(key, files, meta, tuple(odd), meta_raw)

    def put(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> bool:
        final = self._dir(key)
        if final.exists():
            return False
        staged = self.root / ".staging" / uuid.uuid4().hex
        try:
            staged.mkdir(parents=True)
            for name, data in files.items():
                if not _FILE_RE.match(name) or name == self.META:
                    raise StoreError(f"invalid file name {name!r} in entry {key}", url=self.url)
                (staged / name).write_bytes(data)
            (staged / self.META).write_text(json.dumps(meta, sort_keys=True))
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staged, final)
            except OSError:
                if final.is_dir():
                    return False  # another process published first
                raise
            return True
        except StoreError:
            raise
        except OSError as exc:
            raise StoreUnavailableError(f"cannot publish {key} ({exc})", url=self.url) from exc
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def delete(self, key: str, meta: Mapping[str, Any] | bytes | None = None) -> None:
        d = self._dir(key)
        if isinstance(meta, bytes):
            try:
                if (d / self.META).read_bytes() != meta:
                    return  # republished meanwhile: not the entry that was judged bad
            except OSError:
                pass  # gone or unreadable: the bad entry may go
        elif meta is not None:
            try:
                current = json.loads((d / self.META).read_text())
            except (OSError, ValueError):
                current = None  # gone or unreadable: the bad entry may go
            if current is not None and current != json.loads(json.dumps(meta)):
                return  # republished meanwhile: not the entry that was judged bad
        trash = self.root / ".staging" / f"deleted-{uuid.uuid4().hex}"
        try:
            os.rename(d, trash)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnavailableError(f"cannot delete {key} ({exc})", url=self.url) from exc
        shutil.rmtree(trash, ignore_errors=True)

    def keys(self) -> Iterator[str]:
        base = self.root / "entries"
        for meta in self._io(lambda: sorted(base.glob(f"**/{self.META}"))):
            yield meta.parent.relative_to(base).as_posix()

    # Leases: a file holding a token and an expiry time, replaced atomically; its holder
    # rewrites it every third of its lifetime, so its mtime is a heartbeat as well.
    def _lease_token(self, path: Path) -> str | None:
        try:
            data = json.loads(path.read_text())
            mtime = path.stat().st_mtime
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        now = time.time()
        expires = data.get("expires")
        if not isinstance(expires, (int, float)) or expires < now:
            return None
        # A lease not renewed for a whole lifetime is stale, whatever expiry it claims (a
        # clock ahead, a hand-made file): it is taken over then, not after WARMKIT_WAIT_SECONDS.
        if now - mtime > self.lease_seconds:
            return None
        token = data.get("token")
        return token if isinstance(token, str) else None

    def _write_lease(self, path: Path, token: str, ttl: float) -> None:
        tmp = path.with_name(f".{path.name}.{token}.tmp")
        try:
            tmp.write_text(json.dumps({"token": token, "expires": time.time() + ttl}))
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StoreUnavailableError(
                f"cannot write lease {path.name} ({exc})", url=self.url
            ) from exc

    def acquire(self, key: str, ttl: float) -> Lease | None:
        path = self._lease(key)
        token = uuid.uuid4().hex
        self.lease_seconds = ttl
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
            self._write_lease(path, token, ttl)
        except FileExistsError:
            if self._lease_token(path) is not None:
                return None
            self._write_lease(path, token, ttl)  # expired (or unreadable): take it over
        except OSError as exc:
            raise StoreUnavailableError(f"cannot take lease {key} ({exc})", url=self.url) from exc
        # Two takers of one expired lease: the last replace wins, and only it sees its token.
        if self._lease_token(path) != token:
            return None
        return _FileLease(self, key, token, ttl)

    def holds_lease(self, key: str) -> bool:
        return self._lease_token(self._lease(key)) is not None

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<DirectoryStore {self.url}>"
