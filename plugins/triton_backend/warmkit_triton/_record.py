"""Recording raw ``@triton.jit`` specializations at runtime, and replaying them at the next start.

**Recording.** Triton's ``jit_cache_hook`` sees every in-memory miss of every
JIT function, wrapped by warmkit or not. :func:`entry_from_hook` turns one
miss into a :class:`warmkit.RecordedEntry` whose ``spec`` says, per parameter:

* a pointer: ``{"kind": "pointer", "dtype": "fp16", "aligned": true}``;
* an int: ``{"kind": "int", "class": "i32", "div16": true}``, or
  ``{"kind": "int", "class": "one"}`` (Triton makes a 1 a compile-time constant);
* a float or bool: its Triton type; ``None``: ``{"kind": "none"}``;
* a constexpr: its value, encoded losslessly (numbers, bools, strings,
  ``None``, tuples, ``tl.dtype``\\ s, ``@triton.jit`` functions by import path);

plus the launch options in call order (they shape Triton's in-memory cache
key), the target, the Triton version, Triton's own in-memory cache key and
the function's source hash. Whatever cannot be rebuilt in another process (a
function in ``__main__`` or a closure, a tensor-descriptor argument, a
constexpr object with no lossless encoding) is recorded with the reason.

**Replay.** :func:`recorded_kernel` gives, per recorded function, a
``TritonKernel`` whose key is the recorded spec: its ``warmup_args`` builds
``WarmupTensor``\\ s of the recorded dtype and alignment and one
representative per int class, so the whole warmup machinery (device compile
plus module load plus launcher, or ahead of time for a target, parallel,
bundles) applies unchanged. The function is imported at compile time: a module
that no longer imports, or a source that changed, fails that entry only. After
the compile, the recorded Triton cache key must be in the function's in-memory
cache (same Triton version), so a replay that would not make the next launch a
hit is an error, never a silent success.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from . import _triton_api as api
from ._kernel import TritonKernel
from ._pins import PinMismatchError, differences, pins_of
from ._specialize import _rep_of_class
from ._tensor import WarmupTensor
from ._values import (
    UnreplayableError,
    _import_path,
    _import_problem,
    _unwrap,
    decode_value,
    encode_value,
)

__all__ = [
    "PlacedWinner",
    "RecordedTritonKernel",
    "RecordedTuning",
    "describe_spec",
    "entry_from_event",
    "recorded_kernel",
    "spec_from_call",
    "tuned_entry",
]

logger = logging.getLogger(__name__)

BACKEND = "triton"

# Keys JITFunction.run adds to the launch kwargs itself; they end the in-memory key.
_RUN_ADDED = ("debug", "instrumentation_mode", "fpsan_homomorphic_casts")


# -- describing a specialization ------------------------------------------------------------------


def _div16(attrs_: Mapping[Any, Any], i: int) -> bool:
    for item in attrs_.get((i,), ()) or ():
        if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] == "tt.divisibility":
            return item[1] == 16
    return False


def _arg(param: api.JitParam, ty: Any, div16: bool, value: Any) -> dict[str, Any]:
    """One parameter's entry, from its Triton type, alignment and (for constants) value."""
    name = param.name
    if isinstance(ty, tuple):
        raise UnreplayableError(f"argument {name!r} is a tuple, which warmkit cannot rebuild")
    if ty == "constexpr":
        if not param.is_constexpr:
            if value is None:
                return {"name": name, "kind": "none"}
            if type(value) is int and value == 1:
                return {"name": name, "kind": "int", "class": "one"}
        return {"name": name, "kind": "constexpr", "value": _checked(name, value)}
    if ty.startswith("*"):
        dtype = ty[1:]
        dtype = dtype.removeprefix("k")
        return {"name": name, "kind": "pointer", "dtype": dtype, "aligned": bool(div16)}
    if ty == "u1":
        return {"name": name, "kind": "bool"}
    if ty[:1] in ("i", "u") and ty[1:].isdigit():
        return {"name": name, "kind": "int", "class": ty, "div16": bool(div16)}
    if ty.startswith(("fp", "bf")):
        return {"name": name, "kind": "float", "type": ty}
    raise UnreplayableError(
        f"argument {name!r} has Triton type {ty!r} (a tensor descriptor?), which warmkit cannot rebuild"
    )


