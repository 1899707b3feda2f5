"""JSON for manifests: canonical text, and plain values and keys as tagged JSON data.

JSON has no tuple and no infinity, and a tuple (one value) must never come
back as a list (alternatives), so those are tagged (``{"tuple": [...]}``,
``{"float": "inf"}``). A recorded entry's identity is a hash of canonical
JSON (sorted keys, no spaces), made by one shared encoder.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..._plugin.contract import KernelClass

__all__ = ["decode_key", "decode_value", "encode_key", "encode_value"]

# One encoder, not json.dumps(..., sort_keys=True): with options, dumps builds an encoder
# per call, a third of the cost of reading a recorded entry.
_encode_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode


def _canonical(data: Any) -> str:
    return _encode_canonical(data)


def _parsed_encoder() -> Any:
    """``_encode_canonical`` for data parsed from JSON, with json's C encoder made once.

    ``JSONEncoder.encode`` builds a C encoder per call (half its cost for a small
    spec). Parsed JSON has no cycles, so this one keeps no markers; it is the
    same encoder otherwise (tests/core/test_record.py checks the two agree).
    """
    from json import encoder

    c_make = getattr(encoder, "c_make_encoder", None)
    if c_make is None:  # an interpreter without json's C accelerator
        return _encode_canonical
    default = json.JSONEncoder().default  # its TypeError, as json.dumps raises it
    make = c_make(
        None, default, encoder.encode_basestring_ascii, None, ":", ",", True, False, False
    )

    def encode(data: Any) -> str:
        return "".join(make(data, 0))

    sample = {"b": [1, 2.5, None, True, "\u00e9\n"], "a": {"z": -0.0, "y": "x"}}
    if encode(sample) != _encode_canonical(sample):  # another json: keep the plain one
        return _encode_canonical
    return encode


_encode_parsed = _parsed_encoder()

# set by JSONDecoder.__init__ (the C scanner), which typeshed does not declare
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _decode_canonical(text: str) -> Any:
    """``json.loads(text)`` for canonical JSON, through json's scanner alone (2.3 -> 1.0 us).

    Canonical text has nothing around its value; other text (whitespace, trailing
    data, no value at all) goes through ``json.loads``, which parses or raises as usual.
    """
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


# A recording repeats a few kernels, backends and targets over thousands of entries.
_canonical_cached = functools.lru_cache(maxsize=1024)(_canonical)


def encode_value(v: Any) -> Any:
    """A plain value as JSON data: tuples and non-finite floats tagged (``decode_value`` undoes it)."""
    if isinstance(v, tuple):
        return {"tuple": [encode_value(x) for x in v]}
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": repr(v)}
    return v


def decode_value(v: Any) -> Any:
    """The value ``encode_value`` encoded.

    Raises:
        ValueError: an unknown tag.
        TypeError: a bare list (alternatives are tagged).
    """
    if isinstance(v, dict):
        if set(v) == {"tuple"}:
            return tuple(decode_value(x) for x in v["tuple"])
        if set(v) == {"float"}:
            return float(v["float"])
        raise ValueError(f"unknown value encoding {v!r}")
    if isinstance(v, list):
        raise TypeError(
            f"a bare list {v!r} is not a value; alternatives are encoded as {{'list': [...]}}"
        )
    return v


def encode_key(key: Any) -> dict[str, Any]:
    """A ``CompileKey``'s fields as JSON data (tuples and non-finite floats tagged).

    Raises:
        TypeError: a field that is not plain data (it could not be rebuilt elsewhere).
    """
    if attrs.has(type(key)):
        names = [f.name for f in attrs.fields(type(key))]
    elif dataclasses.is_dataclass(key):
        names = [f.name for f in dataclasses.fields(key)]
    elif hasattr(type(key), "_fields"):
        names = list(type(key)._fields)
    else:
        raise TypeError(f"key {key!r} is not an attrs, dataclass or NamedTuple CompileKey")
    out = {}
    for name in names:
        value = getattr(key, name)
        _check_plain_value(name, value)
        out[name] = encode_value(value)
    return out


def _check_plain_value(name: str, value: Any) -> None:
    if isinstance(value, tuple):
        for v in value:
            _check_plain_value(name, v)
        return
    if value is not None and type(value) not in (bool, int, float, str):
        raise TypeError(
            f"field {name!r} is a {type(value).__name__} ({value!r:.80}), not plain data "
            "(None, bool, int, float, str or tuples of them)"
        )


def decode_key(cls: KernelClass, fields: Mapping[str, Any]) -> Any:
    """Rebuild ``cls.CompileKey`` from ``encode_key`` data."""
    if _AS_IS.issuperset(map(type, fields.values())):  # nothing tagged: the fields as they are
        return cls.CompileKey(**fields)
    return cls.CompileKey(
        **{k: v if type(v) in _AS_IS else decode_value(v) for k, v in fields.items()}
    )


_AS_IS = frozenset({str, int, bool, float, type(None)})  # values decode_value returns unchanged
