"""Accessors for what a JITFunction's identity depends on besides its own text: callees and globals.

Triton folds the values of the ``tl.constexpr`` globals a kernel (and every
``@triton.jit`` function it calls) reads into ``JITFunction.cache_key``, and so
into the disk-cache key; a library that picks such a value from the machine at
import compiles to other entries on another host. warmkit pins these values in
manifests and compiles ahead of time with them (``warmkit_triton._pins``).
"""

from __future__ import annotations

import ast
import hashlib
from typing import Any, NamedTuple

from ._import import require_triton


class UsedGlobal(NamedTuple):
    """One global a JITFunction (or a callee) read when its hash was computed."""

    module: str  # the ``__name__`` of the globals dict it was read from
    name: str
    value: Any
    namespace: dict[str, Any]  # that globals dict (a module's ``__dict__``)


def is_constexpr(value: Any) -> bool:
    """Whether ``value`` is a ``tl.constexpr``. Checked: 3.6.0, 3.9.0."""
    require_triton()
    import triton.language as tl

    return isinstance(value, tl.constexpr)


def make_constexpr(value: Any) -> Any:
    """``tl.constexpr(value)``. Checked: 3.6.0, 3.9.0."""
    require_triton()
    import triton.language as tl

    return tl.constexpr(value)


def _resolve(node: ast.AST, scope: dict[str, Any]) -> Any:
    """The object an ``a`` or ``a.b.c`` expression names in ``scope``, or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in scope:
        return None
    obj = scope[node.id]
    for part in reversed(parts):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def jit_dependencies(fn: Any) -> list[Any]:
    """``fn`` and every ``@triton.jit`` function it calls, transitively (each once, ``fn`` first).

    Found as Triton's ``DependenciesFinder`` finds them: names and attribute
    chains of the function's source resolved in its capture scope
    (``JITFunction.get_capture_scope``) to a ``JITFunction``.
    Checked: 3.6.0, 3.9.0 (``JITFunction.src``, ``get_capture_scope``).
    """
    require_triton()
    from triton.runtime.jit import JITFunction

    out: list[Any] = []
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        out.append(f)
        scope = f.get_capture_scope()
        for node in ast.walk(ast.parse(f.src)):
            if isinstance(node, (ast.Name, ast.Attribute)):
                obj = _resolve(node, scope)
                if isinstance(obj, JITFunction) and id(obj) not in seen:
                    todo.append(obj)
    return out


def used_globals(fn: Any) -> list[UsedGlobal]:
    """The globals ``fn`` and its callees read, with the values their hashes were computed with.

    Computes each function's ``cache_key`` if needed, then reads its
    ``JITFunction.used_global_vals`` (``{(name, id(globals)): (value, globals)}``).
    Each function of :func:`jit_dependencies` is read, not only ``fn``: Triton
    3.6 merges a callee's globals into the caller's before it has computed the
    callee's hash, so the caller's map can lack them. Checked: 3.6.0, 3.9.0.
    """
    found: dict[tuple[str, int], UsedGlobal] = {}
    for f in jit_dependencies(fn):
        _ = f.cache_key
        for (name, _ns_id), (value, ns) in f.used_global_vals.items():
            found.setdefault((name, id(ns)), UsedGlobal(str(ns.get("__name__")), name, value, ns))
    return list(found.values())


def source_sha256(fn: Any) -> str:
    """The sha256 of a JITFunction's source text and its starting line, both in its cache key.

    Checked: 3.6.0, 3.9.0 (``JITFunction.src``, ``starting_line_number``).
    """
    text = f"{fn.src}\n#line {fn.starting_line_number}"
    return hashlib.sha256(text.encode()).hexdigest()


def save_identity(fns: list[Any]) -> list[tuple[Any, Any, Any]]:
    """Each function's cached hash and used globals, for :func:`restore_identity`. Checked: 3.6.0, 3.9.0."""
    return [(f, f.hash, f.used_global_vals) for f in fns]


def forget_identity(fns: list[Any]) -> None:
    """Make each function compute its hash (and used globals) again at its next use.

    Triton caches ``JITFunction.hash`` once; a caller's hash includes its
    callees' cached hashes, so every function of the chain is reset.
    Checked: 3.6.0, 3.9.0.
    """
    for f in fns:
        f.hash = None
        f.used_global_vals = {}


def restore_identity(saved: list[tuple[Any, Any, Any]]) -> None:
    """Put back what :func:`save_identity` saved. Checked: 3.6.0, 3.9.0."""
    for f, h, used in saved:
        f.hash = h
        f.used_global_vals = used