def _checked(name: str, value: Any) -> Any:
    encoded = encode_value(value)
    back = decode_value(encoded)
    plain = api.unwrap_constexpr(value)[1]
    if back != plain or type(back) is not type(plain):
        raise UnreplayableError(f"constexpr {name!r}={value!r} does not survive encoding")
    return encoded


def options_from_key(key: Any) -> list[list[Any]]:
    """The launch options, in call order, from Triton's in-memory cache key (``str(spec) + str(options)``).

    Raises:
        UnreplayableError: a key of another shape (a future Triton).
    """
    if not isinstance(key, str):
        raise UnreplayableError(f"Triton's cache key is a {type(key).__name__}, not a string")
    cut = key.rfind("]{")
    try:
        opts = ast.literal_eval(key[cut + 1 :]) if cut >= 0 else None
    except (ValueError, SyntaxError):
        opts = None
    if not isinstance(opts, dict) or str(opts) != key[cut + 1 :]:
        raise UnreplayableError("the launch options cannot be read from Triton's cache key")
    items = list(opts.items())
    while items and items[-1][0] in _RUN_ADDED:
        items.pop()
    return [[k, encode_value(v)] for k, v in items]


def _target_text(target: Any) -> str | None:
    if target is None:
        return None
    backend = getattr(target, "backend", None)
    arch = getattr(target, "arch", None)
    return f"{backend}:{arch}" if backend is not None else None


def _current_target() -> str | None:
    try:
        return _target_text(api.active_driver().get_current_target())
    except Exception:  # noqa: BLE001 - no driver: target unknown
        return None


def entry_from_event(event: api.MissEvent) -> Any:
    """The recorded entry for one in-memory miss (``jit_cache_hook``), or None.

    Unreplayable specializations are returned too, with the reason.
    """

    jit_fn = event.jit_fn
    fn = getattr(jit_fn, "fn", None)
    if fn is None:
        return None
    module, qual = fn.__module__, fn.__qualname__
    reason = _import_problem(module, qual, jit_fn)
    spec: dict[str, Any] = {"args": [], "options": [], "triton": api.triton_version()}
    try:
        spec["args"] = [
            _arg(p, event.signature.get(p.name), _div16(event.attrs, i), event.constants.get((i,)))
            for i, p in enumerate(api.jit_param_flags(jit_fn))
        ]
        spec["options"] = options_from_key(event.key)
    except UnreplayableError as exc:
        reason = reason or str(exc)
    if isinstance(event.key, str):
        spec["triton_key"] = event.key
    return _raw_entry(jit_fn, spec, reason)


def _raw_entry(jit_fn: Any, spec: dict[str, Any], reason: str | None) -> Any:
    """A ``kind="raw"`` entry of ``jit_fn``, its source identity added to ``spec``."""
    from warmkit import RecordedEntry

    fn = jit_fn.fn
    src_sha256, source_hash = api.source_identity(jit_fn)
    spec["src_sha256"] = src_sha256
    if reason is None:
        spec["source_hash"] = source_hash
        pins = _pins_of(jit_fn)
        if pins is not None:
            spec["pins"] = pins
    return RecordedEntry.make(
        backend=BACKEND,
        kind="raw",
        kernel=f"{fn.__module__}:{fn.__qualname__}",
        name=f"{fn.__module__}.{fn.__qualname__}",
        spec=spec,
        target=_current_target(),
        reason=reason,
    )


def _pins_of(jit_fn: Any) -> dict[str, Any] | None:
    """The function's pinned identity (``_pins``), or None when it cannot be taken."""

    try:
        return pins_of(jit_fn)
    except Exception as exc:  # noqa: BLE001 -- the entry stays, checked by source hash as before
        logger.warning("recorded kernel %s: its identity cannot be pinned: %s", jit_fn, exc)
        return None


