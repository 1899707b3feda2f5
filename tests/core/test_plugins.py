"""Plugin discovery: fresh entry points, lazy imports, load failures, conflicts, the allow-list."""

from __future__ import annotations

import json
import sys

import pytest

import warmkit
from warmkit import BackendUnavailableError, PluginLoadError, WarmupRegistry
from warmkit._plugin import discovery as plugins
from warmkit.testing import isolated_backends, unload_backend

from . import _kernels

FAKE = f"{_kernels.__name__}:FakeBackend"

BACKEND_SRC = """
import warmkit

class Backend:
    name = {name!r}

    def available(self):
        return warmkit.BackendStatus(ok=True, reason="ok", version="0.0")

    def default_target(self):
        return "cpu"

    def parallelism(self, target):
        return 1

    def compile_scope(self, target, jobs):
        import contextlib
        return contextlib.nullcontext()

    def compile(self, kernel, key, target):
        return ("compiled", key)

    def install_monitor(self):
        pass

    def uninstall_monitor(self):
        pass
"""


def _names(group: str) -> list[str]:
    return [i.name for i in plugins.discover(group)]


@pytest.fixture
def no_stevedore_cache(monkeypatch):
    """stevedore's on-disk entry-point cache goes stale: warmkit must never read it."""
    import stevedore._cache

    def refuse(*_a, **_k):
        raise AssertionError("stevedore's entry-point cache was consulted")

    monkeypatch.setattr(stevedore._cache, "get_group_all", refuse)


def test_discover_reports_distribution_and_version_sorted(plugin_site):
    plugin_site.add_dist("zeta-dist", "3.1", backends={"zz": FAKE, "aa": FAKE})
    infos = {i.name: i for i in plugins.discover(plugins.BACKENDS_GROUP)}
    assert (infos["zz"].distribution, infos["zz"].version, infos["zz"].value) == (
        "zeta-dist",
        "3.1",
        FAKE,
    )
    names = _names(plugins.BACKENDS_GROUP)
    assert names == sorted(names)
    # the core's own stubs are entry points of the warmkit distribution, unless a plugin
    # replaces them (then it names the stub it replaces)
    for name, stub in (("tilelang", "TileLangStubBackend"), ("cutedsl", "CuteDSLStubBackend")):
        info = infos[name]
        if info.replaces is None:
            assert (info.distribution, info.value) == (
                "warmkit",
                f"warmkit._plugin.contract:{stub}",
            )
        else:
            assert info.distribution == f"warmkit-{name}"
            assert info.replaces == f"warmkit._plugin.contract:{stub}"


def test_entry_points_are_read_fresh_without_a_version_bump(plugin_site, no_stevedore_cache):
    info = plugin_site.add_dist("acme", "1.0", backends={"fake": FAKE})
    assert "fake" in _names(plugins.BACKENDS_GROUP)
    assert "fake2" not in _names(plugins.BACKENDS_GROUP)
    # the plugin changes its entry points, same version: the next discovery sees it
    plugin_site.write_entry_points(info, backends={"fake": FAKE, "fake2": FAKE})
    assert {"fake", "fake2"} <= set(_names(plugins.BACKENDS_GROUP))
    backend = plugins.get_backend("fake2")
    assert isinstance(backend, _kernels.FakeBackend)
    plugin_site.write_entry_points(info, backends={"fake": FAKE})
    assert "fake2" not in _names(plugins.BACKENDS_GROUP)


@pytest.fixture
def scans(monkeypatch):
    """The groups importlib.metadata was asked for, in order (the real call still runs)."""
    import importlib.metadata

    seen: list[str | None] = []
    real = importlib.metadata.entry_points

    def counting(**params):
        seen.append(params.get("group"))
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    return seen


