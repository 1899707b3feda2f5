"""The backend interface, the target context, and the ``tilelang``/``cutedsl`` stub backends."""

from __future__ import annotations

import importlib.util
import threading
import typing

import pytest

import warmkit
from warmkit import BackendNotImplementedError, BackendStatus, WarmupConfig, WarmupError
from warmkit._plugin import contract as backend_module
from warmkit._plugin import discovery as plugins

from . import _kernels
from ._kernels import FakeBackend, ScaleKernel

STUBS = [
    (
        "tilelang",
        backend_module.TileLangStubBackend,
        "tilelang",
        "pip install 'warmkit-tilelang[tilelang]'",
    ),
    (
        "cutedsl",
        backend_module.CuteDSLStubBackend,
        "cutlass",
        "pip install 'warmkit-cutedsl[cutedsl]'",
    ),
]


@pytest.fixture
def hide(monkeypatch):
    """Make modules look uninstalled, whatever this machine has."""
    real = importlib.util.find_spec
    hidden: set[str] = set()

    def find_spec(name, *args, **kwargs):
        if name.partition(".")[0] in hidden:
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return hidden


@pytest.fixture
def present(plugin_site):
    """Make a DSL package importable (an empty package in a temp dir on sys.path)."""

    def make(module: str, dist: str | None = None, version: str = "0.1.5") -> None:
        pkg = plugin_site.root / module
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        plugin_site.modules.add(module)
        if dist:
            plugin_site.add_dist(dist, version)
        importlib.invalidate_caches()

    return make


@pytest.mark.parametrize(("name", "cls", "module", "hint"), STUBS)
def test_stub_reports_unavailable_with_the_plugin_install_command_when_missing(
    hide, name, cls, module, hint
):
    hide.add(module)
    status = cls().available()
    assert status == BackendStatus(ok=False, reason=status.reason, install_hint=hint)
    assert module in status.reason and status.reason.startswith("stub:")
    assert cls.plugin in status.reason and cls.plugin in hint
    assert cls().name == name


@pytest.mark.parametrize(("name", "cls", "module", "hint"), STUBS)
def test_stub_with_its_dsl_present_is_still_unavailable_and_cannot_compile(
    present, name, cls, module, hint
):
    present(module, dist=cls.distribution, version="0.1.5")
    stub = cls()
    status = stub.available()
    assert status.ok is False
    assert status.reason.startswith("stub:") and cls.plugin in status.reason
    assert status.install_hint == hint
    assert status.version == "0.1.5"
    with pytest.raises(BackendNotImplementedError) as info:
        stub.compile(ScaleKernel(), ScaleKernel.CompileKey(1, "f16"), None)
    err = info.value
    assert err.backend == name
    assert "stub" in str(err) and ScaleKernel.name in str(err) and hint in str(err)
    assert isinstance(err, NotImplementedError) and isinstance(err, warmkit.WarmkitError)


def test_stub_without_distribution_metadata_has_no_version(present, monkeypatch):
    import importlib.metadata

    present("tilelang")
    real = importlib.metadata.version

    def version(dist):  # the real tilelang may be installed here: hide its metadata
        if dist == "tilelang":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert backend_module.TileLangStubBackend().available().version is None


@pytest.mark.parametrize(("name", "cls", "module", "hint"), STUBS)
def test_stubs_are_entry_points_of_the_core_and_full_backends(name, cls, module, hint):
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == name]
    if info.distribution == cls.plugin:  # the real plugin is installed and replaces the stub
        assert info.replaces == f"{cls.__module__}:{cls.__qualname__}" and not info.conflicts
        stub = cls()
    else:
        stub = plugins.get_backend(name)
        assert type(stub) is cls
    assert isinstance(stub, warmkit.Backend)
    assert stub.default_target() is None
    assert stub.parallelism(None) == 1
    with stub.compile_scope(None, 4):
        pass
    assert not isinstance(stub, warmkit.MonitorHooks)  # nothing to hook: the monitor skips it


