"""``warmkit coverage``: does a manifest cover what a real run compiled? A CI gate, no GPU.

For each entry a run recorded (``warmkit record``), the manifest covers it when:

* it has the same recorded entry (same kernel, same specialization), or
* for a ``"raw"`` entry: one of its declared kernels' keys specializes the
  same function exactly that way. The backend maps declared keys to its
  specializations without compiling (``Backend.specializations``: for Triton,
  its own argument binder, under an ahead-of-time driver);
* for a ``"key"`` entry: a declared registration plans that key;
* for a raw autotune (its key and the GPU model it was tuned on): a declared
  key has the same autotune key (a device warmup tunes it on any GPU model).

What is not covered is listed. When a missed specialization belongs to a
function the manifest declares, it is explained against the nearest declared
variant: an unaligned tensor, a scalar equal to 1, a new dtype ... exactly
what a declared space tends to miss.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._plugin.components import capability
from .._plugin.contract import SpecializationMap
from .manifest.codec import encode_key
from .manifest.entries import RecordedEntry

__all__ = ["CoverageReport", "coverage"]

logger = logging.getLogger(__name__)


def _ident(entry: RecordedEntry) -> str:
    spec = entry.spec
    tuned = spec.get("autotune") if entry.kind == "raw" else None
    if isinstance(tuned, dict):
        # A recorded autotune covers its own autotune key on its own GPU model, whatever the
        # winner (timings are noisy): without them every such entry of a kernel would match.
        body: Any = {"autotune": [tuned.get("key"), tuned.get("gpu")]}
    elif entry.kind == "raw":
        body = {"args": spec.get("args"), "options": spec.get("options")}
    else:
        body = spec.get("key")
    return json.dumps([entry.backend, entry.kind, entry.kernel, body], sort_keys=True)


def _tuned_ident(backend: str | None, kernel: str, key: Any) -> str:
    """A raw autotune's key on no particular GPU model: what a declared key covers."""
    return json.dumps([backend, kernel, key], sort_keys=True)


def _entry_tuned_ident(entry: RecordedEntry) -> str | None:
    tuned = entry.spec.get("autotune") if entry.kind == "raw" else None
    if not isinstance(tuned, dict):
        return None
    return _tuned_ident(entry.backend, entry.kernel, tuned.get("key"))


@attrs.frozen
class Missed:
    """One specialization the run compiled that the manifest does not cover.

    Attributes:
        entry: the run's recorded entry.
        variants: how it differs from the nearest declared variant of the same
            function (empty when the manifest declares nothing for it).
    """

    entry: RecordedEntry
    variants: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.entry.name,
            "backend": self.entry.backend,
            "kind": self.entry.kind,
            "id": self.entry.id,
            "spec": self.entry.spec.get("args") if self.entry.kind == "raw" else self.entry.spec,
            "replayable": self.entry.replayable,
            "reason": self.entry.reason,
            "variants": list(self.variants),
        }


@attrs.frozen
class CoverageReport:
    """The outcome of ``coverage``.

    Attributes:
        total: entries in the run.
        covered: how many of them the manifest covers.
        missed: the rest, in the run's order.
    """

    total: int
    covered: int
    missed: tuple[Missed, ...]

    @property
    def ok(self) -> bool:
        return not self.missed

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "total": self.total,
            "covered": self.covered,
            "missed": [m.to_dict() for m in self.missed],
        }

    def text(self) -> str:
        lines = [f"coverage: {self.covered} of {self.total} recorded specialization(s) covered"]
        for m in self.missed:
            lines.append(f"MISSED {m.entry.name}: {_describe(m.entry)}")
            if m.entry.reason:
                lines.append(f"    (not replayable: {m.entry.reason})")
            for v in m.variants:
                lines.append(f"    missed variant: {v}")
        return "\n".join(lines)


def _describe(entry: RecordedEntry) -> str:
    if entry.kind != "raw":
        return repr(entry.spec.get("key"))
    parts = []
    for a in entry.spec.get("args", []):
        parts.append(f"{a.get('name')}:{_arg_text(a)}")
    opts = ", ".join(f"{k}={v!r}" for k, v in entry.spec.get("options", []))
    return ", ".join(parts) + (f" | {opts}" if opts else "")


def _arg_text(a: Mapping[str, Any]) -> str:
    kind = a.get("kind")
    if kind == "pointer":
        return f"*{a['dtype']}" + ("" if a.get("aligned") else "[unaligned]")
    if kind == "int":
        if a.get("class") == "one":
            return "==1"
        return f"{a['class']}" + ("[div16]" if a.get("div16") else "")
    if kind == "constexpr":
        return f"={json.dumps(a.get('value'))}"
    if kind == "float":
        return str(a.get("type"))
    return str(kind)


