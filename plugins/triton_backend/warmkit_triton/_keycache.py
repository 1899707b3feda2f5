"""A cross-process cache of ``triton_key()``'s costly part: the sha256 of ``libtriton.so``.

Triton's ``triton.runtime.cache.triton_key()`` is its fingerprint of the
installed wheel, the first ingredient of every cache hash: the version, the
sha256 of each Python file of ``triton.compiler``, ``triton.backends`` and
``triton.language`` (and of ``runtime/cache.py``), and the sha256 of the whole
400-500 MB ``libtriton.so``. It is memoized per process only, so every new
process pays ~250 ms (more on a slow disk) before its first disk-cache lookup:
that dominates a warm restart.

:func:`install` replaces ``triton_key`` (the module attribute that Triton's
``get_cache_key`` calls, and the name ``triton.runtime.autotuner`` imported;
Triton 3.6 and 3.9 alike, and the way Triton's own compile worker pools seed
it) by a function that builds the same string, reusing a digest of
``libtriton.so`` stored in ``$XDG_CACHE_HOME/warmkit/triton-key.json``
(default ``~/.cache/warmkit/``). The stored digest is keyed by the library's
real path, size, ``mtime_ns``, inode and device and by Triton's version; the
Python files are hashed every time, exactly as Triton does (27 small files,
~3 ms). When there is no stored digest, Triton's own ``triton_key()`` runs and
the digest is taken out of its result, but only if the rest of the result is
exactly what this module composes; otherwise (a Triton whose key is built
differently) the entry is marked unusable and Triton's function is used. The
value is therefore always Triton's own.

``WARMKIT_TRITON_KEY_CACHE=0`` turns it off (Triton's function stays in place).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _envs
from . import _triton_api as api

__all__ = ["ENV", "cache_file", "enabled", "install", "outcome", "uninstall"]

logger = logging.getLogger(__name__)

#: The opt-out: ``WARMKIT_TRITON_KEY_CACHE=0`` leaves Triton's ``triton_key`` alone.
ENV = "WARMKIT_TRITON_KEY_CACHE"
FORMAT = 1
MAX_ENTRIES = 16
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MARK = "_warmkit_key_cache"

_lock = threading.Lock()
_patched: dict[str, tuple[Any, Any]] = {}  # module name -> (the original it held, ours)
_original: Callable[[], str] | None = None
_outcome: str | None = None


def enabled() -> bool:
    """False when ``WARMKIT_TRITON_KEY_CACHE`` is off (``0``, ``false``, ``no``, ``off``).

    Raises:
        ValueError: it is set to something else (named in the message).
    """
    return bool(_envs.get(ENV))


def cache_file() -> Path:
    """``$XDG_CACHE_HOME/warmkit/triton-key.json``, default ``~/.cache/warmkit/triton-key.json``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "warmkit", "triton-key.json")


def outcome() -> str | None:
    """What the patched ``triton_key`` did in this process.

    ``"hit"`` (stored digest used), ``"stored"`` (Triton computed it, now stored),
    ``"unusable"`` (Triton builds its key differently; its own function was used),
    ``"error"`` (something failed; Triton's own function was used), or None
    (not called yet, or not installed).
    """
    return _outcome


def install() -> bool:
    """Replace Triton's ``triton_key`` by the cached one (idempotent, thread-safe).

    Returns:
        True when the cached ``triton_key`` is in place; False when it is turned
        off (``WARMKIT_TRITON_KEY_CACHE=0``), Triton cannot be imported, or
        ``triton_key`` was already replaced by someone else.
    """
    global _original
    if not enabled():
        return False
    with _lock:
        try:
            current = api.triton_key_function()
        except ImportError:
            return False
        if getattr(current, _MARK, False):
            return True
        if not api.is_tritons_triton_key(current):
            logger.debug("triton_key was replaced by %r; not caching it", current)
            return False
        patched = _make_cached(current)
        _original = current
        for name in api.replace_triton_key(current, patched):
            _patched[name] = (current, patched)
        logger.debug("cached triton_key installed in %s", ", ".join(sorted(_patched)))
        return True


