"""Pinned identity: what a manifest records of each kernel's host-dependent cache-key inputs.

A kernel's compiled entry can depend on more than its key: the values of
globals its module computed at import (from the GPU it saw), and the source of
every function it calls. ``WarmupRegistry.save`` asks each backend that
implements :class:`PinsIdentity` for them and writes them in the manifest's
``pins`` section (``{kernel name: {"backend": ..., ...backend data}}``); a
warmup or bundle build of that manifest makes them available to the backend
through :func:`pinned_identity` while it compiles, so an ahead-of-time build
reproduces them or refuses the key (``docs/bundles.md``).

A manifest without ``pins`` (written before they existed, or where a kernel's
identity could not be taken) builds as before, with the build host's values,
and the build says so once (a warning). One whose kernels' backends pin
nothing has an empty ``pins`` and builds quietly.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

from .._plugin.components import capability, component
from .._plugin.contract import _Capability

__all__ = [
    "PinsIdentity",
    "kernel_pins",
    "manifest_pins",
    "pinned_identity",
    "pinning",
    "pins_scope",
]

logger = logging.getLogger(__name__)

# (declared pins by kernel name, whether any key of the warmup is pinned)
_active: ContextVar[tuple[Mapping[str, Any], bool]] = ContextVar(
    "warmkit_pins", default=({}, False)
)


@component("identity")
@runtime_checkable
class PinsIdentity(_Capability, Protocol):
    """Optional: saves and reproduces the host-dependent inputs of a kernel's identity."""

    def identity_pins(self, kernel: Any) -> Mapping[str, Any] | None:
        """JSON data pinning ``kernel``'s identity on this host (globals, source hashes), or None."""
        ...


def pinned_identity(kernel: str) -> Mapping[str, Any] | None:
    """The pins the manifest being warmed records for ``kernel`` (its registration name), or None.

    Args:
        kernel: the kernel's name, as its registrations name it.

    Returns:
        The backend's pin data, or None outside a warmup of a manifest with pins.
    """
    pins = _active.get()[0].get(kernel)
    return pins if isinstance(pins, Mapping) else None


def pinning() -> bool:
    """Whether any key of the warmup in progress compiles with a pinned identity."""
    return _active.get()[1]


@contextlib.contextmanager
def pins_scope(registry: Any, config: Any) -> Iterator[None]:
    """Make ``registry``'s pins (declared and recorded) visible to compiles in the block.

    Ahead of time (``config.target`` set), a manifest that predates pins is
    built with this host's values, as before, and says so once.
    """
    target = config.target
    loaded = getattr(registry, "pins", None)
    declared = dict(loaded or {})
    recorded = False
    for e in registry.recorded():
        # The canonical spec text, not .spec (a fresh parse per entry): a recording has thousands.
        if '"pins":' not in e.spec_json:
            continue
        recorded = True
        if e.kind == "key" and e.name not in declared:  # a declared kernel's recorded key
            declared[e.name] = {"backend": e.backend, **e.spec["pins"]}
    if target is not None and loaded is None and getattr(registry, "loaded", False):
        logger.warning(
            "warmkit: this manifest has no pinned identity (it was saved before warmkit pinned "
            "kernels' globals, or where a kernel's identity could not be taken): its kernels "
            "are built for %s with this host's global values, which may differ from the "
            "serving host's; save it again on the serving host's software to pin them",
            target,
        )
    token = _active.set((declared, bool(declared) or recorded))
    try:
        yield
    finally:
        _active.reset(token)


def kernel_pins(cls: type) -> Mapping[str, Any] | None:
    """The pins of kernel class ``cls`` on this host, from its backend; None when it pins nothing.

    Never raises: a recording keeps the key without pins (built as before).
    """
    from .._plugin.discovery import get_backend

    try:
        backend = get_backend(cls.backend, kernel=cls.name)  # type: ignore[attr-defined]
        pinner = capability(backend, PinsIdentity)
        return None if pinner is None else pinner.identity_pins(cls())
    except Exception as exc:  # noqa: BLE001 -- the key is recorded all the same
        logger.debug("kernel %s: its identity cannot be pinned: %s", cls, exc)
        return None


def manifest_pins(registry: Any) -> tuple[dict[str, Any], bool]:
    """``{kernel name: pins}`` for the declared kernels of ``registry``, and whether it is complete.

    A kernel whose backend does not pin has no entry, and the pins are complete
    without it (TileLang, CuTe DSL: nothing host-dependent to pin). One whose
    backend is not installed, or whose identity cannot be taken (the backend
    raised, with a warning naming it), has none either, and the pins are then
    not complete: its keys build with the build host's values.
    """
    from .._plugin.discovery import get_backend

    out: dict[str, Any] = {}
    complete = True
    seen: set[type] = set()
    for reg in registry:
        cls = reg.kernel_cls
        if cls in seen:
            continue
        seen.add(cls)
        try:
            backend = get_backend(cls.backend, kernel=cls.name)
        except Exception as exc:  # noqa: BLE001 -- a missing backend pins nothing; the build says why
            logger.debug("kernel %s: not pinned, its backend does not load: %s", reg.kernel, exc)
            complete = False
            continue
        pinner = capability(backend, PinsIdentity)
        if pinner is None:
            continue
        try:
            pins = pinner.identity_pins(cls())
        except Exception as exc:  # noqa: BLE001 -- saved unpinned, said once
            logger.warning(
                "kernel %s: its identity cannot be pinned in the manifest (%s: %s); its keys "
                "will build with the build host's global values",
                reg.kernel,
                type(exc).__name__,
                exc,
            )
            complete = False
            continue
        if pins is not None:
            out[reg.kernel] = {"backend": cls.backend, **pins}
    return dict(sorted(out.items())), complete