def test_one_scan_reads_each_group_once_and_still_applies_the_allow_list(
    plugin_site, scans, monkeypatch
):
    plugin_site.add_dist("acme", backends={"a1": FAKE, "a2": FAKE})
    with plugins.one_scan():
        assert {"a1", "a2"} <= set(_names(plugins.BACKENDS_GROUP))
        monkeypatch.setenv("WARMKIT_PLUGINS", "a2")
        assert _names(plugins.BACKENDS_GROUP) == ["a2"]
        assert plugins.get_backend("a2").name == "fake"
        with plugins.one_scan():  # nested: the outer snapshot
            assert plugins._find(plugins.BACKENDS_GROUP, "a1") is not None
    assert scans.count(plugins.BACKENDS_GROUP) == 1
    assert scans.count(plugins.KERNELS_GROUP) == 1  # the allow-list's check of its names


def test_outside_one_scan_every_discovery_is_fresh_again(plugin_site, scans):
    info = plugin_site.add_dist("acme", backends={"fake": FAKE})
    with plugins.one_scan():
        assert "fake2" not in _names(plugins.BACKENDS_GROUP)
        plugin_site.write_entry_points(info, backends={"fake": FAKE, "fake2": FAKE})
        assert "fake2" not in _names(plugins.BACKENDS_GROUP)  # the block's snapshot
    assert "fake2" in _names(plugins.BACKENDS_GROUP)
    assert scans.count(plugins.BACKENDS_GROUP) == 2


def test_a_manifest_of_several_kernels_is_saved_and_loaded_with_one_scan_each(
    plugin_site, scans, tmp_path
):
    plugin_site.add_dist("acme", kernels={"acme.py": f"{_kernels.__name__}:PyKernel"})
    reg = WarmupRegistry()
    reg.add(_kernels.PyKernel, n=[1, 2])
    reg.add(_kernels.OtherKernel, m=[3])
    path = reg.save(tmp_path / "m.json")
    assert scans.count(plugins.KERNELS_GROUP) == 1
    loaded = WarmupRegistry.load(path)
    assert scans.count(plugins.KERNELS_GROUP) == 2
    assert {r.kernel_cls for r in loaded} == {_kernels.PyKernel, _kernels.OtherKernel}


def test_only_the_needed_plugins_are_imported(plugin_site, no_stevedore_cache):
    for mod in ("wkp_only_a", "wkp_only_b", "wkp_only_k"):
        plugin_site.add_module(mod, BACKEND_SRC.format(name=mod))
    plugin_site.add_dist(
        "acme",
        backends={"only-a": "wkp_only_a:Backend", "only-b": "wkp_only_b:Backend"},
        kernels={"only.k": "wkp_only_k:Backend"},
    )
    plugins.discover(plugins.BACKENDS_GROUP)
    plugins.discover(plugins.KERNELS_GROUP)
    assert not {"wkp_only_a", "wkp_only_b", "wkp_only_k"} & set(sys.modules)
    backend = plugins.get_backend("only-a")
    assert backend.name == "wkp_only_a"
    assert "wkp_only_a" in sys.modules
    assert "wkp_only_b" not in sys.modules
    assert "wkp_only_k" not in sys.modules


def test_a_backend_is_loaded_once_per_process(fake_backend):
    assert plugins.get_backend("fake") is plugins.get_backend("fake")
    assert _kernels.FakeBackend.instances == 1
    assert plugins.get_backend("fake") in plugins.loaded_backends()


def test_a_backend_without_a_name_gets_its_entry_point_name(plugin_site):
    plugin_site.add_module("wkp_nameless", BACKEND_SRC.format(name=""))
    plugin_site.add_dist("acme", backends={"nameless": "wkp_nameless:Backend"})
    assert plugins.get_backend("nameless").name == "nameless"


def test_an_object_that_is_not_a_backend_is_refused_at_load(plugin_site):
    plugin_site.add_module("wkp_notbackend", "class B:\n    def compile(self, *a):\n        pass\n")
    plugin_site.add_dist("acme", "5.0", backends={"half": "wkp_notbackend:B"})
    with pytest.raises(PluginLoadError, match="lacks available, default_target") as info:
        plugins.get_backend("half")
    assert info.value.failures[0].distribution == "acme"
    assert "half" not in plugins.loaded_backend_table()
    warmkit.monitor.arm("warn")  # the monitor never sees a half backend
    warmkit.monitor.disarm()


