"""A shared compile store in a Redis server: ``redis://host:port/db`` or ``rediss://`` (TLS).

Through redis-py (``pip install 'warmkit[redis]'``), imported only when such a
store is opened. An entry is one Redis hash, written by one Lua script (all
fields or none) and read by one ``HGETALL``, so no reader ever sees half an
entry. Leases are ``SET NX PX`` with a token, renewed and released by
token-checking scripts. The interface and the checks every store shares are
``warmkit._cache.stores.base``'s.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

from ... import _envs
from ..._exceptions import StoreError, StoreUnavailableError
from .entry import StoredEntry, _check_key, _redact

__all__ = ["REDIS_INSTALL_HINT", "RedisStore"]

REDIS_INSTALL_HINT = "pip install 'warmkit[redis]'  (or: pip install redis)"
_PREFIX = "warmkit:"

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
    """Entries in a Redis server (the module docstring has the layout)."""

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

    def acquire(self, key: str, ttl: float) -> _RedisLease | None:
        token = uuid.uuid4().hex
        ok = self._call(self._r.set, self._lease(key), token, nx=True, px=max(1, int(ttl * 1000)))
        return _RedisLease(self, key, token, ttl) if ok else None

    def holds_lease(self, key: str) -> bool:
        return bool(self._call(self._r.exists, self._lease(key)))

    def close(self) -> None:
        self._r.close()

    def __repr__(self) -> str:
        return f"<RedisStore {self.url}>"
