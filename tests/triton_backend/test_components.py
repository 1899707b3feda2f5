"""``TritonBackend`` is a compiler plus components; its flat methods stay, as delegations.

The core finds each optional capability on the component that owns it
(``warmkit._plugin.components.capability``); code outside warmkit still calls
``TritonBackend().entry_key(...)`` and checks ``isinstance(backend, warmkit.FleetCapable)``.
"""

from __future__ import annotations

import pytest
from warmkit_triton import TritonBackend
from warmkit_triton._autotune import TritonTuning
from warmkit_triton._cache import TritonCache
from warmkit_triton._explain import TritonIdentity
from warmkit_triton._recording import TritonRecording
from warmkit_triton._setup import TritonRuntime

import warmkit
from warmkit._plugin.components import capability
from warmkit.testing import backend_override

from ._kernels import Add
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

PROVIDERS = {
    "BundleCapable": TritonCache,
    "CacheProbe": TritonCache,
    "FleetCapable": TritonCache,
    "PreparesEntries": TritonCache,
    "PinsIdentity": TritonIdentity,
    "ExplainsMisses": TritonIdentity,
    "RecordReplay": TritonRecording,
    "SpecializationMap": TritonRecording,
    "TunedResults": TritonTuning,
    "TuningPlan": TritonTuning,
    "Prepares": TritonRuntime,
    "ProcessCompiles": TritonRuntime,
    "PrimesWorkers": TritonRuntime,
    "MonitorHooks": TritonRuntime,
    "CanonicalTargets": TritonBackend,
}


@pytest.mark.parametrize("protocol", sorted(PROVIDERS))
def test_each_capability_is_its_components_and_the_flat_backend_still_has_it(protocol):
    backend = TritonBackend()
    provider = capability(backend, getattr(warmkit, protocol))
    assert type(provider) is PROVIDERS[protocol]
    assert provider is backend or provider in vars(backend).values()  # this backend's own part
    assert isinstance(backend, getattr(warmkit, protocol))  # the flat protocol: compatibility


def test_the_flat_methods_answer_as_the_components_do(tmp_path):
    backend = TritonBackend()
    digest = "ab" * 32
    assert backend.cache_dir() == backend.cache.cache_dir()
    assert backend.entry_dir(digest) == backend.cache.entry_dir(digest)
    assert backend.entry_key_of(backend.entry_dir(digest)) == digest
    assert TritonBackend.entry_file_allowed("add_kernel.cubin")  # static, as it was
    assert not TritonBackend.entry_file_allowed("evil.so")
    assert backend.cache_fingerprint(AOT_TARGET) == backend.cache.cache_fingerprint(AOT_TARGET)
    assert backend.worker_target(AOT_TARGET) == backend.runtime.worker_target(AOT_TARGET)
    assert backend.tuned_results(tmp_path) == backend.tuning.tuned_results(tmp_path) == []
    assert backend.identity_pins(Add()) == backend.identity.identity_pins(Add())
    assert TritonBackend.entry_key.__doc__ == TritonCache.entry_key.__doc__


def test_a_warmup_asks_the_cache_component_not_the_flat_method(monkeypatch):
    backend = TritonBackend()
    asked = []
    entry_key = backend.cache.entry_key
    monkeypatch.setattr(backend.cache, "entry_key", lambda *a: asked.append(a[1]) or entry_key(*a))
    monkeypatch.setattr(backend, "entry_key", lambda *a: pytest.fail("the flat method was asked"))
    reg = warmkit.WarmupRegistry()
    reg.add(Add, n=[64], block=[128])
    Add.clear_executors()
    cfg = warmkit.WarmupConfig(target=AOT_TARGET, progress="off", monitor="off", jobs=1)
    with backend_override("triton", backend):
        first = warmkit.warmup(cfg, registry=reg)
        Add.clear_executors()  # as a new process: only the disk cache
        again = warmkit.warmup(cfg, registry=reg)
    assert [e.status for e in first.entries + again.entries] == ["compiled", "cached"]
    assert asked == [Add().dispatch(n=64, block=128)] * 2
