"""Importing Triton lazily, with a clear error when it is missing or too old."""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from warmkit import WarmkitError

# CPython gh-106905: concurrent ast.parse can fail; the one definition of where is the core's.
from warmkit._compat import AST_PARSE_RACES

#: The oldest Triton this backend supports; 3.6.0 and 3.9.0 are tested.
MIN_TRITON = (3, 6)
INSTALL_HINT = "pip install warmkit-triton  (or: pip install 'triton>=3.6')"


# -- importing Triton ---------------------------------------------------------------------------


class TritonNotInstalledError(WarmkitError, ImportError):
    """Triton is missing or too old for this backend.

    Attributes:
        install_hint: the command that fixes it.
        found: the installed Triton version, or None when it is not importable.
    """

    def __init__(self, reason: str, *, found: str | None = None) -> None:
        self.install_hint = INSTALL_HINT
        self.found = found
        super().__init__(f"warmkit-triton: {reason}. Install it with: {INSTALL_HINT}")


def version_tuple(version: str) -> tuple[int, int]:
    """``"3.6.0+git1234"`` -> ``(3, 6)``; unparsable parts count as 0."""
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def _import_triton() -> ModuleType:
    try:
        return importlib.import_module("triton")
    except ImportError as exc:
        raise TritonNotInstalledError(f"Triton is not installed ({exc})") from exc


# 0: not installed, 1: being installed (by the holder of _install_lock), 2: installed.
_key_cache_state = 0
# Reentrant: installing calls back into accessors that call require_triton() (they see 1 and
# go on); another thread (warmkit.prepare()'s setup) waits until it is installed.
_install_lock = threading.RLock()
# What the first successful require_triton() runs: registered by the plugin above this layer
# (warmkit_triton/__init__ registers the key cache), so this layer imports nothing of it.
_first_import_hooks: list[Callable[[], object]] = []


def on_first_import(hook: Callable[[], object]) -> None:
    """Run ``hook`` once, in the first successful :func:`require_triton` (now, if that was).

    Hooks run in the order registered, under the install lock, before any warmup thread
    starts. Registering the same hook twice runs it once.
    """
    with _install_lock:
        if hook in _first_import_hooks:
            return
        _first_import_hooks.append(hook)
        if _key_cache_state == 2:
            hook()


def require_triton() -> ModuleType:
    """Import and return ``triton``, checking the version.

    The first successful call also runs the hooks of :func:`on_first_import` (the plugin
    registers the cross-process cache of ``triton_key()``, ``_keycache``; off with
    ``WARMKIT_TRITON_KEY_CACHE=0``) and, on the Pythons of :data:`AST_PARSE_RACES`,
    :func:`serialize_ast_parse`.

    Raises:
        TritonNotInstalledError: Triton cannot be imported, or is older than 3.6.
    """
    triton = _import_triton()
    version = getattr(triton, "__version__", "0.0")
    if version_tuple(version) < MIN_TRITON:
        raise TritonNotInstalledError(
            f"Triton {version} is too old; warmkit-triton needs Triton >= "
            f"{MIN_TRITON[0]}.{MIN_TRITON[1]}",
            found=version,
        )
    global _key_cache_state
    if _key_cache_state != 2:
        with _install_lock:
            if _key_cache_state == 0:
                _key_cache_state = 1
                try:
                    for hook in _first_import_hooks:
                        hook()
                    if AST_PARSE_RACES:
                        serialize_ast_parse()
                finally:
                    _key_cache_state = 2
    return triton


_parse_lock = threading.Lock()
_parse_serialized = False


def serialize_ast_parse() -> None:
    """Make Triton's ``JITCallable.parse`` (its one ``ast.parse`` of a kernel) one thread at a time.

    ``require_triton`` calls it on the Pythons of :data:`AST_PARSE_RACES`, before any warmup
    thread starts; elsewhere parses stay concurrent. Idempotent. Other code's ``ast.parse`` in
    another thread at the same moment can still race there: upgrade Python (3.11.8, 3.12.2).

    Checked: 3.6.0, 3.9.0 (``triton.runtime.jit.JITCallable.parse``).
    """
    global _parse_serialized
    with _parse_lock:
        if _parse_serialized:
            return
        from triton.runtime.jit import JITCallable

        parse = JITCallable.parse

        @functools.wraps(parse)
        def parse_one_at_a_time(self: Any) -> Any:
            with _parse_lock:
                return parse(self)

        JITCallable.parse = parse_one_at_a_time
        _parse_serialized = True


def triton_version() -> str | None:
    """The installed Triton's version, or None when it cannot be imported."""
    try:
        return str(_import_triton().__version__)
    except TritonNotInstalledError:
        return None
