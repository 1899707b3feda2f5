"""``WarmupRegistry``: scope (nesting, asyncio, threads), O(1) dedup, ``plan()``, manifests."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import attrs
import pytest

import warmkit
from warmkit import Choices, IntRange, ManifestError, WarmupRegistry, zip_inputs
from warmkit._registry import registry as registry_module

from . import _kernels
from ._kernels import OtherKernel, PyKernel

K = PyKernel.CompileKey

# -- scope ---------------------------------------------------------------------------------


def test_activate_nests_and_restores_the_outer_registry():
    outer, inner = WarmupRegistry(), WarmupRegistry()
    assert registry_module.active_registry() is None
    with outer.activate() as got:
        assert got is outer
        PyKernel().register_warmup(n=1)
        with inner.activate():
            assert registry_module.active_registry() is inner
            PyKernel().register_warmup(n=2)
        assert registry_module.active_registry() is outer
        PyKernel().register_warmup(n=3)
    assert registry_module.active_registry() is None
    assert outer.plan() == {PyKernel.name: [K(1, False), K(3, False)]}
    assert inner.plan() == {PyKernel.name: [K(2, False)]}


def test_activate_restores_on_exception():
    reg = WarmupRegistry()
    with pytest.raises(KeyError), reg.activate():
        raise KeyError("boom")
    assert registry_module.active_registry() is None


def test_default_registry_and_module_level_activate():
    default = warmkit.default_registry()
    assert default is warmkit.default_registry()
    before = list(default)
    try:
        with warmkit.activate() as reg:
            assert reg is default
            OtherKernel().register_warmup(m=12345)
        assert any(r.space == {"m": 12345} for r in default)
    finally:
        default.clear()
        for r in before:  # put back whatever was there
            default.add(r.kernel_cls, *r.zip_groups, **r.space)


def test_registrations_in_asyncio_tasks_land_in_their_own_registry():
    a, b = WarmupRegistry(), WarmupRegistry()

    async def build(reg, values, started, other_started):
        with reg.activate():
            for v in values:
                started.set()
                await other_started.wait()  # interleave the two tasks
                PyKernel().register_warmup(n=v)
                await asyncio.sleep(0)

    async def main():
        ea, eb = asyncio.Event(), asyncio.Event()
        await asyncio.gather(build(a, [1, 2], ea, eb), build(b, [10, 20], eb, ea))

    asyncio.run(main())
    assert a.plan() == {PyKernel.name: [K(1, False), K(2, False)]}
    assert b.plan() == {PyKernel.name: [K(10, False), K(20, False)]}


def test_tasks_created_under_an_active_registry_inherit_it():
    reg = WarmupRegistry()

    async def layer(i):
        await asyncio.sleep(0)
        PyKernel().register_warmup(n=i)

    async def main():
        with reg.activate():
            tasks = [asyncio.create_task(layer(i)) for i in range(3)]
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert [k.n for k in reg.plan()[PyKernel.name]] == [0, 1, 2]


def test_plain_threads_do_not_see_the_registry_but_bind_carries_it():
    reg = WarmupRegistry()
    with reg.activate():
        t = threading.Thread(target=PyKernel().register_warmup, kwargs={"n": 1})
        t.start()
        t.join()
        assert len(reg) == 0  # a new thread starts with an empty context: lost, as in vLLM

        t = threading.Thread(target=reg.bind(PyKernel().register_warmup), kwargs={"n": 2})
        t.start()
        t.join()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(reg.bind(lambda i: PyKernel().register_warmup(n=i)), [3, 4]))
    assert [k.n for k in reg.plan()[PyKernel.name]] == [2, 3, 4]


def test_bind_works_without_an_outer_activation_and_returns_the_result():
    reg = WarmupRegistry()

    def build(i, *, scale):
        """Build one layer."""
        PyKernel().register_warmup(n=i * scale)
        return i

    bound = reg.bind(build)
    assert bound.__name__ == "build"
    assert bound.__doc__ == "Build one layer."
    assert bound.__wrapped__ is build
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda i: bound(i, scale=10), [1, 2])) == [1, 2]
    assert registry_module.active_registry() is None
    assert sorted(k.n for k in reg.plan()[PyKernel.name]) == [10, 20]


# -- contents and dedup --------------------------------------------------------------------


def test_len_and_iteration_give_the_registrations(registry):
    PyKernel().register_warmup(n=[1, 2], flag=True)
    OtherKernel().register_warmup(zip_inputs({"m": 1}, {"m": 2}))
    assert len(registry) == 2
    first, second = list(registry)
    assert isinstance(first, warmkit.Registration)
    assert (first.kernel, first.kernel_cls, first.space) == (
        PyKernel.name,
        PyKernel,
        {"n": [1, 2], "flag": True},
    )
    assert second.kernel == "tests.other"
    assert second.zip_groups == (zip_inputs({"m": 1}, {"m": 2}),)


def test_61_identical_registrations_store_one(registry):
    layers = [PyKernel() for _ in range(61)]
    for layer in layers:
        layer.register_warmup(n=IntRange(1, 9), flag=(True, 1))
    assert len(registry) == 1
    assert registry.add(PyKernel, n=IntRange(1, 9), flag=(True, 1)) is False
    assert registry.add(PyKernel, flag=(True, 1), n=IntRange(1, 9)) is False  # keyword order


@pytest.mark.parametrize(
    ("a", "b"),
    [(1, True), (1, 1.0), (0, False), ((1, 2), [1, 2]), ((1,), 1), ("1", 1), (None, False)],
)
def test_registrations_that_differ_in_type_are_not_merged(a, b, registry):
    registry.add(PyKernel, n=a)
    registry.add(PyKernel, n=b)
    assert len(registry) == 2


def test_nan_registrations_dedupe(registry):
    registry.add(PyKernel, n=float("nan"))
    registry.add(PyKernel, n=float("nan"))
    assert len(registry) == 1


def test_100k_registrations_of_one_kernel_store_one(registry):
    k = PyKernel()
    for _ in range(100_000):
        k.register_warmup(n=16, flag=False)
    assert len(registry) == 1


class CountingInt(int):
    """An int that counts its equality comparisons."""

    comparisons = 0

    def __eq__(self, other):
        CountingInt.comparisons += 1
        return int.__eq__(self, other)

    __hash__ = int.__hash__


def test_dedup_is_hashed_not_a_scan(registry, monkeypatch):
    # A scan compares each new registration with every stored one: n**2 / 2 comparisons.
    # (Registrations take exact plain types only; let this counting int through.)
    import warmkit._registry.registry as registry_module

    monkeypatch.setattr(
        registry_module, "_PLAIN_SCALARS", (*registry_module._PLAIN_SCALARS, CountingInt)
    )
    n = 2000
    CountingInt.comparisons = 0
    for i in range(n):
        registry.add(OtherKernel, m=CountingInt(i))
    for i in range(n):
        registry.add(OtherKernel, m=CountingInt(i))  # duplicates: one hashed lookup each
    assert len(registry) == n
    assert CountingInt.comparisons <= 4 * n


def test_concurrent_adds_from_threads_are_all_kept():
    reg = WarmupRegistry()

    def build(i):
        for j in range(50):
            PyKernel().register_warmup(n=i * 1000 + j)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(reg.bind(build), range(8)))
    assert len(reg) == 400


def test_add_checks_values_and_names(registry):
    with pytest.raises(TypeError, match="'n'"):
        registry.add(PyKernel, n=object())
    with pytest.raises(TypeError, match="accepts"):
        registry.add(PyKernel(), bogus=1)
    with pytest.raises(ValueError, match="twice"):
        registry.add(PyKernel, zip_inputs({"n": 1}), n=2)
    with pytest.raises(TypeError, match="abstract"):
        registry.add(warmkit.JitKernel)
    assert len(registry) == 0


# -- plan ----------------------------------------------------------------------------------


def test_plan_dedups_across_registrations_and_instances_in_first_seen_order(registry):
    PyKernel().register_warmup(n=[3, 1])
    OtherKernel().register_warmup(m=[5])
    PyKernel().register_warmup(n=[1, 2, 3], flag=[False])
    PyKernel().register_warmup(zip_inputs({"n": 2, "flag": True}, {"n": 3, "flag": False}))
    plan = registry.plan()
    assert list(plan) == [PyKernel.name, "tests.other"]
    assert plan[PyKernel.name] == [K(3, False), K(1, False), K(2, False), K(2, True)]
    assert plan["tests.other"] == [OtherKernel.CompileKey(5)]
    assert _kernels.COMPILES == []  # planning compiles nothing


def test_plan_of_an_empty_registry_is_empty():
    assert WarmupRegistry().plan() == {}


def test_plan_uses_get_warmup_keys_overrides(registry):
    class FromConfig(PyKernel):
        def get_warmup_keys(self, *groups, where=None, **space):
            return super().get_warmup_keys(*groups, where=where, n=[space["n"], space["n"] * 2])

    FromConfig().register_warmup(n=4)
    assert registry.plan() == {FromConfig.name: [K(4, False), K(8, False)]}


def test_planning_never_grows_a_collection_an_override_keeps(registry):
    kept = {K(1, False): None}  # an override may return its own (cached) dict or list

    class Cached(PyKernel):
        def get_warmup_keys(self, *groups, where=None, **space):
            return kept if space["n"] == 1 else [K(space["n"], False)]

    Cached().register_warmup(n=1)
    Cached().register_warmup(n=2)
    assert registry.plan() == {Cached.name: [K(1, False), K(2, False)]}
    assert kept == {K(1, False): None}


def test_plan_honours_an_instance_budget_and_reads_the_environment_only_when_needed(
    registry, monkeypatch
):
    class Small(PyKernel):
        def __init__(self, limit=None):
            self.max_points = limit

    small = Small(limit=2)  # alive: planning uses the registering instance
    small.register_warmup(n=[1, 2, 3])
    monkeypatch.setenv("WARMKIT_MAX_POINTS", "not a number")
    with pytest.raises(ValueError, match="3 points, over the limit of 2"):
        registry.plan()  # the instance's own budget: the bad variable is never read
    registry.clear()
    Small().register_warmup(n=7)  # one point, but no budget of its own: the variable is read
    with pytest.raises(ValueError, match="WARMKIT_MAX_POINTS"):
        registry.plan()
    monkeypatch.setenv("WARMKIT_MAX_POINTS", "1")
    assert registry.plan() == {Small.name: [K(7, False)]}


def test_single_value_spaces_keep_every_check(registry):
    PyKernel().register_warmup(n=3, flag=True)
    PyKernel().register_warmup(n=(1, "x"))
    assert registry.plan() == {PyKernel.name: [K(3, True), K((1, "x"), False)]}
    with pytest.raises(TypeError, match="unknown input"):
        PyKernel().register_warmup(m=1)
    with pytest.raises(TypeError, match="required dispatch input"):
        PyKernel().get_warmup_keys(flag=True)
    with pytest.raises(TypeError, match="is a list"):
        PyKernel().register_warmup(n=(1, [2]))


# -- manifests -----------------------------------------------------------------------------


def _rich_registry() -> WarmupRegistry:
    reg = WarmupRegistry()
    reg.add(PyKernel, n=IntRange(0, 10, 3), flag=[True, False])
    reg.add(PyKernel, n=IntRange(1, 40, advance=lambda v: v * 3))
    reg.add(PyKernel, n=Choices((1, 2), 3, None))
    reg.add(PyKernel, n=[(1, 2), (3, (4, "x"))], flag="s")
    reg.add(PyKernel, n=(5, 6))
    reg.add(PyKernel, zip_inputs({"n": (7, 8), "flag": True}, {"n": 1.5, "flag": None}))
    reg.add(PyKernel, n=[float("inf"), -0.5, float("-inf")])
    reg.add(OtherKernel, m=IntRange(10, 0, -4))
    return reg


def test_manifest_round_trip_keeps_tuples_lists_and_ranges(tmp_path):
    reg = _rich_registry()
    path = reg.save(tmp_path / "sub" / "warmup.json")
    assert path == tmp_path / "sub" / "warmup.json"
    loaded = WarmupRegistry.load(path)
    assert len(loaded) == len(reg)
    for a, b in zip(reg, loaded):
        assert (a.kernel, a.kernel_cls, a.zip_groups) == (b.kernel, b.kernel_cls, b.zip_groups)
        for name, value in a.space.items():
            got = b.space[name]
            if isinstance(value, IntRange) and value.advance is not None:
                assert list(got) == list(value)  # a function cannot be saved: its values are
            else:
                assert type(got) is type(value)
                assert got == value
    assert loaded.plan() == reg.plan()
    # and saving what was loaded gives the same manifest
    assert loaded.to_dict()["registrations"] == reg.to_dict()["registrations"]


def test_manifest_is_versioned_json_with_tagged_values(tmp_path):
    data = json.loads(_rich_registry().save(tmp_path / "m.json").read_text())
    assert data["format"] == "warmkit.manifest"
    assert data["version"] == 2
    assert data["warmkit_version"] == warmkit.__version__
    spaces = [r["space"] for r in data["registrations"]]
    assert spaces[0] == {"n": {"range": [0, 10, 3]}, "flag": {"list": [True, False]}}
    assert spaces[1] == {"n": {"choices": [1, 3, 9, 27]}}
    assert spaces[4] == {"n": {"tuple": [5, 6]}}
    assert data["registrations"][0]["kernel"] == f"{PyKernel.__module__}:PyKernel"
    assert data["registrations"][7]["kernel"] == f"{OtherKernel.__module__}:OtherKernel"


def test_nan_survives_a_round_trip(tmp_path):
    reg = WarmupRegistry()
    reg.add(PyKernel, n=float("nan"))
    (reg2,) = [WarmupRegistry.load(reg.save(tmp_path / "m.json"))]
    assert math.isnan(next(iter(reg2)).space["n"])


def _manifest(tmp_path, **overrides):
    data = WarmupRegistry().to_dict() | overrides
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("version", [0, 3, "2", None])
def test_load_rejects_another_version(tmp_path, version):
    with pytest.raises(ManifestError, match=rf"version {version!r} is not supported.*1, 2") as info:
        WarmupRegistry.load(_manifest(tmp_path, version=version))
    assert info.value.path == tmp_path / "m.json"


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps([1, 2]), json.dumps({"format": "other", "version": 1})],
)
def test_load_rejects_what_is_not_a_manifest(tmp_path, content):
    path = tmp_path / "m.json"
    path.write_text(content)
    with pytest.raises(ManifestError, match=str(path)):
        WarmupRegistry.load(path)


@pytest.mark.parametrize("startup_frozen", [False, True], ids=["none-frozen", "interpreter-froze"])
def test_a_loaded_manifest_is_long_lived_for_the_collector_and_nothing_stays_frozen(
    tmp_path, monkeypatch, startup_frozen
):
    import gc

    from warmkit import _compat

    if _compat.process_froze_objects() or not gc.isenabled():
        pytest.skip("the test process froze objects or disabled gc itself")
    reg = WarmupRegistry()
    for n in range(2000):
        reg.add(PyKernel, n=n)
    path = reg.save(tmp_path / "m.json")
    gc.collect()
    try:
        if startup_frozen:  # CPython 3.12 starts with its immortal type tuples frozen
            gc.freeze()  # (as 3.12's count reads them): they are not the process's own
            monkeypatch.setattr(_compat, "STARTUP_FROZEN", gc.get_freeze_count())
        loaded = WarmupRegistry.load(path)
        # in the oldest generation: the next young collection does not walk 2000 registrations
        young = {id(o) for o in gc.get_objects(0)} | {id(o) for o in gc.get_objects(1)}
        assert not [r for r in loaded if id(r) in young]
        assert gc.get_freeze_count() == 0 and gc.isenabled()  # 3.12's tuples thawed too
        gc.freeze()  # a process that froze its heap: the load leaves that alone
        frozen = gc.get_freeze_count()
        WarmupRegistry.load(path)
        assert frozen // 2 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_load_of_a_missing_file_is_manifest_error(tmp_path):
    with pytest.raises(ManifestError, match="cannot read"):
        WarmupRegistry.load(tmp_path / "nope.json")


def test_load_names_an_unknown_kernel(tmp_path):
    reg = {"kernel": "nosuch.kernel", "zip": [], "space": {}}
    with pytest.raises(ManifestError, match="nosuch.kernel"):
        WarmupRegistry.load(_manifest(tmp_path, registrations=[reg]))
    reg = {"kernel": "nosuch_module_xyz:K", "space": {}}
    with pytest.raises(ManifestError, match="nosuch_module_xyz"):
        WarmupRegistry.load(_manifest(tmp_path, registrations=[reg]))
    reg = {"kernel": f"{PyKernel.__module__}:Missing", "space": {}}
    with pytest.raises(ManifestError, match="Missing"):
        WarmupRegistry.load(_manifest(tmp_path, registrations=[reg]))


@pytest.mark.parametrize(
    "entry",
    [
        {"kernel": f"{PyKernel.__module__}:PyKernel", "space": {"n": [1, 2]}},  # bare list
        {"kernel": f"{PyKernel.__module__}:PyKernel", "space": {"bogus": 1}},
        {"kernel": f"{PyKernel.__module__}:COMPILES", "space": {}},
        {"kernel": f"{PyKernel.__module__}:PyKernel", "space": {"n": {"weird": 1}}},
        {"space": {}},
        "not an entry",
    ],
)
def test_load_rejects_malformed_registrations(tmp_path, entry):
    # The schema's JSON path, or (for what only the kernel can judge) the registration's index.
    with pytest.raises(ManifestError, match=r"registration 0|\$\.registrations\[0\]"):
        WarmupRegistry.load(_manifest(tmp_path, registrations=[entry]))


def test_manifest_names_a_kernel_by_its_entry_point_name(plugin_site, tmp_path):
    plugin_site.add_dist(
        "acme-kernels", "1.2.0", kernels={"acme.py": f"{PyKernel.__module__}:PyKernel"}
    )
    reg = WarmupRegistry()
    reg.add(PyKernel, n=1)
    reg.add(OtherKernel, m=2)
    data = reg.to_dict()
    assert [r["kernel"] for r in data["registrations"]] == [
        "acme.py",
        f"{OtherKernel.__module__}:OtherKernel",
    ]
    loaded = WarmupRegistry.load(reg.save(tmp_path / "m.json"))
    assert loaded.plan() == reg.plan()


def test_zip_group_passed_as_a_keyword_is_refused_at_registration(registry):
    with pytest.raises(TypeError, match="positionally"):
        PyKernel().register_warmup(n=zip_inputs({"n": 1}))
    assert len(registry) == 0


def test_two_kernel_classes_with_one_name_are_refused(registry):
    class First(OtherKernel):
        name = "shared.name"

    class Second(PyKernel):
        name = "shared.name"

    First().register_warmup(m=1)
    with pytest.raises(ValueError, match="shared.name.*two classes") as info:
        Second().register_warmup(n=1)
    assert "First" in str(info.value) and "Second" in str(info.value)
    assert registry.plan() == {"shared.name": [First.CompileKey(1)]}
    First().register_warmup(m=2)  # the first class keeps working
    registry.clear()
    Second().register_warmup(n=1)  # a cleared registry starts over
    assert len(registry) == 1


# -- save() refuses what cannot be replayed -------------------------------------------------


def test_save_refuses_a_kernel_defined_in_a_function(tmp_path):
    class Local(warmkit.JitKernel["Local.CompileKey"]):
        @attrs.frozen
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n)

        def compile(self, key):
            return object()

    reg = WarmupRegistry()
    reg.add(Local, n=1)
    with pytest.raises(ManifestError, match="defined inside a function"):
        reg.save(tmp_path / "m.json")
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_a_kernel_defined_in_main(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import attrs, warmkit\n"
        "class K(warmkit.JitKernel['K.CompileKey']):\n"
        "    @attrs.frozen\n"
        "    class CompileKey:\n"
        "        n: int\n"
        "    def dispatch(self, *, n):\n"
        "        return self.CompileKey(n)\n"
        "    def compile(self, key):\n"
        "        return object()\n"
        "reg = warmkit.WarmupRegistry()\n"
        "reg.add(K, n=1)\n"
        "try:\n"
        "    reg.save('m.json')\n"
        "except warmkit.ManifestError as e:\n"
        "    print(e)\n"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "defined in __main__" in out.stdout, out.stderr
    assert not (tmp_path / "m.json").exists()


class _Stateful(warmkit.JitKernel["_Stateful.CompileKey"]):
    """dispatch reads self.block, which a fresh instance does not have: keys differ on replay."""

    @attrs.frozen
    class CompileKey:
        n: int
        block: int

    def __init__(self, block: int = 64) -> None:
        self.block = block

    def dispatch(self, *, n):
        return self.CompileKey(n, self.block)

    def compile(self, key):
        return object()


def test_save_refuses_a_dispatch_that_reads_unreproduced_instance_state(tmp_path):
    kernel = _Stateful(block=128)
    reg = WarmupRegistry()
    with reg.activate():
        kernel.register_warmup(n=[1, 2])
    with pytest.raises(ManifestError, match="instance state") as info:
        reg.save(tmp_path / "m.json")
    assert "block=128" in str(info.value) and "block=64" in str(info.value)
    ok = WarmupRegistry()
    with ok.activate():
        _Stateful().register_warmup(n=1)  # the default state: a replay plans the same keys
    ok.save(tmp_path / "m.json")


def test_a_failed_save_names_the_path_and_leaves_no_temporary(tmp_path):
    reg = WarmupRegistry()
    reg.add(PyKernel, n=1)
    target = tmp_path / "m.json"
    target.mkdir()
    (target / "x").write_text("x")  # the rename onto it fails
    with pytest.raises(OSError, match=f"cannot write {target}"):
        reg.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


# -- loading many single-point registrations (a recording's shape) -------------------------


def _points_manifest(tmp_path, spaces, kernels=None):
    kernels = kernels or [PyKernel] * len(spaces)
    regs = [
        {"kernel": f"{k.__module__}:{k.__qualname__}", "name": k.name, "zip": [], "space": s}
        for k, s in zip(kernels, spaces, strict=True)
    ]
    path = tmp_path / "points.json"
    path.write_text(json.dumps(WarmupRegistry().to_dict() | {"registrations": regs}))
    return path


def test_loaded_points_equal_added_ones_and_deduplicate_against_them(tmp_path):
    spaces = [{"n": i, "flag": i % 2 == 0} for i in range(50)] + [{"flag": True, "n": 0}]
    spaces += [{"m": 3}, {"n": None}, {"n": "s"}, {"n": (1, 2)}, {"n": 2.5}, {"n": 1000}]
    kernels = [PyKernel] * 51 + [OtherKernel] + [PyKernel] * 5
    data = [{k: _registry_value(v) for k, v in s.items()} for s in spaces]
    loaded = WarmupRegistry.load(_points_manifest(tmp_path, data, kernels))
    added = WarmupRegistry()
    for k, s in zip(kernels, spaces, strict=True):
        added.add(k, **s)
    assert list(loaded) == list(added)  # same registrations, same order, duplicates once
    assert len(loaded) == len(spaces) - 1  # {"flag": True, "n": 0} is {"n": 0, "flag": True}
    for k, s in zip(kernels, spaces, strict=True):
        assert loaded.add(k, **s) is False  # the same identity as add() gives
    assert loaded.plan() == added.plan()


def _registry_value(v):
    return {"tuple": list(v)} if isinstance(v, tuple) else v


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"nope": 1}, ["registration 5", "unknown input(s) 'nope'", "PyKernel"]),
        ({"n": 1, "nope": 1}, ["registration 5", "'nope'"]),
        ({"n": {"choices": [1, 2]}, "nope": 3}, ["registration 5", "'nope'"]),
    ],
)
def test_a_bad_point_among_good_ones_is_named_by_its_index(tmp_path, bad, words):
    spaces = [{"n": i} for i in range(5)] + [bad] + [{"n": i} for i in range(6, 9)]
    with pytest.raises(ManifestError) as info:
        WarmupRegistry.load(_points_manifest(tmp_path, spaces))
    for word in words:
        assert word in str(info.value)


def test_consecutive_points_are_saved_as_rows_and_load_back_as_the_same_registrations(tmp_path):
    reg = WarmupRegistry()
    for i in range(4):
        reg.add(PyKernel, n=i, flag=True)
    reg.add(OtherKernel, m=1)  # another kernel: a lone point, written as the registration it is
    reg.add(PyKernel, n=9, flag=False)
    reg.add(PyKernel, flag=True, n=10)  # other names' order: another run
    reg.add(PyKernel, flag=False, n=11)
    reg.add(PyKernel, n=(1, 2))  # not plain scalars
    reg.add(PyKernel, n=12, flag=True)
    data = json.loads(reg.save(tmp_path / "m.json").read_text())
    shapes = [
        ("points", len(r["points"]["rows"])) if "points" in r else ("space", len(r["space"]))
        for r in data["registrations"]
    ]
    assert shapes == [("points", 4), ("space", 1), ("space", 2), ("points", 2), ("space", 1), ("space", 2)]  # fmt: skip
    assert data["registrations"][0]["points"]["rows"][3] == [3, True]
    loaded = WarmupRegistry.load(tmp_path / "m.json")
    assert list(loaded) == list(reg)  # every registration, in order, with its names' order
    assert [list(r.space) for r in loaded] == [list(r.space) for r in reg]
    assert loaded.to_dict() == reg.to_dict()
    assert loaded.plan() == reg.plan()


def test_a_bad_point_in_rows_is_named_by_registration_and_point(tmp_path):
    reg = WarmupRegistry()
    for i in range(4):
        reg.add(PyKernel, n=i)
    data = reg.to_dict()
    data["registrations"][0]["points"]["names"] = ["nope"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError) as info:
        WarmupRegistry.load(path)
    msg = str(info.value)
    assert str(path) in msg and "registration 0, point 0 [0]" in msg and "'nope'" in msg, msg
    assert f"{PyKernel.__module__}:PyKernel" in msg


class _Picky(warmkit.JitKernel["_Picky.CompileKey"]):
    name = "tests.Picky"
    backend = "fake"

    class Refusal(Exception):
        def __init__(self, n, why):
            super().__init__(n, why)

    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n):
        if n == 3:
            raise ValueError("n must not be 3")
        if n > 2**63:
            raise _Picky.Refusal(n, "too large")
        return self.CompileKey(n)


def test_an_error_from_dispatch_during_warmup_names_the_kernel_and_the_registration():
    reg = warmkit.WarmupRegistry()
    reg.add(_Picky, n=[1, 3])
    with pytest.raises(ValueError) as info:  # the type callers catch is kept
        warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="off"), reg)
    message = str(info.value)
    assert "kernel 'tests.Picky'" in message and "registration {'n': [1, 3]}" in message
    assert message.endswith("n must not be 3") and message.count("tests.Picky") == 1
    # a type that cannot be rebuilt from one message: named in a note, once
    reg = warmkit.WarmupRegistry()
    reg.add(_Picky, n=2**70)
    with pytest.raises(_Picky.Refusal) as info:
        reg.plan()
    (note,) = info.value.__notes__
    assert "kernel 'tests.Picky'" in note and str(2**70) in note