def _tile_registry():
    class Tile(ScaleKernel):
        backend = "tilelang"

    reg = warmkit.WarmupRegistry()
    reg.add(Tile, n=1)
    return Tile, reg


def test_warmup_of_a_missing_stub_names_kernel_backend_and_pip_command(hide, core_stubs):
    hide.add("tilelang")
    tile, reg = _tile_registry()
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(WarmupConfig(progress="off"), reg)
    msg = str(info.value)
    assert tile.name in msg and "'tilelang'" in msg and "warmkit-tilelang[tilelang]" in msg


def test_warmup_of_a_present_stub_says_it_is_a_stub(present, core_stubs):
    present("tilelang")
    _tile, reg = _tile_registry()
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(WarmupConfig(progress="off", target="sm_90"), reg)
    assert "stub" in str(info.value) and "warmkit-tilelang" in str(info.value)


# -- the target context and the default compile --------------------------------------------


def test_current_target_is_scoped_and_thread_local():
    assert warmkit.current_target() is None
    seen = []
    with backend_module.target_scope("cuda:90"):
        assert warmkit.current_target() == "cuda:90"
        with backend_module.target_scope("cuda:80"):
            assert warmkit.current_target() == "cuda:80"
        t = threading.Thread(target=lambda: seen.append(warmkit.current_target()))
        t.start()
        t.join()
        assert warmkit.current_target() == "cuda:90"
    assert warmkit.current_target() is None
    assert seen == [None]


def test_default_compile_delegates_to_the_backend_with_the_current_target(fake_backend):
    key = ScaleKernel.CompileKey(8, "f16")
    executor = ScaleKernel().get_or_compile(key)
    assert (executor.kernel, executor.key, executor.target) == (ScaleKernel.name, key, None)
    with backend_module.target_scope("cuda:90"):
        assert ScaleKernel().compile(key).target == "cuda:90"
    assert _kernels.COMPILES == [(ScaleKernel.name, key, None), (ScaleKernel.name, key, "cuda:90")]
    assert FakeBackend.instances == 1


def test_default_compile_without_the_backend_names_kernel_and_backend():
    with pytest.raises(warmkit.BackendUnavailableError) as info:
        ScaleKernel().get_or_compile(ScaleKernel.CompileKey(8, "f16"))
    assert (info.value.kernel, info.value.backend) == (ScaleKernel.name, "fake")


def test_backend_status_defaults():
    s = BackendStatus(ok=True)
    assert (s.reason, s.install_hint, s.version) == ("", None, None)


# -- the contract: capabilities are protocols, checked with isinstance ------------------------------


class Minimal:
    """Exactly warmkit.Backend, nothing optional."""

    name = "minimal"

    def available(self):
        return BackendStatus(ok=True, reason="minimal")

    def default_target(self):
        return None

    def parallelism(self, target):
        return 1

    def compile_scope(self, target, jobs):
        import contextlib

        return contextlib.nullcontext()

    def compile(self, kernel, key, target):
        return lambda *a: None


@pytest.mark.parametrize(
    ("protocol", "members"),
    [
        (
            warmkit.Backend,
            ["name", "available", "default_target", "parallelism", "compile_scope", "compile"],
        ),
        (warmkit.MonitorHooks, ["install_monitor", "uninstall_monitor"]),
        (warmkit.CanonicalTargets, ["canonical_target"]),
        (
            warmkit.BundleCapable,
            ["cache_dir", "cache_fingerprint", "cache_scope", "relocate_cache_entry"],
        ),
        (warmkit.CacheProbe, ["cache_dir", "verify_cache_entry"]),
        (
            warmkit.FleetCapable,
            [
                "cache_dir",
                "cache_fingerprint",
                "cache_scope",
                "relocate_cache_entry",
                "entry_key",
                "entry_dir",
                "entry_files",
                "entry_key_of",
                "entry_info",
                "entry_file_allowed",
            ],
        ),
        (warmkit.Executor, ["__call__"]),
        (warmkit.ReportsCacheHit, ["cache_hit"]),
    ],
)
def test_each_protocol_requires_exactly_its_members(protocol, members):
    assert backend_module.missing_members(object(), protocol) == members


