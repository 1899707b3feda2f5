"""The manifest's JSON Schema, checked with ``jsonschema`` before anything in it is used.

A manifest that does not match is a ``ManifestError`` naming the JSON path of
the problem (``$.registrations[0].space.n``), the kernel of that registration,
and what was expected: an unknown or renamed field, a missing one, a range of
two numbers, a zip row shorter than its names are all refused, never read as
defaults.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..._exceptions import ManifestError

logger = logging.getLogger(__name__)

__all__ = ["MANIFEST_SCHEMA", "validate_manifest"]

_VALUE: dict[str, Any] = {
    "description": "a value: null, a boolean, a number, a string, {'tuple': [values]} or "
    "{'float': 'inf'|'-inf'|'nan'}",
    "anyOf": [
        {"type": ["null", "boolean", "number", "string"]},
        {
            "type": "object",
            "properties": {"tuple": {"type": "array", "items": {"$ref": "#/$defs/value"}}},
            "required": ["tuple"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"float": {"enum": ["inf", "-inf", "nan"]}},
            "required": ["float"],
            "additionalProperties": False,
        },
    ],
}

_AXIS: dict[str, Any] = {
    "description": "an axis: a value, {'range': [start, stop, step]} (integers), "
    "{'choices': [values]} or {'list': [values]}",
    "anyOf": [
        {"$ref": "#/$defs/value"},
        {
            "type": "object",
            "properties": {
                "range": {
                    "description": "[start, stop, step]: three integers, step not 0",
                    "type": "array",
                    "prefixItems": [
                        {"type": "integer"},
                        {"type": "integer"},
                        {
                            "description": "step: a non-zero integer",
                            "type": "integer",
                            "not": {"const": 0},
                        },
                    ],
                    "minItems": 3,
                    "maxItems": 3,
                }
            },
            "required": ["range"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "choices": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/value"}}
            },
            "required": ["choices"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "list": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/value"}}
            },
            "required": ["list"],
            "additionalProperties": False,
        },
    ],
}

_KERNEL_REF: dict[str, Any] = {
    "description": "a warmkit.kernels entry-point name or module:QualName",
    "type": "string",
    "minLength": 1,
}

_REGISTRATION: dict[str, Any] = {
    "description": "a registration: {kernel, name, zip, space}",
    "type": "object",
    "properties": {
        "kernel": _KERNEL_REF,
        "name": {"type": "string"},
        "zip": {
            "type": "array",
            "items": {
                "description": "a zip group: {names: [str], rows: [[value per name]]}",
                "type": "object",
                "properties": {
                    "names": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "uniqueItems": True,
                    },
                    "rows": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "array", "items": {"$ref": "#/$defs/value"}},
                    },
                },
                "required": ["names", "rows"],
                "additionalProperties": False,
            },
        },
        "space": {
            "description": "keyword axes: {input name: axis}",
            "type": "object",
            "additionalProperties": {"$ref": "#/$defs/axis"},
        },
    },
    "required": ["kernel", "space"],
    "additionalProperties": False,
}

_POINTS: dict[str, Any] = {
    "description": "consecutive single-point registrations of one kernel: {kernel, name, "
    "points: {names: [str], rows: [[plain value per name]]}}, each row one registration "
    "(version 2)",
    "type": "object",
    "properties": {
        "kernel": _KERNEL_REF,
        "name": {"type": "string"},
        "points": {
            "type": "object",
            "properties": {
                "names": {
                    "type": "array",
                    "items": {"type": "string"},
                    "uniqueItems": True,
                },
                "rows": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "description": "a point: one plain value (null, a boolean, a number, "
                        "a string) per name",
                        "type": "array",
                        "items": {"type": ["null", "boolean", "number", "string"]},
                    },
                },
            },
            "required": ["names", "rows"],
            "additionalProperties": False,
        },
    },
    "required": ["kernel", "points"],
    "additionalProperties": False,
}

_STR_OR_NULL = {"type": ["string", "null"]}

_RECORDED_GROUP: dict[str, Any] = {
    "description": "a group of recorded entries: {backend, kind, kernel, name, target, "
    "replayable, reason (when not replayable), entries: [[id, spec], ...]}",
    "type": "object",
    "properties": {
        "backend": _STR_OR_NULL,
        "kind": {"enum": ["raw", "key"]},
        "kernel": {"type": "string", "minLength": 1},
        "name": {"type": "string"},
        "target": _STR_OR_NULL,
        "replayable": {"type": "boolean"},
        "reason": {"type": "string"},
        "entries": {
            "type": "array",
            "items": {
                "description": "an entry: [id (24 hex digits), spec (an object)]",
                "type": "array",
                "prefixItems": [
                    {"description": "the entry's id (derived from it)", "type": "string"},
                    {"description": "the entry's spec (an object)", "type": "object"},
                ],
                "minItems": 2,
                "maxItems": 2,
            },
        },
    },
    "required": ["backend", "kind", "kernel", "name", "target", "replayable", "entries"],
    "additionalProperties": False,
}

#: The schema of a manifest written by ``WarmupRegistry.save`` and ``warmkit record``
#: (format ``warmkit.manifest``, version 2: the ``recorded`` section in groups).
MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "format": {"const": "warmkit.manifest"},
        "version": {"const": 2},
        "warmkit_version": {"type": "string"},
        "registrations": {
            "type": "array",
            "items": {
                "if": {"type": "object", "required": ["points"]},
                "then": {"$ref": "#/$defs/points"},
                "else": {"$ref": "#/$defs/registration"},
            },
        },
        "pins": {
            "description": "each kernel's pinned identity: {kernel name: {backend, ...}} "
            "(warmkit._registry.identity)",
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"backend": {"type": "string"}},
                "required": ["backend"],
            },
        },
        "recorded": {
            "description": "runtime JIT events recorded by warmkit record, grouped (each "
            "entry's id is checked by warmkit._registry.manifest.entries.parse_recorded)",
            "type": "array",
            "items": _RECORDED_GROUP,
        },
    },
    "required": ["format", "version", "registrations"],
    "additionalProperties": False,
    "$defs": {
        "value": _VALUE,
        "axis": _AXIS,
        "registration": _REGISTRATION,
        "points": _POINTS,
    },
}

# Version 1 (still read): the same, but a flat ``recorded`` list of entries, each checked
# by warmkit._registry.manifest.entries.RecordedEntry.from_dict.
_V1_SCHEMA: dict[str, Any] = {
    **MANIFEST_SCHEMA,
    "properties": {
        **MANIFEST_SCHEMA["properties"],
        "version": {"const": 1},
        "registrations": {"type": "array", "items": {"$ref": "#/$defs/registration"}},
        "recorded": {
            "description": "runtime JIT events recorded by warmkit record (checked entry by "
            "entry by warmkit._registry.manifest.entries.RecordedEntry.from_dict)",
            "type": "array",
            "items": {"type": "object"},
        },
    },
}


def _schema_for(data: Any) -> dict[str, Any]:
    return _V1_SCHEMA if isinstance(data, dict) and data.get("version") == 1 else MANIFEST_SCHEMA


def _row_schema(n: int) -> dict[str, Any]:
    return {
        "description": f"each row has one value per name ({n})",
        "type": "array",
        "items": {
            "description": f"one value per name ({n})",
            "type": "array",
            "minItems": n,
            "maxItems": n,
        },
    }


@functools.cache
def _fast_validator(version: int = 2) -> Any:
    try:
        import jsonschema_rs
    except ImportError:  # a --no-deps install: every manifest is walked by jsonschema (slow)
        logger.warning(
            "warmkit: jsonschema-rs (a dependency of warmkit) is not installed; manifests are "
            "validated by jsonschema alone, ~300 us per registration: pip install jsonschema-rs"
        )
        return None
    return jsonschema_rs.validator_for(_V1_SCHEMA if version == 1 else MANIFEST_SCHEMA)


def _errors(data: Any) -> list[Any]:
    fast = _fast_validator(1 if _schema_for(data) is _V1_SCHEMA else 2)
    if fast is not None and fast.is_valid(data) and _rows_match_names(data):
        # jsonschema-rs checks the same schema ~1000x faster (0.2 us per registration,
        # against ~300 us: a recording has one registration per key); only a manifest
        # that fails is walked by jsonschema, whose errors the messages below are made of.
        return []
    return _jsonschema_errors(data)


def _jsonschema_errors(data: Any) -> list[Any]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema_for(data))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        return errors
    # A zip row (or a point) must have one value per name: a schema per group, from its names.
    for i, reg in enumerate(data["registrations"]):
        if "points" in reg:
            rows = jsonschema.Draft202012Validator(_row_schema(len(reg["points"]["names"])))
            for err in rows.iter_errors(reg["points"]["rows"]):
                err.path.extendleft(reversed(["registrations", i, "points", "rows"]))
                errors.append(err)
        for g, group in enumerate(reg.get("zip", [])):
            rows = jsonschema.Draft202012Validator(_row_schema(len(group["names"])))
            for err in rows.iter_errors(group["rows"]):
                err.path.extendleft(reversed(["registrations", i, "zip", g, "rows"]))
                errors.append(err)
    return errors


def _rows_match_names(data: Any) -> bool:
    for reg in data["registrations"]:
        if "points" in reg:
            n = len(reg["points"]["names"])
            if not all(len(row) == n for row in reg["points"]["rows"]):
                return False
    return all(
        len(row) == len(group["names"])
        for reg in data["registrations"]
        for group in reg.get("zip", ())
        for row in group["rows"]
    )


def _deepest(error: Any) -> Any:
    """Inside an ``anyOf``, the alternative that came closest."""
    import jsonschema

    while error.context:
        # The alternative whose error lies deepest got furthest: {'range': [1, 5, 0]} is a
        # range with a bad step, not a bad value.
        depth = max(len(e.absolute_path) for e in error.context)
        error = jsonschema.exceptions.best_match(
            e for e in error.context if len(e.absolute_path) == depth
        )
    return error


def _expected(error: Any, best: Any) -> str:
    """What the schema wanted: the nearest description, at the closest alternative or above."""
    for err in (best, error):
        description = err.schema.get("description") if isinstance(err.schema, dict) else None
        if description:
            return description
    return ""


def _path(error: Any) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_manifest(data: Any, *, path: Any = None) -> None:
    """Check manifest data against ``MANIFEST_SCHEMA``.

    Raises:
        ManifestError: the first problems, each with its JSON path, the kernel
            of its registration and what was expected.
    """
    errors = _errors(data)
    if not errors:
        return
    lines = []
    for top in errors[:5]:
        err = _deepest(top)
        if not (isinstance(err.schema, dict) and err.schema.get("description")):
            err = top  # the closest alternative says nothing more specific
        where = _path(err)
        kernel = ""
        parts = list(err.absolute_path)
        if len(parts) >= 2 and parts[0] in ("registrations", "recorded"):
            item = data[parts[0]][parts[1]] if isinstance(parts[1], int) else None
            if isinstance(item, dict) and isinstance(item.get("kernel"), str):
                kernel = f" (kernel {item['kernel']!r})"
        expected = _expected(top, err)
        lines.append(
            f"{where}{kernel}: {err.message}" + (f"; expected {expected}" if expected else "")
        )
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    raise ManifestError(
        "manifest does not match its schema: " + " | ".join(lines) + more, path=path
    )
