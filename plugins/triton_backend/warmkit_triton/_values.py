"""Constexpr values and ``@triton.jit`` functions written so that another process rebuilds them.

Used by recording (``_record``), pinned identity (``_pins``) and coverage:
:func:`encode_value` / :func:`decode_value` (numbers, bools, strings, ``None``,
tuples, ``tl.dtype``\\ s, ``@triton.jit`` functions by import path), and the
import path of a function (:func:`_import_path`, :func:`_import_problem`).
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from typing import Any

from warmkit import WarmkitError

from . import _triton_api as api

__all__ = ["UnreplayableError", "decode_value", "encode_value"]


class UnreplayableError(WarmkitError, ValueError):
    """Raised while describing a specialization that another process cannot rebuild."""


# -- values -----------------------------------------------------------------------------------


def encode_value(value: Any) -> Any:
    """A constexpr or launch-option value as JSON data; ``decode_value`` inverts it exactly.

    Raises:
        UnreplayableError: a value with no lossless encoding.
    """
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if type(value) is tuple:
        return {"tuple": [encode_value(v) for v in value]}
    wrapped, inner = api.unwrap_constexpr(value)
    if wrapped:
        return encode_value(inner)
    name = api.dtype_name(value)
    if name is not None:
        return {"tl.dtype": name}
    if _unwrap(value) is value:
        fn = value.fn
        path = f"{fn.__module__}:{fn.__qualname__}"
        problem = _import_problem(fn.__module__, fn.__qualname__, value)
        if problem:
            raise UnreplayableError(f"@triton.jit function {path} passed as a value: {problem}")
        return {"jit_function": path}
    raise UnreplayableError(
        f"a {type(value).__module__}.{type(value).__qualname__} value ({value!r:.60}) has no "
        "lossless encoding"
    )


def decode_value(data: Any) -> Any:
    """The value ``encode_value`` encoded.

    Raises:
        ValueError: an unknown tag.
        ImportError, LookupError: a ``jit_function`` that no longer resolves.
    """
    if isinstance(data, dict) and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "tuple":
            return tuple(decode_value(v) for v in body)
        if tag == "float":
            return float(body)
        if tag == "tl.dtype":
            return api.dtype_from_name(body)
        if tag == "jit_function":
            return _unwrap(_import_path(body))
    if isinstance(data, (dict, list)):
        raise TypeError(f"unknown recorded value encoding {data!r}")
    return data


# -- import paths -------------------------------------------------------------------------------


def _unwrap(obj: Any) -> Any:
    """The JITFunction behind an Autotuner/Heuristics chain (each has ``.fn``), or None.

    A JITFunction's own ``.fn`` is the plain Python function it compiles.
    """
    for _ in range(8):
        inner = getattr(obj, "fn", None)
        if inner is None:
            return None
        if isinstance(inner, types.FunctionType):
            return obj if api.is_jit_function(obj) else None
        obj = inner
    return None


def _import_path(path: str) -> Any:
    module, _, qual = path.partition(":")
    try:
        obj = importlib.import_module(module)
    except Exception as exc:
        raise ImportError(
            f"recorded kernel {path}: module {module!r} no longer imports "
            f"({type(exc).__name__}: {exc}); install it, or re-record"
        ) from exc
    for part in qual.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(
                f"recorded kernel {path}: module {module!r} has no {qual!r} any more; re-record"
            ) from None
    return obj


def _import_problem(module: str, qualname: str, jit_fn: Any) -> str | None:
    """Why ``module:qualname`` would not give ``jit_fn`` back in another process, or None."""
    if module == "__main__":
        return (
            "it is defined in __main__, which another process cannot import; move it into a module"
        )
    if "<locals>" in qualname:
        return "it is defined inside a function (a closure), so it has no import path"
    mod = sys.modules.get(module)
    if mod is None:
        return f"its module {module!r} is not importable by name"
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return f"{module}:{qualname} does not resolve (the module has no such attribute)"
    if _unwrap(obj) is not jit_fn:
        return f"{module}:{qualname} resolves to a different object ({type(obj).__name__})"
    return None