def test_a_minimal_backend_is_a_backend_with_no_optional_capability():
    b = Minimal()
    assert isinstance(b, warmkit.Backend)
    assert backend_module.missing_members(b, warmkit.Backend) == []
    for capability in (
        warmkit.MonitorHooks,
        warmkit.CanonicalTargets,
        warmkit.BundleCapable,
        warmkit.CacheProbe,
        warmkit.FleetCapable,
    ):
        assert not isinstance(b, capability), capability
    assert backend_module.entry_check(b) is None


def test_isinstance_against_a_capability_follows_typing_rules():
    """warmkit's protocols list their members once (``_CapabilityMeta``); the answer is typing's."""

    class Tuned:
        def __init__(self):  # members set on the instance count
            self.tuning, self.tuning_key, self.autotune_seconds = None, (1,), 0.0

    class Partial:
        tuning = "stored"  # a member missing

    class NoneMethod(Minimal):
        compile = None  # a method blocked by None

    class Nominal(warmkit.ReportsCacheHit):  # a subclass, members or not
        pass

    assert isinstance(Tuned(), warmkit.ReportsTuning)
    assert not isinstance(Partial(), warmkit.ReportsTuning)
    assert isinstance(Minimal(), warmkit.Backend) and not isinstance(NoneMethod(), warmkit.Backend)
    assert isinstance(Nominal(), warmkit.ReportsCacheHit)
    assert not isinstance(None, warmkit.FleetCapable)
    assert isinstance(lambda: None, warmkit.Executor) and not isinstance(3, warmkit.Executor)
    for proto in (warmkit.ReportsTuning, warmkit.Backend, warmkit.Executor):
        # typing's own check, on a plain copy of the protocol, gives the same answers
        body = {k: v for k, v in vars(proto).items() if k[0] != "_" or k == "__call__"}
        plain = typing.runtime_checkable(
            type(
                proto.__name__,
                (typing.Protocol,),
                body | {"__annotations__": proto.__annotations__},
            )
        )
        for obj in (Tuned(), Partial(), Minimal(), NoneMethod(), None, 3, print):
            assert isinstance(obj, proto) == isinstance(obj, plain), (obj, proto)


def test_a_backend_without_monitor_hooks_loads_and_the_monitor_skips_it(plugin_site):
    plugin_site.add_dist("minimal-backend", backends={"minimal": f"{__name__}:Minimal"})
    warmkit.monitor.arm("warn")
    try:
        assert type(plugins.get_backend("minimal")) is Minimal
    finally:
        warmkit.monitor.disarm()


def test_a_backend_missing_a_required_member_fails_to_load_naming_it(plugin_site):
    plugin_site.add_module(
        "halfway_backend",
        """
        class Halfway:
            def available(self): ...
            def default_target(self): ...
            def compile(self, kernel, key, target): ...
        """,
    )
    plugin_site.add_dist("halfway", backends={"halfway": "halfway_backend:Halfway"})
    with pytest.raises(
        warmkit.PluginLoadError, match="lacks parallelism, compile_scope of warmkit.Backend"
    ):
        plugins.get_backend("halfway")


def test_the_core_reads_no_capability_with_getattr_or_hasattr():
    """Capabilities are checked with isinstance(obj, Protocol), never duck-typed."""
    import ast
    from pathlib import Path

    problems = []
    for path in sorted(Path(warmkit.__file__).parent.glob("*.py")):
        if path.name == "_backend.py":  # the protocols' own readers (test below)
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("getattr", "hasattr")
                and node.args
                and getattr(node.args[0], "id", None) in ("backend", "executor", "b")
                and getattr(node.args[1], "value", None) != "name"  # a required member
            ):
                problems.append(f"{path.name}:{node.lineno}")
    assert not problems, problems


