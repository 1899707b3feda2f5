"""A manifest's keys against a bundle or a cache: ``warmkit explain``, ``bundle check``, ``--keep``.

``explain`` says per key of a manifest (declared and recorded) whether this
host (or ``--target``) finds its entry, and if not why (the per-key reasons are
``warmkit._cache.misses``'); ``manifest_entries`` names the cache entries a
manifest's keys need, which ``warmkit cache prune --keep`` never removes. Both
load the manifest and apply its pinned identity as a warmup does, so they sit
above both the registry and the cache. Nothing compiles and no GPU is needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .._cache.misses import (
    Entries,
    ExplainsMisses,
    Explanation,
    bundle_entries,
    cache_entries,
    entry_factor_map,
    explain_key,
    fingerprint_miss,
    kernel_name,
)
from .._plugin.components import capability
from .._plugin.contract import BundleCapable, FleetCapable, target_scope

__all__ = ["explain", "explanations_json", "manifest_entries"]


def _items(registry: Any) -> Iterator[tuple[str | None, Any, Any, str | None]]:
    """``(backend, kernel, key, error)`` of every key of ``registry``, declared then recorded."""
    from .._registry.recorded import resolve_recorded

    for inst, keys in registry.resolve().values():
        for k in keys:
            yield type(inst).backend, inst, k, None
    for item in resolve_recorded(registry.recorded()):
        if item.entry.replayable:
            err = None if item.error is None else str(item.error)
            yield item.entry.backend, item.kernel, item.key, err


def explain(
    manifest: str | os.PathLike[str] | None = None,
    *,
    bundle: str | os.PathLike[str] | None = None,
    cache_dirs: Mapping[str, str | os.PathLike[str]] | None = None,
    target: str | None = None,
    kernel: str | None = None,
    key: str | None = None,
) -> list[Explanation]:
    """Say, per key of ``manifest``, whether this host (or ``target``) finds its entry, and why not.

    Args:
        manifest: a manifest (declared and recorded keys); default: the
            manifest a ``bundle`` carries.
        bundle: a ``.wkb`` to check against; else each backend's cache
            directory (``cache_dirs`` overrides it per backend).
        target: the target the keys are for; default: the bundle's target,
            else this host's device.
        kernel: only this kernel's keys.
        key: only keys whose text contains this.

    Returns:
        One :class:`Explanation` per key.

    Raises:
        BundleError: not a readable bundle.
        ManifestError: an unreadable manifest.
    """
    from .._plugin.discovery import get_backend
    from .._registry.identity import pins_scope
    from .config import WarmupConfig

    registry, target, refused = _registry_and_target(manifest, bundle, target)
    out: list[Explanation] = []
    sources: dict[str | None, tuple[Any, Entries, dict[str, Mapping[str, str]]] | None] = {}
    with pins_scope(registry, WarmupConfig(target=target)), target_scope(target):
        for backend_name, inst, k, error in _items(registry):
            name = kernel_name(inst) if inst is not None else "?"
            if (kernel and name != kernel) or (key and key not in repr(k)):
                continue
            if error is not None or inst is None:
                out.append(Explanation(backend_name, name, repr(k), "miss", error))
                continue
            if backend_name not in sources:
                sources[backend_name] = _source(backend_name, get_backend, bundle, cache_dirs)
            src = sources[backend_name]
            if src is None:
                out.append(Explanation(backend_name, name, repr(k), "unknown", "no cache"))
                continue
            backend, entries, factors = src
            fp = fingerprint_miss(entries, backend, target)
            if fp is not None:
                field, there_v, here_v = fp
                reason = f"the {entries.label} was built for {field} {there_v}, here {here_v}"
                out.append(
                    Explanation(backend_name, name, repr(k), "miss", reason, field, there_v, here_v)
                )
                continue
            found = explain_key(backend_name, backend, inst, k, target, entries, factors)
            why = refused.get((name, repr(k)))
            if why is not None and found.status != "hit":  # the build said why already
                found = attrs.evolve(
                    found,
                    status="miss",
                    reason=f"left out of {bundle} at build (--skip-refused): {why}",
                    factor="refused",
                )
            out.append(found)
    return out


def _registry_and_target(
    manifest: Any, bundle: Any, target: str | None
) -> tuple[Any, str | None, dict[tuple[str, str], str]]:
    """The keys, the target, and the keys the bundle's build left out (kernel, key) -> why."""
    from .._registry.registry import WarmupRegistry

    refused: dict[tuple[str, str], str] = {}
    if bundle is not None:
        from .._cache.bundle import _open

        with _open(bundle) as (_tar, meta, _p):
            embedded, bundle_target = meta.get("manifest"), meta.get("target")
            # checked by _open: a list of {kernel, key, reason} strings
            refused = {(r["kernel"], r["key"]): r["reason"] for r in meta.get("refused", [])}
        target = target if target is not None else bundle_target
        if manifest is None:
            if embedded is None:
                raise ValueError(f"bundle {bundle} carries no manifest; pass --manifest")
            return WarmupRegistry.from_dict(embedded, path=bundle), target, refused
    if manifest is None:
        raise ValueError("explain needs a manifest, or a bundle that carries one")
    return WarmupRegistry.load(manifest), target, refused