def _variants(run: Sequence[Mapping[str, Any]], declared: Sequence[Mapping[str, Any]]) -> list[str]:
    """What makes ``run``'s args differ from one declared variant's, in plain words."""
    out = []
    for r, d in zip(run, declared):
        if r == d:
            continue
        name = r.get("name")
        rk, dk = r.get("kind"), d.get("kind")
        if rk == dk == "pointer":
            if r.get("dtype") != d.get("dtype"):
                out.append(f"new dtype: {name} is *{r['dtype']} (declared *{d['dtype']})")
            if r.get("aligned") != d.get("aligned"):
                out.append(
                    f"unaligned tensor: {name} is not 16-byte aligned (declared aligned)"
                    if not r.get("aligned")
                    else f"aligned tensor: {name} is 16-byte aligned (declared unaligned only)"
                )
        elif rk == "int" and r.get("class") == "one":
            out.append(f"scalar equal to 1: {name} == 1 is a compile-time constant")
        elif rk == dk == "int":
            if r.get("class") != d.get("class"):
                out.append(f"wider integer: {name} is {r['class']} (declared {d['class']})")
            elif r.get("div16") != d.get("div16"):
                out.append(
                    f"{name} is {'' if r.get('div16') else 'not '}divisible by 16 "
                    f"(declared {'' if d.get('div16') else 'not '}divisible)"
                )
        else:
            out.append(f"{name}: {_arg_text(r)} (declared {_arg_text(d)})")
    return out


def _nearest(run: Mapping[str, Any], declared: Iterable[Mapping[str, Any]]) -> list[str]:
    best: list[str] | None = None
    for d in declared:
        if len(d.get("args", [])) != len(run.get("args", [])):
            continue
        diff = _variants(run["args"], d["args"])
        if run.get("options") != d.get("options"):
            diff.append(f"launch options {run.get('options')} (declared {d.get('options')})")
        if best is None or len(diff) < len(best):
            best = diff
    return best or []


def _nearest_key(run: Any, declared: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fields in which ``run``'s key differs from the nearest declared key (the one with the
    fewest differing fields), each with the values the manifest declares for it."""
    if not isinstance(run, Mapping):
        return []
    best: list[str] | None = None
    for d in declared:
        diff = sorted(f for f in run.keys() | d.keys() if run.get(f) != d.get(f))
        if best is None or len(diff) < len(best):
            best = diff
    out = []
    for field in best or []:
        values = list(dict.fromkeys(json.dumps(d.get(field), sort_keys=True) for d in declared))
        out.append(
            f"{field}: {json.dumps(run.get(field), sort_keys=True)} (declared {', '.join(values)})"
        )
    return out


def coverage(
    registry: Any, run: Iterable[RecordedEntry], *, target: str | None = None
) -> CoverageReport:
    """Which of ``run``'s entries ``registry`` (a loaded manifest) covers.

    Args:
        registry: the deployment's ``WarmupRegistry`` (declared and recorded).
        run: the entries a real run recorded.
        target: the target declared keys are specialized for (backends pick
            a default, ``"cuda:90"`` for Triton); no GPU is needed.

    Raises:
        ValueError: a backend of the manifest or the run rejects ``target``.
        Whatever planning the declared registrations raises (a registration
        that no longer plans is an error, not "uncovered").
    """
    from .._plugin.discovery import call_hook, check_target, get_backend, kernel_ref

    entries = list(run)
    resolved = registry.resolve()
    used = {type(k).backend for k, _ in resolved.values()} | {e.backend for e in entries}
    check_target(target, sorted(b for b in used if b is not None))  # as every command does
    have = {_ident(e) for e in registry.recorded()}
    declared_raw: dict[str, list[dict[str, Any]]] = {}
    declared_keys: set[str] = set()
    declared_fields: dict[str, list[dict[str, Any]]] = {}  # per kernel: its declared keys' fields
    declared_tuned: set[str] = set()
    for name, (kernel, keys) in resolved.items():
        cls = type(kernel)
        ref = kernel_ref(cls)
        for key in keys:
            try:
                fields = encode_key(key)
            except TypeError:
                continue
            declared_keys.add(json.dumps([cls.backend, "key", ref, fields], sort_keys=True))
            declared_fields.setdefault(ref, []).append(fields)
        if cls.backend is None:
            continue
        mapper = capability(get_backend(cls.backend, kernel=name), SpecializationMap)
        if mapper is None:
            logger.info("backend %s cannot map keys to specializations", cls.backend)
            continue
        specs = call_hook(
            cls.backend, "specializations", mapper.specializations, kernel, keys, target
        )
        for path, spec in specs:
            if isinstance(spec.get("autotune"), dict):
                declared_tuned.add(_tuned_ident(cls.backend, path, spec["autotune"].get("key")))
                continue
            declared_raw.setdefault(path, []).append(spec)
            have.add(json.dumps([cls.backend, "raw", path, spec], sort_keys=True))
    have |= declared_keys
    missed = []
    for entry in entries:
        if _ident(entry) in have or _entry_tuned_ident(entry) in declared_tuned:
            continue
        variants: list[str] = []
        if entry.kind == "raw" and entry.kernel in declared_raw:
            variants = _nearest(entry.spec, declared_raw[entry.kernel])
        elif entry.kind == "key" and entry.kernel in declared_fields:
            variants = _nearest_key(entry.spec.get("key"), declared_fields[entry.kernel])
        missed.append(Missed(entry, tuple(variants)))
    return CoverageReport(len(entries), len(entries) - len(missed), tuple(missed))