def test_the_protocols_readers_agree_with_isinstance():
    from warmkit._plugin.contract import (
        ReportsCacheHit,
        ReportsTuning,
        reported_tuning,
        reports_cache_hit,
    )

    class Slots:
        __slots__ = ("autotune_seconds", "cache_hit", "tuning", "tuning_key")

    def make(**attrs_):
        obj = Slots()
        for name, value in attrs_.items():
            setattr(obj, name, value)
        return obj

    tuned = {"tuning_key": 1, "autotune_seconds": 0.0}
    cases = [
        object(),
        make(cache_hit=True),
        make(cache_hit=1),
        make(cache_hit=False),
        make(tuning="benchmarked", **tuned),
        make(tuning="benchmarked"),  # not every member: not a ReportsTuning
        make(tuning=3, **tuned),
        make(tuning=None, **tuned),
        make(cache_hit=True, tuning="stored", **tuned),
    ]
    for obj in cases:
        hit = isinstance(obj, ReportsCacheHit) and obj.cache_hit is True
        assert reports_cache_hit(obj) is hit, vars(obj) if hasattr(obj, "__dict__") else obj
        tuning = obj.tuning if isinstance(obj, ReportsTuning) else None
        assert reported_tuning(obj) == (tuning if isinstance(tuning, str) else None)
    assert reported_tuning(make(tuning="benchmarked", **tuned)) == "benchmarked"
    assert reports_cache_hit(make(cache_hit=True))


@pytest.mark.parametrize(
    ("text", "platform", "arch", "canonical"),
    [
        ("cuda:90", "cuda", "90", "cuda:90"),
        (" CUDA:90a ", "cuda", "90a", "cuda:90a"),
        ("sm_90a", "cuda", "90a", "cuda:90a"),
        ("sm90", "cuda", "90", "cuda:90"),
        ("90", "cuda", "90", "cuda:90"),
        ("cuda:9.0", "cuda", "90", "cuda:90"),
        ("cuda:100f", "cuda", "100f", "cuda:100f"),
        ("hip:gfx942", "hip", "gfx942", "hip:gfx942"),
        ("gfx90a", "hip", "gfx90a", "hip:gfx90a"),
    ],
)
def test_target_parses_every_spelling_and_prints_one(text, platform, arch, canonical):
    target = warmkit.Target.parse(text)
    assert (target.platform, target.arch, str(target)) == (platform, arch, canonical)
    assert warmkit.Target.parse(str(target)) == target  # printing then parsing is exact
    assert warmkit.Target.parse(target) is target  # a Target is taken where a string is


def test_target_capability_and_feature():
    t = warmkit.Target.parse("sm_100a")
    assert (t.capability, t.major, t.minor, t.feature) == (100, 10, 0, "a")
    assert warmkit.Target.parse("cuda:90").feature == ""
    assert warmkit.Target.parse("hip:gfx90a").feature == ""  # "a" is part of a gfx name
    with pytest.raises(ValueError, match="no CUDA compute capability"):
        _ = warmkit.Target.parse("hip:gfx942").capability
    assert len({warmkit.Target.parse("sm_90"), warmkit.Target.parse("cuda:90")}) == 1  # a value
    with pytest.raises(AttributeError):  # frozen
        t.arch = "80"


@pytest.mark.parametrize("bad", ["hopper", "cuda:9", "cuda:90x", "sm_9000", "hip:942", ""])
def test_an_unknown_target_is_a_value_error_naming_it_and_the_forms(bad):
    with pytest.raises(ValueError, match=r"unknown target .*accepted: 'cuda:<compute"):
        warmkit.Target.parse(bad)
    with pytest.raises(TypeError, match="a target is a string"):
        warmkit.Target.parse(90)  # type: ignore[arg-type]