def spec_from_call(
    fn: Any, specialization: Sequence[Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``{"args", "options"}`` of a call, from the binder's specialization list (coverage).

    Raises:
        UnreplayableError: an argument kind warmkit cannot describe.
    """
    args = []
    for p, item in zip(api.jit_param_flags(fn), specialization):
        ty, attr = (item[0], item[1]) if isinstance(item, (list, tuple)) else (item, None)
        value = attr if ty == "constexpr" else None
        args.append(_arg(p, ty, attr == "D", value))
    return {"args": args, "options": [[k, encode_value(v)] for k, v in options.items()]}


def describe_spec(spec: Mapping[str, Any]) -> str:
    """A readable one-line form: ``x:*fp16, n:i32[div16], BLOCK=1024 | num_warps=4``.

    A recorded autotune reads
    ``autotune key (1024, 'torch.float32') -> BLOCK=256 | num_warps=4, num_stages=3 on NVIDIA H200``.
    """
    tuned = spec.get("autotune")
    if tuned is not None:
        win = tuned.get("winner", {})
        chosen = ", ".join(f"{k}={v}" for k, v in win.get("kwargs", {}).items())
        return (
            f"autotune key {decode_value_text(tuned.get('key'))} -> {chosen} | "
            f"num_warps={win.get('num_warps')}, num_stages={win.get('num_stages')} on {tuned.get('gpu')}"
        )
    parts = []
    for a in spec.get("args", []):
        kind = a["kind"]
        if kind == "pointer":
            parts.append(f"{a['name']}:*{a['dtype']}{'' if a['aligned'] else '[unaligned]'}")
        elif kind == "int":
            cls = a["class"]
            parts.append(
                f"{a['name']}=1"
                if cls == "one"
                else f"{a['name']}:{cls}{'[div16]' if a['div16'] else ''}"
            )
        elif kind == "constexpr":
            parts.append(f"{a['name']}={decode_value_text(a['value'])}")
        elif kind == "float":
            parts.append(f"{a['name']}:{a['type']}")
        else:
            parts.append(f"{a['name']}:{kind}")
    opts = ", ".join(f"{k}={decode_value_text(v)}" for k, v in spec.get("options", []))
    return ", ".join(parts) + (f" | {opts}" if opts else "")


def decode_value_text(data: Any) -> str:
    if isinstance(data, dict) and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "tuple":
            return (
                "("
                + ", ".join(decode_value_text(v) for v in body)
                + ("," if len(body) == 1 else "")
                + ")"
            )
        return str(body)
    return repr(data)


# -- replay ---------------------------------------------------------------------------------------


class RecordedTritonKernel(TritonKernel):
    """Replays the recorded specializations of one raw ``@triton.jit`` function.

    One subclass per function (``recorded_kernel`` makes them), named after
    the function, so report rows and bundles name the real kernel.
    """

    path: ClassVar[str] = ""

    @attrs.frozen(repr=False)
    class CompileKey:
        spec_json: str

        def __repr__(self) -> str:
            return describe_spec(json.loads(self.spec_json))

    def dispatch(self, *, spec_json: str) -> Any:
        return self.CompileKey(spec_json)

    def _function(self, spec: Mapping[str, Any], top: Any = None) -> Any:
        """The recorded ``@triton.jit`` function behind ``top`` (default: imported), its source checked."""
        jit = _unwrap(top if top is not None else _import_path(self.path))
        if jit is None:
            raise LookupError(
                f"recorded kernel {self.path} no longer resolves to a @triton.jit function; re-record"
            )
        pins = spec.get("pins")
        if isinstance(pins, dict):  # compiled entries and autotune winners alike
            self._check_pins(jit, pins, spec)
            return jit
        src_sha256, source_hash = api.source_identity(jit)
        if spec.get("src_sha256") != src_sha256:
            raise RuntimeError(
                f"recorded kernel {self.path}: its source text changed since it was recorded "
                f"(sha256 {str(spec.get('src_sha256'))[:12]} then, {src_sha256[:12]} now); "
                "re-record to warm the new version"
            )
        if spec.get("triton") == api.triton_version() and spec.get("source_hash") not in (
            None,
            source_hash,
        ):
            raise RuntimeError(
                f"recorded kernel {self.path}: its text is unchanged but Triton's hash of it "
                f"differs ({str(spec.get('source_hash'))[:12]} then, {source_hash[:12]} here): a "
                "function it calls, the value of a global it reads, or its line number differs. "
                "This recording predates pinned identity, so warmkit cannot tell which; re-record "
                "with this warmkit to have each global and function named"
            )
        return jit

    def _check_pins(self, jit: Any, pins: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
        """A device compile builds this host's variant: refuse one that is not the recorded one.

        Ahead of time the backend compiles with the pinned values instead (``_pins.pinned``).
        """
        from warmkit import current_target

        if current_target() is not None:
            return
        if (
            spec.get("triton") == api.triton_version()
            and not api.is_interpreted(jit)
            and spec.get("source_hash") == api.source_identity(jit)[1]
        ):
            # Triton's hash of the function covers its source and starting line, each function
            # it calls (their hashes) and the value of each constexpr global it reads, which
            # are the only globals a kernel may read: equal to the recorded one, nothing the
            # pins name differs. The launch path computes that hash anyway (it is memoized on
            # the function); walking the pins instead cost fla's warm restart 0.6 s for 66 keys.
            return
        problems, changes = differences(jit, pins)
        problems += [c[4] for c in changes]
        if problems:
            raise PinMismatchError(
                f"recorded kernel {self.path}: this host would compile another variant than the "
                f"one recorded: {'; '.join(problems)}. Build it ahead of time (--target) to "
                "compile the recorded values, or re-record on this host"
            )

    def function_for(self, key: Any) -> Any:
        """Import the recorded function and check its source; it becomes ``fn``.

        Raises:
            ImportError, LookupError: the function no longer imports or resolves.
            RuntimeError: its source changed since it was recorded.
        """
        with _fn_lock:
            # per instance: each recorded entry names its own function (fn is a ClassVar elsewhere)
            self.fn = self._function(json.loads(key.spec_json))  # type: ignore[misc]
            return self.fn

    def compile(self, key: Any) -> Any:
        """Import the function, check its source, compile the recorded variant, check the cache key.

        Raises:
            ImportError, LookupError: the function no longer imports or resolves.
            RuntimeError: its source changed, or the replay did not reproduce
                the recorded Triton cache key.
        """
        spec = json.loads(key.spec_json)
        self.function_for(key)
        executor = super().compile(key)
        recorded = spec.get("triton_key")
        if recorded and spec.get("triton") == api.triton_version():
            caches = api.kernel_caches(self.fn)
            if caches and not any(recorded in cache for cache in caches):
                raise RuntimeError(
                    f"recorded kernel {self.path}: replaying {describe_spec(spec)} did not reproduce "
                    "Triton's recorded cache key, so the next launch would still compile; "
                    "please report this with the manifest entry"
                )
        return executor

    def warmup_args(self, key: Any) -> tuple[Sequence[Any], Mapping[str, Any]]:
        spec = json.loads(key.spec_json)
        params = api.jit_param_flags(self.fn)
        args = [_replay_arg(p, a) for p, a in zip(params, spec["args"], strict=True)]
        return args, {}

    def launch_options(self, key: Any) -> Mapping[str, Any]:
        return {k: decode_value(v) for k, v in json.loads(key.spec_json)["options"]}


_fn_lock = threading.Lock()
_classes: dict[tuple[type, str], type[RecordedTritonKernel]] = {}


def _replay_arg(param: api.JitParam, a: Mapping[str, Any]) -> Any:
    kind = a["kind"]
    if kind == "pointer":
        return WarmupTensor(a["dtype"], (16,), aligned=a["aligned"])
    if kind == "int":
        if a["class"] == "one":
            return 1
        specialize = not param.do_not_specialize
        align = not param.do_not_specialize_on_alignment
        attr = None if not specialize else ("D" if a["div16"] else "")
        rep = _rep_of_class((a["class"], attr), specialize, align)
        if rep is None:
            raise ValueError(f"no representative for int class {a['class']} of {param.name!r}")
        return rep
    if kind == "float":
        return 1.5
    if kind == "bool":
        return True
    if kind == "none":
        return None
    if kind == "constexpr":
        return decode_value(a["value"])
    raise ValueError(f"unknown recorded argument kind {kind!r} for {param.name!r}")


def recorded_kernel(entry: Any) -> tuple[Any, Any]:
    """The kernel and key that replay one raw recorded entry (the backend's ``recorded_kernel``)."""
    spec = entry.spec
    tuned = "autotune" in spec
    base = RecordedTuning if tuned else RecordedTritonKernel
    with _fn_lock:
        cls = _classes.get((base, entry.kernel))
        if cls is None:
            cls = type(
                f"{'RecordedTuning' if tuned else 'Recorded'}[{entry.kernel}]",
                (base,),
                {"name": entry.name, "path": entry.kernel, "__module__": __name__},
            )
            _classes[(base, entry.kernel)] = cls
    core = (
        {"autotune": spec["autotune"]}
        if tuned
        else {"args": spec["args"], "options": spec["options"]}
    )
    for field in ("triton", "triton_key", "source_hash", "src_sha256", "pins"):
        if field in spec:
            core[field] = spec[field]
    return cls(), cls.CompileKey(json.dumps(core, sort_keys=True))


# -- raw autotune winners -------------------------------------------------------------------------


def _configs_digest(described: Sequence[Mapping[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(list(described), sort_keys=True).encode()).hexdigest()


def tuned_entry(autotuner: Any, tkey: tuple[Any, ...], winner: Any) -> Any:
    """The recorded entry for one raw autotune that finished: its autotune key and winning config.

    The entry is valid only on the GPU model it was measured on (it records
    it); the configs it chose among are recorded as compiles of their own.
    Returns None when ``autotuner`` is not a stack over a ``@triton.jit``
    function or no winner was chosen.
    """

    from ._stack import unwrap
    from ._tuned import describe_config, gpu_model

    stack = unwrap(autotuner)
    fn = getattr(getattr(stack, "jit", None), "fn", None)
    if stack is None or stack.tuner is None or fn is None or winner is None:
        return None
    module, qual = fn.__module__, fn.__qualname__
    reason = _import_problem(module, qual, stack.jit)
    try:
        key = encode_value(tuple(tkey))
    except UnreplayableError as exc:
        key, reason = repr(tkey), reason or f"its autotune key cannot be saved: {exc}"
    spec: dict[str, Any] = {
        "autotune": {
            "key": key,
            "winner": describe_config(winner),
            "configs": _configs_digest([describe_config(c) for c in stack.tuner.configs]),
            "gpu": gpu_model(None, interpreted=api.is_interpreted(stack.jit)),
        },
        "triton": api.triton_version(),
    }
    return _raw_entry(stack.jit, spec, reason)


@attrs.frozen
class PlacedWinner:
    """What replaying a recorded raw autotune returns; it launches nothing (the raw kernel does).

    Attributes:
        kernel: the kernel's name.
        key: the compile key (the recorded entry).
        tuning_key: the autotune key.
        tuning: ``"stored"`` (the winner is in the autotuner's cache: its first
            call benchmarks nothing) or ``"needs-device"`` (an ahead-of-time
            warmup, or another GPU model than the one measured: the first call
            tunes).
    """

    kernel: str
    key: Any
    tuning_key: tuple[Any, ...]
    tuning: str
    cache_hit: bool = True
    autotune_seconds: float = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"kernel {self.kernel!r}: a recorded autotune result cannot launch; call the kernel"
        )


class RecordedTuning(RecordedTritonKernel):
    """Replays a recorded raw autotune: a device warmup puts the winner into the autotuner's cache."""

    def function_for(self, key: Any) -> Any:
        """None: the result has no cache entry of its own (each config compiled is an entry)."""
        return None

    def compile(self, key: Any) -> Any:
        """Check the function, its configs and the GPU model; place the winner on a match.

        Raises:
            ImportError, LookupError: the function no longer imports, or is no longer autotuned.
            RuntimeError: its source or its configs changed since it was recorded.
        """
        from warmkit import current_target

        from ._stack import unwrap
        from ._tuned import describe_config, gpu_model

        spec = json.loads(key.spec_json)
        tuned = spec["autotune"]
        top = _import_path(self.path)
        jit = self._function(spec, top)
        stack = unwrap(top)
        if stack is None or stack.tuner is None:
            raise LookupError(f"recorded kernel {self.path} is no longer autotuned; re-record")
        tkey = decode_value(tuned["key"])
        if current_target() is not None:
            # Ahead of time nothing is placed, and the configs may legitimately differ here:
            # libraries compute them from the visible GPU (flash-linear-attention does). Each
            # config the run compiled is a recorded compile of its own, checked by its pins.
            return PlacedWinner(self.name, key, tkey, "needs-device")
        described = [describe_config(c) for c in stack.tuner.configs]
        if _configs_digest(described) != tuned["configs"] or tuned["winner"] not in described:
            raise RuntimeError(
                f"recorded kernel {self.path}: its autotune configs changed since it was "
                "recorded; re-record"
            )
        here = gpu_model(None, interpreted=api.is_interpreted(jit))
        if here == tuned["gpu"]:
            stack.tuner.cache[tkey] = stack.tuner.configs[described.index(tuned["winner"])]
            return PlacedWinner(self.name, key, tkey, "stored")
        if here is not None:
            logger.warning(
                "recorded kernel %s autotune key %r: the winner was measured on %s, this is %s; "
                "its first call will tune here (results are only used on the GPU model measured)",
                self.path,
                tkey,
                tuned["gpu"],
                here,
            )
        return PlacedWinner(self.name, key, tkey, "needs-device")
