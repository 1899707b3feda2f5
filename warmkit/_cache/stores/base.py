"""Shared compile stores: where a fleet of processes finds the entries one of them compiled.

A store maps an entry key (``"<backend>/<backend's own cache key>"``, e.g.
``"triton/<sha256 hex>"``) to a whole cache entry: its files and a manifest
(``meta``) with the sha256 and size of every file, the backend's validity
record, and who produced it. This module is their one interface (``Store``,
``Lease``) and what every store shares; each kind is a module of its own,
chosen by ``open_store(url)`` and imported only then:

* ``redis://host:port/db`` / ``rediss://`` (TLS): a Redis server
  (``redis_store``; the redis client is imported only by it).
* a directory (a shared filesystem; ``directory_store``).

Entries, keys and file names themselves are ``entry``'s (the module below
this one and every store's).

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
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..._exceptions import StoreError
from ..integrity import compare
from .entry import _FILE_RE, META_FILE, StoredEntry, _redact

__all__ = [
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

ENTRY_FORMAT = 1

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
        if not _FILE_RE.match(name) or name == META_FILE:
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
        from .redis_store import RedisStore

        return RedisStore(text)
    if scheme == "file":
        text = urlsplit(text).path
    elif scheme:
        raise StoreError(
            f"unknown store scheme {scheme!r}: use redis://host:port/db, rediss://..., or a "
            "directory path",
            url=_redact(text),
        )
    from .directory_store import DirectoryStore

    return DirectoryStore(text)