def test_missing_backend_names_kernel_backend_and_install_hint():
    with pytest.raises(BackendUnavailableError) as info:
        plugins.get_backend("triton-not-here", kernel="acme.rmsnorm")
    err = info.value
    assert (err.backend, err.kernel) == ("triton-not-here", "acme.rmsnorm")
    assert "acme.rmsnorm" in str(err) and "triton-not-here" in str(err)
    assert err.install_hint and err.install_hint in str(err)


def test_known_backend_names_have_a_pip_install_hint(monkeypatch):
    monkeypatch.setattr(plugins, "_find", lambda group, name: None)
    with isolated_backends():
        unload_backend("triton")  # loaded by an earlier test in this process, if any
        with pytest.raises(BackendUnavailableError, match="pip install warmkit-triton"):
            plugins.get_backend("triton", kernel="k")


# -- failures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "value", "cause"),
    [
        ("import not_a_module_xyz\n", "wkp_broken:B", ModuleNotFoundError),
        ("raise RuntimeError('plugin exploded')\n", "wkp_broken:B", RuntimeError),
        ("assert False, 'wrong triton version'\n", "wkp_broken:B", AssertionError),
        ("class B:\n    pass\n", "wkp_broken:Missing", AttributeError),
        (
            "class B:\n    def __init__(self):\n        raise OSError('no driver')\n",
            "wkp_broken:B",
            OSError,
        ),
    ],
    ids=["import", "raises", "assert", "attr", "constructor"],
)
def test_load_failure_is_plugin_load_error_with_provenance(plugin_site, source, value, cause):
    plugin_site.add_module("wkp_broken", source)
    plugin_site.add_dist("broken-dist", "0.4.2", backends={"broken": value})
    with pytest.raises(PluginLoadError) as info:
        plugins.get_backend("broken")
    (failure,) = info.value.failures
    assert (failure.name, failure.group, failure.value) == ("broken", "warmkit.backends", value)
    assert (failure.distribution, failure.version) == ("broken-dist", "0.4.2")
    assert isinstance(failure.error, cause)
    assert info.value.__cause__ is failure.error
    msg = str(info.value)
    assert "'broken'" in msg and "broken-dist 0.4.2" in msg and cause.__name__ in msg
    assert isinstance(info.value, ImportError) and isinstance(info.value, warmkit.WarmkitError)
    assert "broken" not in plugins.loaded_backend_table()


def test_kernel_plugin_failure_is_plugin_load_error_also_through_a_manifest(plugin_site, tmp_path):
    plugin_site.add_module("wkp_badkernel", "raise ImportError('needs triton 9')\n")
    plugin_site.add_dist("bad-kernels", "1.0", kernels={"bad.k": "wkp_badkernel:K"})
    with pytest.raises(PluginLoadError, match="needs triton 9"):
        plugins.load_kernel("bad.k")
    manifest = tmp_path / "m.json"
    data = WarmupRegistry().to_dict()
    data["registrations"] = [{"kernel": "bad.k", "space": {}}]
    manifest.write_text(json.dumps(data))
    with pytest.raises(PluginLoadError) as info:
        WarmupRegistry.load(manifest)
    assert info.value.failures[0].distribution == "bad-kernels"


# -- conflicts -----------------------------------------------------------------------------


def test_one_name_from_two_distributions_is_detected_and_refused(plugin_site):
    plugin_site.add_module("wkp_dup_one", BACKEND_SRC.format(name="dup"))
    plugin_site.add_module("wkp_dup_two", BACKEND_SRC.format(name="dup"))
    plugin_site.add_dist("one-dist", "1.0", backends={"dup": "wkp_dup_one:Backend", "x": FAKE})
    plugin_site.add_dist("two-dist", "2.0", backends={"dup": "wkp_dup_two:Backend"})
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == "dup"]
    assert len(info.conflicts) == 2
    assert any("one-dist 1.0" in c for c in info.conflicts)
    assert any("two-dist 2.0" in c for c in info.conflicts)
    with pytest.raises(PluginLoadError) as err:
        plugins.get_backend("dup")
    assert "one-dist" in str(err.value) and "two-dist" in str(err.value)
    assert "wkp_dup_one" not in sys.modules and "wkp_dup_two" not in sys.modules
    assert plugins.get_backend("x").name == "fake"  # the others still load