def _source(
    backend_name: str | None, get_backend: Any, bundle: Any, cache_dirs: Any
) -> tuple[Any, Entries, dict[str, Mapping[str, str]]] | None:
    if backend_name is None:
        return None
    backend = get_backend(backend_name)
    cache = capability(backend, BundleCapable)
    if cache is None:
        return None
    if bundle is not None:
        entries = bundle_entries(Path(bundle), backend_name)
    else:
        root = (cache_dirs or {}).get(backend_name) or cache.cache_dir()
        entries = cache_entries(Path(root))
    explains = capability(backend, ExplainsMisses)
    factors = entry_factor_map(explains, entries) if explains is not None else {}
    return backend, entries, factors


def explanations_json(items: Sequence[Explanation]) -> str:
    """The ``--json`` form: ``{"keys": [...], "misses": n}``."""
    return json.dumps(
        {"keys": [e.to_dict() for e in items], "misses": sum(e.status == "miss" for e in items)},
        indent=2,
    )


def manifest_entries(
    backend_name: str, backend: Any, manifest: str | os.PathLike[str], target: str | None
) -> dict[str, str]:
    """The cache entries of ``backend`` that ``manifest``'s keys need: ``{entry dir name: key}``.

    Each key's entry comes from ``FleetCapable.entry_key`` (no compile), with
    the manifest's pinned identity applied as a warmup applies it.

    Raises:
        ValueError: a key of this backend whose entry cannot be known here (its
            kernel does not import, it is autotuned ...): keeping the manifest's
            entries could not be promised, so nothing is pruned.
    """
    from .._plugin.contract import target_scope
    from .._registry.identity import pins_scope
    from .._registry.recorded import resolve_recorded
    from .._registry.registry import WarmupRegistry
    from .config import WarmupConfig

    fleet = capability(backend, FleetCapable)
    if fleet is None:
        return {}
    registry = WarmupRegistry.load(manifest)
    items = [(inst, k) for inst, keys in registry.resolve().values() for k in keys]
    for item in resolve_recorded(registry.recorded()):
        if item.entry.backend == backend_name and item.entry.replayable:
            if item.error is not None:
                raise ValueError(f"--keep {manifest}: recorded {item.entry.name}: {item.error}")
            items.append((item.kernel, item.key))
    out: dict[str, str] = {}
    with pins_scope(registry, WarmupConfig(target=target)), target_scope(target):
        for kernel, key in items:
            if getattr(type(kernel), "backend", backend_name) != backend_name:
                continue
            ek = fleet.entry_key(kernel, key, target)
            if ek is None:
                raise ValueError(
                    f"--keep {manifest}: the cache entry of kernel {type(kernel).name!r} key "
                    f"{key!r} cannot be known without compiling it (autotuned, or its function "
                    "does not import here), so its entry cannot be kept; nothing was pruned"
                )
            out[Path(fleet.entry_dir(ek)).name] = f"{type(kernel).name} {key!r}"
    return out
