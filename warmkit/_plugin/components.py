"""A backend's components: its optional capabilities grouped into a few objects, and finding them.

A backend is its required part (``warmkit.Backend``: targets, compile scopes,
``compile``) plus optional capabilities, each a protocol. Rather than one class
implementing every protocol, a backend may expose a few *component* objects as
attributes, one per group of related capabilities, in the way a Triton backend
is a compiler plus a driver:

* ``cache``: the persistent cache and its entries (bundles, the fleet,
  ``warmkit cache``, finishing installed entries): ``BundleCapable``,
  ``CacheProbe``, ``FleetCapable``, ``PreparesEntries``;
* ``identity``: what a key's cache identity is made of: ``PinsIdentity``,
  ``ExplainsMisses``;
* ``recording``: recorded entries, replayed, and declared keys in their
  recorded form (``warmkit coverage``): ``RecordReplay``, ``SpecializationMap``;
* ``tuning``: autotune results, stored and still needed: ``TunedResults``,
  ``TuningPlan``;
* ``runtime``: the backend in a process (early setup, compile workers, the
  hooks of ``warmkit.monitor``): ``Prepares``, ``ProcessCompiles``,
  ``PrimesWorkers``, ``MonitorHooks``.

``CanonicalTargets`` belongs to no component: it spells targets next to the
required ``default_target``, on the backend itself.

Each protocol names its component (:func:`component`, next to the protocol's
definition); :func:`capability` is the core's one way to ask for a capability.
It returns the object to call: the component when it satisfies the protocol,
else the backend itself when it does (a backend written against the flat
protocols, with every method on itself, works unchanged), else None. A protocol
is provided whole by one object, never split between a component and the backend.

Why named components, fixed per protocol, rather than a list a backend hands
over: one attribute lookup per question, never a choice between two objects
that both match; the grouping is part of the contract (documented once, here),
so every backend's ``backend.cache`` means the same thing. The component is
asked first so that a backend that keeps flat methods only as delegations to
its components (``TritonBackend``, for code outside warmkit that calls them)
is used through the components by the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["COMPONENTS", "capability", "component", "component_of"]

#: The component attributes a backend may have, in the order the contract lists them.
COMPONENTS = ("cache", "identity", "recording", "tuning", "runtime")

_C = TypeVar("_C", bound=type)
_P = TypeVar("_P")


def component(name: str) -> Callable[[_C], _C]:
    """Class decorator of an optional protocol: the backend's component ``name`` may provide it.

    Raises:
        ValueError: ``name`` is not one of :data:`COMPONENTS`.
    """
    if name not in COMPONENTS:
        raise ValueError(f"unknown component {name!r}; the components are {', '.join(COMPONENTS)}")

    def mark(protocol: _C) -> _C:
        protocol._warmkit_component = name  # type: ignore[attr-defined]  # read by capability()
        return protocol

    return mark


def component_of(backend: object, protocol: type) -> object:
    """Where ``protocol`` is looked for first: the backend's component for it when it has one, else the backend.

    What an error names when neither provides it (``missing_members`` of this object).
    """
    name = getattr(protocol, "_warmkit_component", None)
    part = getattr(backend, name, None) if name is not None else None
    return backend if part is None else part


def capability(backend: object, protocol: type[_P]) -> _P | None:
    """The object that provides ``protocol`` for ``backend``, or None when none does.

    The backend's component for the protocol (:func:`component`) when it
    satisfies it, else the backend itself when it does. Call the capability's
    methods on what this returns. It costs the ``isinstance`` it replaces plus
    one attribute lookup (about 0.1 us); no caller asks it per key (``Fleet``
    and ``ColdPool`` ask once per backend).
    """
    part = component_of(backend, protocol)
    if part is not backend and isinstance(part, protocol):
        return part
    return backend if isinstance(backend, protocol) else None