def test_non_adjacent_duplicates_are_detected(plugin_site):
    # stevedore's own check uses groupby on an unsorted list and misses these.
    plugin_site.add_dist("a-dist", backends={"dup": FAKE, "m": FAKE})
    plugin_site.add_dist("b-dist", backends={"b": FAKE})
    plugin_site.add_dist("c-dist", backends={"dup": FAKE})
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == "dup"]
    assert info.conflicts
    with pytest.raises(PluginLoadError, match="several distributions"):
        plugins.get_backend("dup")


def test_kernel_name_conflict_is_refused(plugin_site):
    plugin_site.add_dist("a-dist", kernels={"k.dup": f"{_kernels.__name__}:PyKernel"})
    plugin_site.add_dist("b-dist", kernels={"k.dup": f"{_kernels.__name__}:OtherKernel"})
    with pytest.raises(PluginLoadError, match="a-dist.*b-dist"):
        plugins.load_kernel("k.dup")


# -- allow-list ----------------------------------------------------------------------------


def test_allow_list_unset_means_every_plugin(plugin_site):
    plugin_site.add_dist("acme", backends={"a1": FAKE, "a2": FAKE})
    assert {"a1", "a2", "tilelang", "cutedsl"} <= set(_names(plugins.BACKENDS_GROUP))


def test_allow_list_empty_means_none(plugin_site, monkeypatch):
    plugin_site.add_dist(
        "acme", backends={"a1": FAKE}, kernels={"k1": f"{_kernels.__name__}:PyKernel"}
    )
    monkeypatch.setenv("WARMKIT_PLUGINS", "")
    assert _names(plugins.BACKENDS_GROUP) == []
    assert _names(plugins.KERNELS_GROUP) == []
    with pytest.raises(BackendUnavailableError, match="WARMKIT_PLUGINS"):
        plugins.get_backend("a1", kernel="some.kernel")
    with pytest.raises(LookupError, match="WARMKIT_PLUGINS"):
        plugins.load_kernel("k1")


def test_allow_list_names_what_may_load(plugin_site, monkeypatch):
    plugin_site.add_dist(
        "acme",
        backends={"a1": FAKE, "a2": FAKE},
        kernels={"k1": f"{_kernels.__name__}:PyKernel", "k2": f"{_kernels.__name__}:OtherKernel"},
    )
    monkeypatch.setenv("WARMKIT_PLUGINS", " a2 , k1,")
    assert _names(plugins.BACKENDS_GROUP) == ["a2"]
    assert _names(plugins.KERNELS_GROUP) == ["k1"]
    assert plugins.get_backend("a2").name == "fake"
    with pytest.raises(BackendUnavailableError, match="not in WARMKIT_PLUGINS") as info:
        plugins.get_backend("a1", kernel="acme.k")
    assert info.value.kernel == "acme.k"
    assert plugins.load_kernel("k1") is _kernels.PyKernel
    with pytest.raises(LookupError):
        plugins.load_kernel("k2")
    # unfiltered discovery still sees everything (manifests, conflicts)
    assert "a1" in [
        i.name for i in plugins.discover(plugins.BACKENDS_GROUP, honour_allow_list=False)
    ]


# -- kernels -------------------------------------------------------------------------------


def test_load_kernel_by_entry_point_name_or_module_attr(plugin_site):
    plugin_site.add_dist("acme", kernels={"acme.py": f"{_kernels.__name__}:PyKernel"})
    assert plugins.load_kernel("acme.py") is _kernels.PyKernel
    assert plugins.load_kernel(f"{_kernels.__name__}:OtherKernel") is _kernels.OtherKernel
    assert plugins.load_kernel(f"{__name__}:Holder.Nested") is Holder.Nested
    assert plugins.kernel_ref(_kernels.PyKernel) == "acme.py"
    assert plugins.kernel_ref(_kernels.OtherKernel) == f"{_kernels.__name__}:OtherKernel"


class Holder:
    class Nested(_kernels.PyKernel):
        pass


