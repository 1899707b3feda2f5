"""A backend's components (``warmkit._plugin.components``): the core finds each capability on the
object that provides it, a component or, for a backend written against the flat protocols,
the backend itself.

The split backends (``_split_backend.split``) have their cache and their monitor hooks only
on components.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

import warmkit
from warmkit._plugin.components import COMPONENTS, capability, component, component_of
from warmkit._plugin.contract import _Capability

from . import _bundle_backend, _fleet_backend, _split_backend
from ._fleet_backend import FleetBackend
from ._kernels import FakeBackend
from ._split_backend import split

SplitFleet = split(FleetBackend)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    for module in (_fleet_backend, _bundle_backend, _split_backend):
        module.reset()
    yield
    for module in (_fleet_backend, _bundle_backend, _split_backend):
        module.reset()


# -- capability(): which object provides a protocol -------------------------------------------------


def test_a_flat_backend_provides_its_capabilities_itself():
    backend = FleetBackend()
    assert capability(backend, warmkit.FleetCapable) is backend
    assert capability(backend, warmkit.PreparesEntries) is backend
    assert capability(backend, warmkit.MonitorHooks) is backend  # FakeBackend's own hooks


def test_a_capability_only_a_component_has_is_the_components():
    backend = SplitFleet()
    assert not isinstance(backend, warmkit.FleetCapable)  # nothing flat on the backend
    assert capability(backend, warmkit.FleetCapable) is backend.cache
    assert capability(backend, warmkit.BundleCapable) is backend.cache
    assert capability(backend, warmkit.MonitorHooks) is backend.runtime
    # the required part is the backend's own
    assert capability(backend, warmkit.Backend) is backend


def test_the_component_is_asked_before_the_backend():
    """A backend that keeps flat delegations (as TritonBackend does) is used through its components."""
    backend = FleetBackend()  # flat
    backend.cache = FleetBackend()  # and a cache component as well
    assert capability(backend, warmkit.FleetCapable) is backend.cache


def test_none_when_neither_the_backend_nor_the_protocols_component_provides_it():
    backend = SplitFleet()
    assert capability(backend, warmkit.PinsIdentity) is None  # no identity component
    assert capability(FakeBackend(), warmkit.BundleCapable) is None
    # a component in another protocol's place does not count: the fleet is the cache's
    misplaced = SplitFleet()
    misplaced.runtime, misplaced.cache = FleetBackend(), None
    assert capability(misplaced, warmkit.FleetCapable) is None
    # a protocol is provided whole by one object, never split between the two: here the
    # backend has FleetCapable's own members and its cache component BundleCapable's
    half = FakeBackend()
    half.cache = _Half()
    for name in ("entry_key", "entry_dir", "entry_files", "entry_key_of", "entry_info"):
        setattr(half, name, lambda *a: None)
    half.entry_file_allowed = lambda name: True
    assert (
        not isinstance(half, warmkit.FleetCapable)
        and capability(half, warmkit.FleetCapable) is None
    )
    assert capability(half, warmkit.BundleCapable) is half.cache


class _Half:
    """A cache component with the bundle capability only (no entries by key)."""

    def cache_dir(self): ...

    def cache_fingerprint(self, target): ...

    def cache_scope(self, directory): ...

    def relocate_cache_entry(self, staged, final): ...


def test_canonical_targets_is_asked_of_the_backend_only():
    backend = FakeBackend()
    backend.runtime = type("T", (), {"canonical_target": lambda self, t: t})()
    backend.cache = backend.runtime
    assert capability(backend, warmkit.CanonicalTargets) is None
    backend.canonical_target = str
    assert capability(backend, warmkit.CanonicalTargets) is backend


def test_every_optional_protocol_names_one_component():
    protocols = {
        name: obj
        for name in warmkit.__all__
        if inspect.isclass(obj := getattr(warmkit, name)) and _Capability in obj.__mro__
    }
    of_executors = {"Executor", "ReportsCacheHit", "ReportsTuning"}
    named = {
        name: getattr(p, "_warmkit_component", None)
        for name, p in protocols.items()
        if name not in of_executors | {"Backend"}
    }
    assert named.pop("CanonicalTargets") is None  # the backend's own, beside default_target
    assert len(named) == 14 and set(named.values()) == set(COMPONENTS), named
    assert named["FleetCapable"] == named["BundleCapable"] == "cache"  # one extends the other


def test_an_unknown_component_name_is_refused():
    with pytest.raises(ValueError, match="unknown component 'driver'.*cache, identity"):
        component("driver")


def test_what_a_missing_capability_is_looked_for_on():
    backend = SplitFleet()
    assert component_of(backend, warmkit.BundleCapable) is backend.cache
    assert component_of(backend, warmkit.PinsIdentity) is backend  # no identity component
    assert component_of(backend, warmkit.CanonicalTargets) is backend