def uninstall() -> None:
    """Put Triton's own ``triton_key`` back where :func:`install` replaced it (for tests)."""
    global _original, _outcome
    with _lock:
        for name, (original, patched) in _patched.items():
            api.replace_triton_key(patched, original, modules=[name])
        _patched.clear()
        _original = None
        _outcome = None


def _make_cached(original: Callable[[], str]) -> Callable[[], str]:
    done: list[str] = []
    once = threading.Lock()

    def triton_key() -> str:
        """Triton's ``triton_key()``, computed once per process even when threads ask at once.

        (Triton's own ``lru_cache`` lets parallel compile threads hash
        ``libtriton.so`` once each on a cold start.)
        """
        if done:
            return done[0]
        with once:
            if not done:
                done.append(_compute(original))
        return done[0]

    setattr(triton_key, _MARK, True)
    triton_key.__wrapped_original__ = original  # type: ignore[attr-defined]
    return triton_key


def _compute(original: Callable[[], str]) -> str:
    global _outcome
    try:
        value, _outcome = _cached_key(original)
    except Exception as exc:
        logger.debug("triton_key cache failed (%s); using Triton's own", exc, exc_info=True)
        _outcome = "error"
        return original()
    return value


def _identity(lib: Path, version: str) -> str:
    st = os.stat(lib)
    real = os.path.realpath(lib)
    return f"{real}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_dev}|{version}"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _store(path: Path, ident: str, entry: dict[str, Any]) -> None:
    entries = _load(path)
    entries[ident] = entry | {"stored": time.time()}
    if len(entries) > MAX_ENTRIES:
        keep = sorted(entries, key=lambda k: entries[k].get("stored", 0), reverse=True)
        entries = {k: entries[k] for k in keep[:MAX_ENTRIES]}
    text = json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        logger.debug("cannot write %s: %s", path, exc)


def _check(ident: str, digest: str) -> str:
    """What an entry's ``check`` must be: its digest bound to the library identity it is for.

    The digest cannot be verified without hashing the library (the cost this
    cache saves); the check catches an edited or damaged digest, and one
    copied from another library's entry.
    """
    return hashlib.sha256(f"{ident}|{digest}".encode()).hexdigest()[:32]


def _cached_key(original: Callable[[], str]) -> tuple[str, str]:
    lib = api.libtriton_path()
    version = str(api.triton_version())
    ident = _identity(lib, version)
    path = cache_file()
    entry = _load(path).get(ident)
    if isinstance(entry, dict):
        digest = entry.get("libtriton_sha256")
        if digest is None and entry.get("unusable"):
            return original(), "unusable"
        if (
            isinstance(digest, str)
            and _HEX64.match(digest)
            and entry.get("check") == _check(ident, digest)
        ):
            return api.compose_triton_key(digest), "hit"
        # A wrong digest is a key no entry of any cache has: every lookup would miss, and
        # every installed bundle entry would be ignored. Recompute it; the store below repairs.
        # (an entry an earlier warmkit wrote has no check: recomputed once, quietly)
        log = logger.warning if "check" in entry else logger.debug
        log(
            "%s: the stored digest of %s does not match its check (edited or damaged); "
            "computing it again (~0.25 s) and repairing the entry",
            path,
            lib,
        )
    value = original()
    sentinel = "\x00"
    prefix, suffix = api.compose_triton_key(sentinel).split(sentinel)
    middle = value[len(prefix) : len(value) - len(suffix)]
    if value.startswith(prefix) and value.endswith(suffix) and _HEX64.match(middle):
        entry = {"libtriton_sha256": middle, "check": _check(ident, middle), "path": str(lib)}
        _store(path, ident, entry)
        return value, "stored"
    logger.debug("Triton %s builds triton_key differently; not caching it", version)
    _store(path, ident, {"unusable": True, "path": str(lib)})
    return value, "unusable"
