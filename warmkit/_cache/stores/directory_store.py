"""A shared compile store in a directory, e.g. on a shared filesystem (also ``file://``).

An entry is a directory made complete in ``<root>/.staging`` and published
with one ``rename``; leases are files with an expiry (best effort across
hosts: it relies on the hosts' clocks, and a rare double compile is harmless
because the first publish wins). The interface and the checks every store
shares are ``warmkit._cache.stores.base``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ... import _envs
from ..._exceptions import StoreError, StoreUnavailableError
from .entry import _FILE_RE, META_FILE, StoredEntry, _check_key

__all__ = ["DirectoryStore"]


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

    META = META_FILE

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

    def acquire(self, key: str, ttl: float) -> _FileLease | None:
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
