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
import pkgutil
import re
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ENV", "cache_file", "enabled", "install", "outcome", "uninstall"]

logger = logging.getLogger(__name__)

#: The opt-out: ``WARMKIT_TRITON_KEY_CACHE=0`` leaves Triton's ``triton_key`` alone.
ENV = "WARMKIT_TRITON_KEY_CACHE"
FORMAT = 1
MAX_ENTRIES = 16
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MARK = "_warmkit_key_cache"

_lock = threading.Lock()
_patched: dict[str, Any] = {}  # module name -> the original it held
_original: Callable[[], str] | None = None
_outcome: str | None = None


def enabled() -> bool:
    """False when ``WARMKIT_TRITON_KEY_CACHE`` is ``0``/``false``/``no``/``off``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


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


def _is_tritons_own(fn: Any) -> bool:
    """Whether ``fn`` is Triton's memoized ``triton_key`` (not someone else's replacement)."""
    inner = getattr(fn, "__wrapped__", None)
    code = getattr(inner, "__code__", None)
    return (
        code is not None
        and code.co_name == "triton_key"
        and getattr(fn, "__module__", None) == "triton.runtime.cache"
        and hasattr(fn, "cache_info")
    )


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
            import triton.runtime.cache as tc
        except ImportError:
            return False
        current = getattr(tc, "triton_key", None)
        if getattr(current, _MARK, False):
            return True
        if not _is_tritons_own(current):
            logger.debug("triton_key was replaced by %r; not caching it", current)
            return False
        patched = _make_cached(current, tc)
        _original = current
        for name, mod in list(sys.modules.items()):
            if (name == "triton" or name.startswith("triton.")) and getattr(
                mod, "triton_key", None
            ) is current:
                mod.triton_key = patched
                _patched[name] = current
        logger.debug("cached triton_key installed in %s", ", ".join(sorted(_patched)))
        return True


def uninstall() -> None:
    """Put Triton's own ``triton_key`` back where :func:`install` replaced it (for tests)."""
    global _original, _outcome
    with _lock:
        for name, original in _patched.items():
            mod = sys.modules.get(name)
            if mod is not None and getattr(getattr(mod, "triton_key", None), _MARK, False):
                mod.triton_key = original
        _patched.clear()
        _original = None
        _outcome = None


def _make_cached(original: Callable[[], str], tc: Any) -> Callable[[], str]:
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
                done.append(_compute(original, tc))
        return done[0]

    setattr(triton_key, _MARK, True)
    triton_key.__wrapped_original__ = original  # type: ignore[attr-defined]
    return triton_key


def _compute(original: Callable[[], str], tc: Any) -> str:
    global _outcome
    try:
        value, _outcome = _cached_key(original, tc)
    except Exception as exc:
        logger.debug("triton_key cache failed (%s); using Triton's own", exc, exc_info=True)
        _outcome = "error"
        return original()
    return value


def _libtriton(tc: Any) -> Path:
    """The shared library ``triton_key`` hashes (same path rule as Triton's)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(tc.__file__)))
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    return Path(root, "_C", f"libtriton.{ext}")


def _file_sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _package_shas(directory: str, prefix: str) -> list[str]:
    """sha256 of every module Triton's key walks under ``directory``, in its walk order."""
    out = []
    for info in pkgutil.walk_packages([directory], prefix=prefix):
        spec = info.module_finder.find_spec(info.name)  # type: ignore[call-arg]
        out.append(_file_sha(spec.origin))
    return out


def _compose(tc: Any, libtriton_sha: str) -> str:
    """``triton_key()``'s value with ``libtriton_sha`` in place of the library's digest."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(tc.__file__)))
    parts = [_file_sha(tc.__file__)]
    parts += _package_shas(os.path.join(root, "compiler"), "triton.compiler.")
    parts += _package_shas(os.path.join(root, "backends"), "triton.backends.")
    parts.append(libtriton_sha)
    parts += _package_shas(os.path.join(root, "language"), "triton.language.")
    return f"{tc.__version__}" + "-".join(parts)


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


def _cached_key(original: Callable[[], str], tc: Any) -> tuple[str, str]:
    lib = _libtriton(tc)
    ident = _identity(lib, str(tc.__version__))
    path = cache_file()
    entry = _load(path).get(ident)
    if isinstance(entry, dict):
        digest = entry.get("libtriton_sha256")
        if isinstance(digest, str) and _HEX64.match(digest):
            return _compose(tc, digest), "hit"
        if entry.get("unusable"):
            return original(), "unusable"
    value = original()
    sentinel = "\x00"
    prefix, suffix = _compose(tc, sentinel).split(sentinel)
    middle = value[len(prefix) : len(value) - len(suffix)]
    if value.startswith(prefix) and value.endswith(suffix) and _HEX64.match(middle):
        _store(path, ident, {"libtriton_sha256": middle, "path": str(lib)})
        return value, "stored"
    logger.debug("Triton %s builds triton_key differently; not caching it", tc.__version__)
    _store(path, ident, {"unusable": True, "path": str(lib)})
    return value, "unusable"
