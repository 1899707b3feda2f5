"""The factors of a Triton key's cache identity and of an existing entry (``warmkit explain``).

Both sides use the same names, so the core compares them one by one:

* the fingerprint (``_entry.fingerprint``): ``target``, ``triton_version``,
  ``triton_key_sha256``, ``python_abi``, ``ptxas``, ``env``;
* ``kernel`` and ``key`` (the warmkit key's text: its constexprs and shapes);
* ``source <module:function>`` (sha256 of the text and starting line) and
  ``global <module.name>`` (its value) of the function and every callee, from
  the pinned identity (``_pins``) the manifest carries, else this host's;
* ``option <name>`` for each launch option the key sets.

An entry's side comes from its ``warmkit-aot.json`` (written by an
ahead-of-time compile, with the identity it was compiled with) and Triton's
metadata ``<name>.json``; an entry Triton wrote itself has no record and
gives only what its metadata says.

``TritonIdentity`` is the backend's identity component (``backend.identity``): these
factors, and a kernel's pins (``_pins``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._aot import parse_target
from ._entry import AOT_RECORD, fingerprint, validity_fields
from ._pins import _text, pins_for, pins_of
from ._values import _unwrap

__all__ = ["TritonIdentity", "entry_factors", "identity_factors", "key_factors"]

_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def identity_factors(identity: Mapping[str, Any] | None) -> dict[str, str]:
    """``source ...`` and ``global ...`` factors of a pinned identity."""
    if not identity:
        return {}
    out = {f"source {path}": str(sha)[:12] for path, sha in identity.get("sources", {}).items()}
    for rec in identity.get("globals", []):
        out[f"global {rec['module']}.{rec['name']}"] = _text(rec)
    return out


def key_factors(kernel: Any, key: Any, target: str | None) -> dict[str, str]:
    """The factors of what compiling ``key`` of a ``TritonKernel`` for ``target`` here would write."""
    out = dict(fingerprint(parse_target(target) if target is not None else None))
    out["kernel"] = str(type(kernel).name)
    out["key"] = repr(key)
    try:
        fn = kernel.function_for(key)
    except Exception:  # noqa: BLE001 -- the key's own failure is reported where it compiles
        fn = None
    pins = pins_for(kernel, key)
    if pins is None and _unwrap(fn) is not None:
        pins = pins_of(fn)
    out.update(identity_factors(pins))
    for name, value in (kernel.launch_options(key) or {}).items():
        out[f"option {name}"] = repr(value)
    return out


def entry_factors(files: Mapping[str, bytes]) -> dict[str, str]:
    """The factors of an existing entry, from its ``.json`` files by name.

    Raises:
        ValueError, KeyError, TypeError: a record that is not warmkit's.
    """
    out: dict[str, str] = {}
    raw = files.get(AOT_RECORD)
    meta_name = None
    if raw is not None:
        rec = json.loads(raw)
        out.update(validity_fields(rec["target"], rec["validity"]))
        out.update({"kernel": str(rec["kernel"]), "key": str(rec["key"])})
        out.update(identity_factors(rec.get("identity")))
        meta_name = f"{rec['name']}.json"
    metas = [n for n in files if not n.startswith(("__grp__", "warmkit-"))]
    meta_raw = files.get(meta_name) if meta_name else (files[metas[0]] if metas else None)
    if meta_raw is not None:
        meta = json.loads(meta_raw)
        out.update({f"option {k}": repr(meta[k]) for k in _OPTIONS if k in meta})
    return out


class TritonIdentity:
    """The identity component of ``TritonBackend`` (``backend.identity``).

    ``warmkit.PinsIdentity`` (a kernel's pins, for the manifest) and
    ``warmkit.ExplainsMisses`` (the factors ``warmkit explain`` compares).
    """

    def identity_pins(self, kernel: Any) -> dict[str, Any] | None:
        """The pinned identity of a ``TritonKernel``'s function (``_pins.pins_of``), or None."""
        return pins_of(getattr(kernel, "fn", None))

    key_factors = staticmethod(key_factors)  # a key's cache-identity factors here
    entry_factors = staticmethod(entry_factors)  # an existing entry's, from its .json files
