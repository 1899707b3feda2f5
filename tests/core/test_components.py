"""A backend's components (``warmkit._plugin.components``): the core finds each capability on the
object that provides it, a component or, for a backend written against the flat protocols,
the backend itself.

The split backends (``_split_backend.split``) have their cache and their monitor hooks only
on components; each integration test also runs with the flat fake, which must keep working.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import warmkit
from warmkit import monitor
from warmkit._cache.upkeep import cache_info
from warmkit._plugin.components import COMPONENTS, capability, component, component_of
from warmkit._plugin.contract import _Capability
from warmkit.testing import backend_override

from . import _bundle_backend, _fleet_backend, _split_backend
from ._bundle_backend import BundleBackend, BundledKernel
from ._fleet_backend import FILES, FleetBackend, FleetKernel
from ._kernels import FakeBackend
from ._split_backend import Hooks, split

TARGET = "fake:1"
NS = [1, 2, 3]
SplitFleet = split(FleetBackend)
SplitBundle = split(BundleBackend)


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


# -- the core through components, and through a flat backend ------------------------------------------


def warm_host(backend_cls: type, root: Path, **config: object) -> warmkit.WarmupReport:
    return _fleet_backend.warm_host(root, NS, backend_cls, **config)


@pytest.mark.parametrize("backend_cls", [FleetBackend, SplitFleet], ids=["flat", "component"])
def test_the_fleet_fetches_from_the_store_through_the_cache(backend_cls, tmp_path, redis_server):
    first = warm_host(backend_cls, tmp_path / "a", store=redis_server.url)
    assert [e.status for e in first.entries] == ["compiled"] * 3
    second = warm_host(backend_cls, tmp_path / "b", store=redis_server.url)
    assert [e.status for e in second.entries] == ["fetched"] * 3
    assert [hit for *_, hit in FleetBackend.log] == [True] * 3  # nothing compiled on host b
    for _staged, final in FleetBackend.relocated:  # relocated into b by the cache's own method
        assert json.loads((final / "index.json").read_text())["self"] == str(final)
    assert len(FleetBackend.relocated) == 3


@pytest.mark.parametrize("backend_cls", [FleetBackend, SplitFleet], ids=["flat", "component"])
def test_read_only_serving_refuses_a_miss_before_compiling_it(backend_cls, tmp_path):
    """Only a backend whose entries the fleet addresses is refused before compiling (a backend
    without would be compiled in memory first, then refused as not a cache hit)."""
    with pytest.raises(warmkit.WarmupError) as info:
        warm_host(backend_cls, tmp_path / "empty", read_only=True)
    miss = info.value.__cause__
    assert isinstance(miss, warmkit.CacheMissError) and miss.directory == str(tmp_path / "empty")
    assert FleetBackend.log == []  # nothing compiled, not even in memory


@pytest.mark.parametrize("backend_cls", [FleetBackend, SplitFleet], ids=["flat", "component"])
def test_cache_info_reads_each_entry_through_the_cache(backend_cls, tmp_path):
    warm_host(backend_cls, tmp_path / "c")
    info = cache_info(backend_cls(), tmp_path / "c")
    assert info["entries"] == 3 and list(info["kernels"]) == [FleetKernel.name]


def test_fleet_entry_files_is_still_static_and_asks_the_component(tmp_path):
    """``warmkit.Fleet.entry_files(backend, ek)`` (public) keeps its form: a static method."""
    warm_host(SplitFleet, tmp_path / "c")
    backend = SplitFleet()
    ek = backend.cache.entry_key(FleetKernel(), FleetKernel.CompileKey(1), TARGET)
    assert set(warmkit.Fleet.entry_files(backend, ek)) == set(FILES)
    assert warmkit.Fleet.entry_files(backend, None) is None


@pytest.mark.parametrize("backend_cls", [BundleBackend, SplitBundle], ids=["flat", "component"])
def test_a_bundle_builds_and_installs_through_the_cache(backend_cls, tmp_path):
    registry = warmkit.WarmupRegistry()
    registry.add(BundledKernel, block=[16, 32], dtype=["float16"])
    BundleBackend.root = tmp_path / "build-cache"
    with backend_override("fakebundle", backend_cls()):
        meta = warmkit.build_bundle(registry, tmp_path / "k.wkb", target=TARGET, progress="off")
        assert meta["backends"]["fakebundle"]["fingerprint"]["target"] == TARGET
        BundleBackend.root = tmp_path / "runtime-cache"
        done = warmkit.install_bundle(tmp_path / "k.wkb", target=TARGET)
    assert len(done.installed) == 2 and done.prepared == {"fakebundle": "2 entr(ies) prepared"}
    assert {final.parent for _staged, final in BundleBackend.relocated} == {BundleBackend.root}


@pytest.mark.parametrize(
    "backend_cls", [FakeBackend, split(FakeBackend)], ids=["flat", "component"]
)
def test_the_monitor_installs_the_hooks_of_whatever_provides_them(backend_cls):
    backend = backend_cls()
    monitor.arm("warn")
    with backend_override("fake", backend):
        pass
    monitor.disarm()
    hooks = capability(backend, warmkit.MonitorHooks)
    calls = Hooks.calls if isinstance(hooks, Hooks) else FakeBackend.monitor_calls
    assert calls == ["install", "uninstall"]
    if isinstance(hooks, Hooks):  # the cache component's own hooks are not the monitor's
        assert FakeBackend.monitor_calls == []
