"""Pinned identity: the host-dependent inputs of a kernel's cache key, saved and reproduced.

A ``@triton.jit`` function's cache key covers its source, its callees' and
the values of the ``tl.constexpr`` globals they read. Real libraries compute
such globals from the machine at import (flash-linear-attention's
``SOLVE_TRIL_DOT_PRECISION = tl.constexpr('tf32' if IS_TF32_SUPPORTED else 'ieee')``),
so a CPU build host imports other values than the GPU host and would build
other entries. :func:`pins_of` records, per function, what the key depends on::

    {"globals": [{"module": "fla.ops.utils", "name": "PREC", "constexpr": true, "value": "tf32"}],
     "sources": {"fla.ops.solve_tril:solve_kernel": "<sha256 of its source>", ...}}

and :func:`pinned` compiles ahead of time with the recorded values: it sets
the module globals that differ to the recorded values while the compile runs
(under one lock, so no other pinned compile sees them), makes Triton compute
the hashes again, and restores both afterwards. What cannot be reproduced (a
value with no lossless encoding that differs here, a function whose source
differs) is a :class:`PinMismatchError` naming the kernel, the global or
function, and the recorded and local values: never a different variant built
silently.

A compile that changes no global takes no lock. A kernel of the same run with
no pins (a manifest written before pins existed) that reads a global another
kernel's compile has changed for its duration could see the pinned value; a
manifest saved by this version pins every Triton kernel it names.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from warmkit import IdentityMismatchError

from . import _triton_api as api
from ._values import UnreplayableError, _unwrap, decode_value, encode_value

__all__ = [
    "PinMismatchError",
    "compile_pinned",
    "differences",
    "entry_identity",
    "pinned",
    "pins_for",
    "pins_of",
    "settle",
]

logger = logging.getLogger(__name__)

# Held while module globals are set to recorded values: one pinned compile at a time.
_pin_lock = threading.RLock()
_MISSING = object()


class PinMismatchError(IdentityMismatchError):
    """A pinned identity that this host cannot reproduce; the message names what and both values."""


def _path(fn: Any) -> str:
    return f"{fn.fn.__module__}:{fn.fn.__qualname__}"


def _global_record(g: api.UsedGlobal) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "module": g.module,
        "name": g.name,
        "constexpr": api.is_constexpr(g.value),
    }
    try:
        rec["value"] = encode_value(g.value)
    except UnreplayableError:
        # Kept for the message only: a build host must then have the very same value.
        rec["repr"] = repr(g.value)[:200]
    return rec


def pins_of(fn: Any) -> dict[str, Any] | None:
    """The pinned identity of a ``@triton.jit`` function (or a stack over one), or None.

    None for what has no Triton source to pin (an interpreted function, a
    non-Triton object).
    """
    jit = _unwrap(fn) if fn is not None else None
    if jit is None or api.is_interpreted(jit):
        return None
    globals_ = sorted(
        (_global_record(g) for g in api.used_globals(jit)),
        key=lambda r: (r["module"], r["name"]),
    )
    sources = {_path(f): api.source_sha256(f) for f in api.jit_dependencies(jit)}
    return {"globals": globals_, "sources": dict(sorted(sources.items()))}


def _text(rec: Mapping[str, Any]) -> str:
    value = rec["value"] if "value" in rec else rec.get("repr")
    shown = repr(decode_value(value)) if "value" in rec else str(value)
    return f"tl.constexpr({shown})" if rec.get("constexpr") else shown


def _local_text(value: Any) -> str:
    if value is _MISSING:
        return "<not defined>"
    wrapped, inner = api.unwrap_constexpr(value)
    return f"tl.constexpr({inner!r})" if wrapped else repr(value)


def _same(rec: Mapping[str, Any], value: Any) -> bool:
    if value is _MISSING or api.is_constexpr(value) != bool(rec.get("constexpr")):
        return False
    if "value" not in rec:
        return rec.get("repr") == repr(value)[:200]
    try:
        return encode_value(value) == rec["value"]
    except UnreplayableError:
        return False


def differences(fn: Any, pins: Mapping[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """What differs here from ``pins``: ``(problems, changes)``.

    ``problems`` are one-line reasons the recorded identity cannot be
    reproduced (a source that differs, a value with no lossless encoding);
    ``changes`` are ``(namespace, name, recorded value, local value, text)``
    for each global a pinned compile sets.

    Memoized per function: the walks of its source cost ~2 ms a call, twice per
    key (probe and compile), 30 % of a warm key. The answer is reused while
    Triton's hash of the function (its source, callees and constexpr globals),
    the pins, and each pinned global here (the object it holds and that
    object's value: a ``tl.constexpr`` can be changed in place) are unchanged.
    """
    jit = _unwrap(fn)
    triton_hash, signature = api.source_identity(jit)[1], _signature(pins)
    memo = _differences_memo.get(id(jit))
    if (
        memo is not None
        and memo[0] is jit
        and memo[1] == (triton_hash, signature)
        and all(
            ns.get(name, _MISSING) is value and _local_text(value) == text
            for ns, name, value, text in memo[2]
        )
    ):
        problems, changes = memo[3]
        return list(problems), list(changes)
    problems, changes = _differences(jit, pins)
    held = []
    for rec in pins.get("globals", []):
        module = sys.modules.get(rec["module"])
        ns = getattr(module, "__dict__", None)
        if ns is not None:
            value = ns.get(rec["name"], _MISSING)
            held.append((ns, rec["name"], value, _local_text(value)))
    _differences_memo[id(jit)] = (jit, (triton_hash, signature), held, (problems, changes))
    return list(problems), list(changes)


# id(function) -> (the function, (Triton's hash, the pins' signature), what each pinned global
# held, the answer): see differences()
_differences_memo: dict[int, tuple[Any, tuple[str, str], list[tuple[Any, ...]], Any]] = {}


def _differences(jit: Any, pins: Mapping[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    problems: list[str] = []
    local_src = {_path(f): api.source_sha256(f) for f in api.jit_dependencies(jit)}
    recorded_src = pins.get("sources", {})
    for path in sorted(set(recorded_src) | set(local_src)):
        was, now = recorded_src.get(path), local_src.get(path)
        if was != now:
            problems.append(
                f"function {path}: source sha256 {str(was)[:12] if was else '<not called>'} "
                f"when pinned, {now[:12] if now else '<not called>'} here"
            )
    changes: list[tuple[Any, ...]] = []
    used = {(g.module, g.name): g for g in api.used_globals(jit)}
    for rec in pins.get("globals", []):
        g = used.pop((rec["module"], rec["name"]), None)
        module = sys.modules.get(rec["module"])
        ns = g.namespace if g is not None else getattr(module, "__dict__", None)
        local = ns.get(rec["name"], _MISSING) if ns is not None else _MISSING
        if _same(rec, local):
            continue
        where = f"global {rec['module']}.{rec['name']}"
        if "value" not in rec or ns is None:
            why = "no lossless encoding" if "value" not in rec else "its module is not imported"
            problems.append(
                f"{where} = {_text(rec)} when pinned, {_local_text(local)} here ({why}: it cannot "
                "be reproduced)"
            )
            continue
        want = decode_value(rec["value"])
        want = api.make_constexpr(want) if rec.get("constexpr") else want
        text = f"{where} = {_text(rec)} when pinned, {_local_text(local)} here"
        changes.append((ns, rec["name"], want, local, text))
    for (module_name, name), g in sorted(used.items()):  # read here, absent from the pins
        problems.append(
            f"global {module_name}.{name} = {_local_text(g.value)} here is not in the pinned identity"
        )
    return problems, changes


@contextlib.contextmanager
def pinned(kernel: str, fn: Any, pins: Mapping[str, Any]) -> Iterator[list[str]]:
    """Compile ``fn`` inside the block with its pinned identity; yields what was changed.

    Raises:
        PinMismatchError: the identity cannot be reproduced here; the message
            names the kernel, each global or function, the pinned and local values.
    """
    jit = _unwrap(fn)
    # Compared under the lock: while another pinned compile runs, the module globals hold
    # its pinned values, not this host's.
    _pin_lock.acquire()
    try:
        problems, changes = differences(jit, pins)
        if problems:
            raise PinMismatchError(
                f"kernel {kernel!r}: the pinned identity cannot be reproduced on this host: "
                + "; ".join(problems)
                + ". Refusing to build another variant than the one pinned: build where the "
                "pinned values hold, or save/record the manifest again"
            )
        signature = _signature(pins)
        if not changes:
            settle(jit)
        elif _compiled_under.get(jit) != signature:
            # What is in memory was compiled under other values (this host's, or other
            # pins): a launch walk must not hit it. Under these same pins it stays, so the
            # entry a probe just loaded is still there for the compile that follows.
            _drop_in_memory(jit)
    except BaseException:
        _pin_lock.release()
        raise
    if not changes:
        _pin_lock.release()  # this host's values are the pinned ones: compile in parallel
        yield []
        return
    deps = api.jit_dependencies(jit)
    try:
        saved = api.save_identity(deps)
        for ns, name, want, _local, _text_ in changes:
            ns[name] = want
        api.forget_identity(deps)
        try:
            yield [c[4] for c in changes]
        finally:
            for ns, name, _want, local, _text_ in changes:
                if local is _MISSING:
                    ns.pop(name, None)
                else:
                    ns[name] = local
            api.restore_identity(saved)
            # What it compiled stays in memory (a replay checks Triton's key there): the next
            # compile of the function that is not pinned the same way drops it first.
            _compiled_under[jit] = signature
    finally:
        _pin_lock.release()


# Functions whose in-memory kernels were compiled under pinned values -> those pins'
# signature; a function absent holds only what this host's own values compiled.
_compiled_under: dict[Any, str] = {}


def _signature(pins: Mapping[str, Any]) -> str:
    return json.dumps(pins, sort_keys=True, default=repr)


def settle(fn: Any) -> None:
    """Before a compile with this host's values: drop what a pinned compile left in memory."""
    if _compiled_under:
        jit = _unwrap(fn)
        with _pin_lock:
            if _compiled_under.pop(jit, None) is not None:
                _drop_in_memory(jit)


def _drop_in_memory(jit: Any) -> None:
    for cache in api.kernel_caches(jit):
        cache.clear()


def pins_for(kernel: Any, key: Any) -> Mapping[str, Any] | None:
    """The pinned identity that compiles ``key``: a recorded entry's own, else the manifest's."""
    spec_json = getattr(key, "spec_json", None)
    if isinstance(spec_json, str):  # a recorded raw entry carries its pins in its spec
        pins = json.loads(spec_json).get("pins")
        return pins if isinstance(pins, dict) else None
    from warmkit import pinned_identity

    return pinned_identity(type(kernel).name)


def compile_pinned(
    compile_: Callable[[Any, Any, Any], Any], kernel: Any, key: Any, target: Any, aot: bool
) -> Any:
    """``compile_(kernel, key, target)``, ahead of time with the key's pinned identity if any."""
    pins = pins_for(kernel, key) if aot else None
    fn = getattr(kernel, "fn", None)
    if pins is None or fn is None:
        if fn is not None:
            settle(fn)
        return compile_(kernel, key, target)
    name = getattr(kernel, "name", type(kernel).__qualname__)
    with pinned(name, fn, pins) as changed:
        if changed:
            logger.info("kernel %s key %r: compiled with its pinned %s", name, key, changed)
        return compile_(kernel, key, target)


_identities: dict[tuple[int, str], dict[str, Any] | None] = {}


def entry_identity(fn: Any) -> dict[str, Any] | None:
    """``pins_of(fn)`` as compiled now (pinned values included), memoized per function and hash.

    Written into each AOT entry's record, so ``warmkit explain`` can name the
    global or function in which a missing key's entry differs from one that exists.
    """
    jit = _unwrap(fn)
    if jit is None or api.is_interpreted(jit):
        return None
    memo = (id(jit), api.source_identity(jit)[1])
    found = _identities.get(memo, _MISSING)
    if found is _MISSING:
        try:
            found = pins_of(jit)
        except Exception as exc:  # noqa: BLE001 -- explain then names no global; the entry stands
            logger.debug("no identity recorded for %s: %s", jit, exc)
            found = None
        _identities[memo] = found
    return found  # type: ignore[return-value]