def test_a_module_path_ref_is_imported_without_an_entry_point_scan(plugin_site, scans):
    assert plugins.load_kernel(f"{_kernels.__name__}:OtherKernel") is _kernels.OtherKernel
    assert plugins.load_kernel(f"{__name__}:Holder.Nested") is Holder.Nested
    assert scans == []
    # an entry-point name of that form is never a manifest's ref, so never looked up as one
    plugin_site.add_dist("acme", kernels={"acme.mod:Thing": f"{_kernels.__name__}:PyKernel"})
    assert plugins.kernel_ref(_kernels.PyKernel) == f"{_kernels.__name__}:PyKernel"
    with pytest.raises(LookupError, match="cannot import module 'acme.mod'"):
        plugins.load_kernel("acme.mod:Thing")


@pytest.mark.parametrize(
    ("ref", "exc", "match"),
    [
        ("no.such.kernel", LookupError, "no entry point"),
        ("no_such_module_xyz:K", LookupError, "cannot import"),
        (f"{_kernels.__name__}:Nope", LookupError, "has no"),
        (f"{_kernels.__name__}:FakeBackend", TypeError, "not a JitKernel"),
    ],
)
def test_load_kernel_errors_say_what_is_wrong(ref, exc, match):
    with pytest.raises(exc, match=match):
        plugins.load_kernel(ref)


def test_kernel_entry_point_is_imported_only_when_loaded(plugin_site):
    plugin_site.add_module(
        "wkp_lazy_kernel",
        f"from {_kernels.__name__} import PyKernel\n\nclass Lazy(PyKernel):\n    pass\n",
    )
    plugin_site.add_dist("lazy", kernels={"lazy.k": "wkp_lazy_kernel:Lazy"})
    assert "lazy.k" in _names(plugins.KERNELS_GROUP)
    assert "wkp_lazy_kernel" not in sys.modules
    assert plugins.load_kernel("lazy.k").__name__ == "Lazy"
    assert "wkp_lazy_kernel" in sys.modules


def test_an_unknown_name_in_the_plugin_allow_list_is_an_error_naming_the_installed(
    fake_backend, monkeypatch
):
    monkeypatch.setenv("WARMKIT_PLUGINS", "fake,tritn")
    with pytest.raises(ValueError, match=r"WARMKIT_PLUGINS names 'tritn'.*installed:.*fake"):
        plugins.discover(plugins.BACKENDS_GROUP)
    with pytest.raises(ValueError, match="'tritn'"):
        plugins.get_backend("fake")


def test_a_plugin_replacing_a_core_stub_is_intended_not_a_conflict(plugin_site):
    installed = {i.name: i for i in plugins.discover(plugins.BACKENDS_GROUP)}
    # Where the real warmkit-cutedsl is installed it is the plugin under test; else a stand-in.
    real = installed["cutedsl"].distribution == "warmkit-cutedsl"
    if not real:
        plugin_site.add_module("wkp_cute_real", BACKEND_SRC.format(name="cutedsl"))
        plugin_site.add_dist("acme-cutedsl", "0.1.0", backends={"cutedsl": "wkp_cute_real:Backend"})
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == "cutedsl"]
    assert info.distribution == ("warmkit-cutedsl" if real else "acme-cutedsl")
    assert not info.conflicts
    assert info.replaces == "warmkit._plugin.contract:CuteDSLStubBackend"
    unload_backend("cutedsl")
    module = type(plugins.get_backend("cutedsl")).__module__
    assert module.startswith("warmkit_cutedsl") if real else module == "wkp_cute_real"


def test_two_plugins_replacing_one_core_stub_are_a_conflict(plugin_site):
    plugin_site.add_dist("tile-one", backends={"tilelang": FAKE})
    plugin_site.add_dist("tile-two", backends={"tilelang": FAKE})
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == "tilelang"]
    named = {c.split()[0] for c in info.conflicts}
    assert {"tile-one", "tile-two", "warmkit"} <= named and info.replaces is None
    unload_backend("tilelang")
    with pytest.raises(PluginLoadError, match="tile-one.*tile-two|tile-two.*tile-one"):
        plugins.get_backend("tilelang")
