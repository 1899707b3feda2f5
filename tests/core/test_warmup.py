"""``warmkit.warmup(config)``: plan, load the needed backends, compile, report, arm the monitor."""

from __future__ import annotations

import gc
import json
import logging
import sys
import threading
import time
import weakref
from typing import ClassVar

import attrs
import pytest

import warmkit
from warmkit import (
    BackendStatus,
    BackendUnavailableError,
    RuntimeCompileError,
    WarmupConfig,
    WarmupError,
    WarmupRegistry,
    monitor,
)
from warmkit import _compat as compat_module
from warmkit._compat import process_froze_objects
from warmkit._plugin import discovery as plugins
from warmkit._warmup import orchestrate as warmup_module
from warmkit.testing import backend_override

from . import _kernels
from ._kernels import FakeBackend, OtherKernel, PyKernel, ScaleKernel

P = PyKernel.CompileKey
S = ScaleKernel.CompileKey


def cfg(**kw) -> WarmupConfig:
    return WarmupConfig(**({"progress": "off"} | kw))


def reg_of(*items) -> WarmupRegistry:
    reg = WarmupRegistry()
    for kernel, space in items:
        reg.add(kernel, **space)
    return reg


def statuses(report) -> list[str]:
    return [e.status for e in report.entries]


# -- disabled ------------------------------------------------------------------------------


def test_disabled_returns_a_report_and_imports_no_backend(plugin_site, monkeypatch):
    plugin_site.add_module(
        "wkp_never_imported", f"from {_kernels.__name__} import FakeBackend as B\n"
    )
    plugin_site.add_dist("never", backends={"fake": "wkp_never_imported:B"})
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    report = warmkit.warmup(cfg(enabled=False), reg)
    assert report.enabled is False
    assert report.entries == ()
    assert "disabled" in report.table()
    assert "wkp_never_imported" not in sys.modules
    assert "fake" not in plugins.loaded_backend_table()
    assert _kernels.COMPILES == []
    assert monitor.mode() == "off"
    monkeypatch.setenv("WARMKIT_ENABLED", "0")
    assert warmkit.warmup(registry=reg).enabled is False
    assert "wkp_never_imported" not in sys.modules


# -- the normal path -----------------------------------------------------------------------


def test_warmup_compiles_every_planned_key_and_arms_the_monitor(fake_backend):
    reg = reg_of(
        (PyKernel, {"n": [1, 2]}),
        (ScaleKernel, {"n": [1, 100, 1000], "dtype": "bf16"}),
        (PyKernel, {"n": [2, 3]}),
    )
    report = warmkit.warmup(cfg(jobs=1), reg)
    assert isinstance(report, warmkit.WarmupReport)
    assert [(e.kernel, e.key) for e in report.entries] == [
        (PyKernel.name, P(1, False)),
        (PyKernel.name, P(2, False)),
        (PyKernel.name, P(3, False)),
        (ScaleKernel.name, S(1, "bf16")),
        (ScaleKernel.name, S(128, "bf16")),
        (ScaleKernel.name, S(1024, "bf16")),
    ]
    assert statuses(report) == ["compiled"] * 6
    assert [e.backend for e in report.entries] == [None] * 3 + ["fake"] * 3
    assert all(e.seconds >= 0 for e in report.entries)
    assert report.ok and report.failures == ()
    assert report.totals() == {
        "compiled": 6,
        "cached": 0,
        "waited": 0,
        "fetched": 0,
        "failed": 0,
        "skipped": 0,
        "keys": 6,
    }
    assert [(k, t) for _n, k, t in _kernels.COMPILES] == [(e.key, None) for e in report.entries]
    # the local device ("cpu" == default_target) shares the runtime cache
    assert report.monitor == "warn"
    assert monitor.mode() == "warn"
    assert "install" in FakeBackend.monitor_calls
    monitor.arm("error")
    for e in report.entries:
        kernel = PyKernel() if e.backend is None else ScaleKernel()
        kernel.get_or_compile(e.key)
    assert monitor.events() == ()
    with pytest.raises(RuntimeCompileError):
        PyKernel().get_or_compile(P(99, True))


def test_warmup_uses_the_active_registry_else_the_default_one():
    reg = reg_of((PyKernel, {"n": 5}))
    with reg.activate():
        report = warmkit.warmup(cfg())
    assert [e.key for e in report.entries] == [P(5, False)]
    default = warmkit.default_registry()
    if len(default) == 0:  # nothing registered process-wide: an empty warmup
        assert warmkit.warmup(cfg()).entries == ()


def test_empty_plan_still_arms_the_monitor():
    report = warmkit.warmup(cfg(monitor="error"), WarmupRegistry())
    assert report.entries == () and report.ok
    assert monitor.mode() == "error"


@pytest.mark.parametrize("mode", ["off", "warn", "error"])
def test_monitor_is_armed_with_the_configured_mode(mode):
    monitor.arm("warn")
    report = warmkit.warmup(cfg(monitor=mode), reg_of((PyKernel, {"n": 1})))
    assert report.monitor == mode
    assert monitor.mode() == mode


def test_only_the_backends_the_plan_needs_are_loaded(fake_backend):
    warmkit.warmup(cfg(), reg_of((ScaleKernel, {"n": 1}), (PyKernel, {"n": 1})))
    assert "fake" in plugins.loaded_backend_table()
    for name in ("tilelang", "cutedsl"):
        # Arming the monitor loads the backend of a DSL this process has imported (an
        # earlier test may have imported the real tilelang), and only those.
        assert name not in plugins.loaded_backend_table() or name in sys.modules
    assert FakeBackend.scopes == [(None, 1)]


def test_warmup_imports_no_plugin_module_the_plan_does_not_need(fake_backend):
    fake_backend.add_module(
        "wkp_unneeded_backend", f"from {_kernels.__name__} import FakeBackend as B\n"
    )
    fake_backend.add_dist("unneeded", backends={"unneeded": "wkp_unneeded_backend:B"})
    warmkit.warmup(cfg(), reg_of((ScaleKernel, {"n": 1})))
    assert "wkp_unneeded_backend" not in sys.modules
    assert "unneeded" not in plugins.loaded_backend_table()


def test_second_warmup_reports_cached_and_backend_cache_hits_too(fake_backend):
    FakeBackend.cache_hit_keys = frozenset({S(2, "float16")})
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    assert statuses(warmkit.warmup(cfg(), reg)) == ["compiled", "cached"]
    assert statuses(warmkit.warmup(cfg(), reg)) == ["cached", "cached"]
    assert len(_kernels.COMPILES) == 2


def test_compile_returning_none_fails_the_key(fake_backend):
    class Lazy(PyKernel):
        def compile(self, key):
            return None

    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(), reg_of((Lazy, {"n": 1})))
    assert "returned None" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


# -- failures ------------------------------------------------------------------------------


def test_fail_fast_raises_warmup_error_with_kernel_key_elapsed_and_report():
    PyKernel.fail_on = frozenset({P(2, False)})
    reg = reg_of((PyKernel, {"n": [1, 2, 3, 4]}), (OtherKernel, {"m": [1]}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(jobs=1), reg)
    err = info.value
    assert err.kernel == PyKernel.name
    assert err.key == P(2, False)
    assert isinstance(err.elapsed, float) and err.elapsed >= 0
    assert isinstance(err.__cause__, ValueError)
    assert "cannot compile" in str(err.__cause__)
    assert PyKernel.name in str(err) and repr(P(2, False)) in str(err)
    assert statuses(err.report) == ["compiled", "failed", "skipped", "skipped", "skipped"]
    assert err.failures == (err.report.entries[1],)
    assert err.report.entries[1].exception is err.__cause__
    assert "ValueError: cannot compile" in err.report.entries[1].error
    assert _kernels.compiled_keys() == [P(1, False)]  # nothing after the failure was attempted
    assert monitor.mode() == "off"  # a failed warmup arms nothing


def test_collect_mode_attempts_everything_then_raises_once_listing_all():
    PyKernel.fail_on = frozenset({P(1, False), P(3, False)})
    reg = reg_of((PyKernel, {"n": [1, 2, 3, 4]}), (OtherKernel, {"m": [7]}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect", jobs=1), reg)
    err = info.value
    assert statuses(err.report) == ["failed", "compiled", "failed", "compiled", "compiled"]
    assert [f.key for f in err.failures] == [P(1, False), P(3, False)]
    assert (err.kernel, err.key) == (PyKernel.name, P(1, False))
    msg = str(err)
    assert "2 of 5" in msg
    assert repr(P(1, False)) in msg and repr(P(3, False)) in msg
    assert len(_kernels.COMPILES) == 3


def test_missing_backend_error_names_kernel_backend_and_install_hint():
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(), reg)
    cause = info.value.__cause__
    assert isinstance(cause, BackendUnavailableError)
    assert (cause.backend, cause.kernel) == ("fake", ScaleKernel.name)
    for part in (ScaleKernel.name, "'fake'", cause.install_hint):
        assert part in str(info.value)


def test_unavailable_backend_error_names_kernel_backend_and_install_hint(fake_backend):
    FakeBackend.status = BackendStatus(
        ok=False, reason="fake-dsl is not installed", install_hint="pip install fake-dsl"
    )
    reg = reg_of((ScaleKernel, {"n": 1}), (PyKernel, {"n": 1}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect"), reg)
    msg = str(info.value)
    assert ScaleKernel.name in msg and "'fake'" in msg and "pip install fake-dsl" in msg
    assert statuses(info.value.report) == ["failed", "compiled"]  # the rest still compiled
    assert FakeBackend.scopes == []


def test_a_present_stub_backend_fails_its_keys_saying_it_is_a_stub():
    # No device and no target: the core leaves it to the backend, so a stub says it is one.
    from warmkit._plugin.contract import TileLangStubBackend

    class TileKernel(warmkit.JitKernel):
        backend = "tilelang"

        @attrs.frozen
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n)

    class PresentTileLang(TileLangStubBackend):
        def available(self) -> BackendStatus:
            return BackendStatus(ok=True, reason="stub")

    with (
        backend_override("tilelang", PresentTileLang()),
        pytest.raises(WarmupError, match="stub") as info,
    ):
        warmkit.warmup(cfg(), reg_of((TileKernel, {"n": 1})))
    assert isinstance(info.value.__cause__, warmkit.BackendNotImplementedError)
    assert info.value.kernel == TileKernel.name


def test_parallel_fail_fast_reports_every_key_in_plan_order(fake_backend):
    FakeBackend.par = 2
    FakeBackend.fail_keys = frozenset({S(1, "float16")})
    reg = reg_of((ScaleKernel, {"n": [2**i for i in range(8)]}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(jobs=2), reg)
    report = info.value.report
    assert [e.key for e in report.entries] == reg.plan()[ScaleKernel.name]
    assert report.entries[0].status == "failed"
    assert set(statuses(report)) <= {"compiled", "failed", "skipped"}


# -- garbage collection ----------------------------------------------------------------------


class _Cycle:
    me: object = None


def _compile_makes_cyclic_garbage(seen: list[int], dead: list[weakref.ref]):
    def hook(key):
        seen.append(gc.get_freeze_count())
        c = _Cycle()
        c.me = c
        dead.append(weakref.ref(c))
        del c
        gc.collect()  # garbage made inside the warmup is collected inside it

    return hook


def test_warmup_keeps_what_it_holds_out_of_gc_walks_and_thaws_it_after(monkeypatch):
    if process_froze_objects() or not gc.isenabled():
        pytest.skip("the test process froze objects or disabled gc itself")
    monkeypatch.setattr(warmup_module, "_KEEP_EVERY", 2)
    seen: list[int] = []
    dead: list[weakref.ref] = []
    PyKernel.hook = _compile_makes_cyclic_garbage(seen, dead)
    report = warmkit.warmup(cfg(jobs=1), reg_of((PyKernel, {"n": list(range(6))})))
    assert statuses(report) == ["compiled"] * 6
    assert seen[0] > 0  # what existed before the warmup is out of the walks
    assert seen[-1] > seen[0]  # and what the keys made so far, every _KEEP_EVERY entries
    assert all(ref() is None for ref in dead)  # garbage is not kept
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # thawed, as it was


def test_garbage_is_collected_before_each_freeze_not_pinned_until_the_end(monkeypatch):
    """A frozen object is never collected: nothing may be garbage when it is frozen."""
    if process_froze_objects() or not gc.isenabled():
        pytest.skip("the test process froze objects or disabled gc itself")
    monkeypatch.setattr(warmup_module, "_KEEP_EVERY", 2)
    made: list[weakref.ref] = []
    alive_at: dict[int, list[bool]] = {}

    def cycle() -> None:
        c = _Cycle()
        c.me = c
        made.append(weakref.ref(c))

    def hook(key):
        alive_at[key.n] = [ref() is not None for ref in made]
        cycle()  # garbage, left for the collector (no gc.collect() here)

    cycle()  # made before the warmup, still young
    PyKernel.hook = hook
    warmkit.warmup(cfg(jobs=1), reg_of((PyKernel, {"n": list(range(6))})))
    assert alive_at[0] == [False]  # collected before the first freeze
    # keys 0-1 and 2-3 made garbage before the keep() at entries 2 and 4: collected there
    assert alive_at[5][:5] == [False] * 5


def test_warmup_that_fails_thaws_too():
    if process_froze_objects():
        pytest.skip("the test process froze objects itself")
    PyKernel.fail_on = frozenset({P(2, False)})
    with pytest.raises(WarmupError):
        warmkit.warmup(cfg(on_error="raise"), reg_of((PyKernel, {"n": [1, 2, 3]})))
    assert gc.get_freeze_count() == 0


def test_the_interpreters_own_frozen_objects_do_not_turn_the_freezing_off(monkeypatch):
    """CPython 3.12 starts with its immortal type tuples frozen: they are not the process's."""
    if process_froze_objects() or not gc.isenabled():
        pytest.skip("the test process froze objects or disabled gc itself")
    seen: list[int] = []
    dead: list[weakref.ref] = []
    PyKernel.hook = _compile_makes_cyclic_garbage(seen, dead)
    gc.freeze()  # what the interpreter froze at startup, as 3.12's count reads it
    monkeypatch.setattr(compat_module, "STARTUP_FROZEN", gc.get_freeze_count())
    try:
        reg = reg_of((PyKernel, {"n": [1, 2]}))  # made after: not frozen yet
        warmkit.warmup(cfg(jobs=1), reg)
        assert seen[0] > compat_module.STARTUP_FROZEN  # the warmup froze what existed before it
        assert all(ref() is None for ref in dead)
        assert gc.get_freeze_count() == 0  # and thawed it all after (3.12's tuples too)
    finally:
        gc.unfreeze()


def test_warmup_never_thaws_what_the_process_froze():
    """A pre-fork server froze its heap: the warmup freezes nothing more and thaws nothing."""
    seen: list[int] = []
    dead: list[weakref.ref] = []
    PyKernel.hook = _compile_makes_cyclic_garbage(seen, dead)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        warmkit.warmup(cfg(), reg_of((PyKernel, {"n": [1, 2]})))
        # (a frozen object freed by its reference count leaves the count: <=, not ==)
        assert len(seen) == 2 and all(frozen // 2 < n <= frozen for n in seen)  # nothing added
        assert frozen // 2 < gc.get_freeze_count() <= frozen  # nothing thawed
        assert all(ref() is None for ref in dead)
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("process_froze", [False, True], ids=["own-freeze", "process-froze"])
def test_a_warmup_counts_the_frozen_objects_once(monkeypatch, process_froze):
    """``gc.get_freeze_count()`` walks every frozen object (18 ms once torch is imported).

    Planning and grouping ask again whether the process froze objects: inside
    the warmup the answer is known, so they must not walk the heap the warmup
    froze (two walks made a 4-key warmup 36 ms instead of 0.1 ms).
    """
    if process_froze_objects() or not gc.isenabled():
        pytest.skip("the test process froze objects or disabled gc itself")
    calls: list[int] = []
    count = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: calls.append(1) or count())
    reg = reg_of((PyKernel, {"n": [1, 2, 3]}))
    if process_froze:
        gc.freeze()
    try:
        report = warmkit.warmup(cfg(jobs=1), reg)
        assert statuses(report) == ["compiled"] * 3
        assert len(calls) == 1  # at the start, to tell the process's freeze from none
        assert (count() > 0) is process_froze  # the process's freeze kept, the warmup's thawed
    finally:
        gc.unfreeze()


# -- parallelism ---------------------------------------------------------------------------


def test_parallel_jobs_really_run_concurrently():
    barrier = threading.Barrier(3, timeout=10)
    PyKernel.hook = lambda key: barrier.wait()  # passes only when 3 compiles run at once
    report = warmkit.warmup(cfg(jobs=3), reg_of((PyKernel, {"n": [1, 2, 3]})))
    assert statuses(report) == ["compiled"] * 3
    assert report.jobs == 3


def test_parallel_base_exception_in_a_compile_propagates_and_every_key_is_accounted():
    """A SystemExit inside one worker's compile reaches the caller; no thread keeps compiling."""
    done = []

    def hook(key):
        if key.n == 2:
            raise SystemExit("compile asked to exit")
        done.append(key.n)

    PyKernel.hook = hook
    before = set(threading.enumerate())  # an earlier test's abandoned threads may still run
    with pytest.raises(SystemExit, match="compile asked to exit"):
        warmkit.warmup(cfg(jobs=2), reg_of((PyKernel, {"n": list(range(1, 41))})))
    mine = [t for t in set(threading.enumerate()) - before if t.name.startswith("warmkit-")]
    for t in mine:  # the other worker exits on its own, without taking another key
        t.join(timeout=10)
    assert not [t for t in mine if t.is_alive()]
    assert 2 not in done and len(done) < 40  # stopped: the rest were not attempted


def test_backend_parallelism_caps_the_workers(fake_backend):
    FakeBackend.par = 2
    barrier = threading.Barrier(2, timeout=10)
    running, peak, lock = [0], [0], threading.Lock()

    def hook(kernel, key, target):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        barrier.wait()
        with lock:
            running[0] -= 1

    FakeBackend.hook = hook
    report = warmkit.warmup(cfg(jobs=8), reg_of((ScaleKernel, {"n": [1, 2, 4, 8, 16, 32]})))
    assert statuses(report) == ["compiled"] * 6
    assert peak[0] == 2
    assert FakeBackend.scopes == [(None, 2)]


def test_cache_hits_run_one_at_a_time_and_a_cold_compile_overlaps_again(fake_backend):
    """Once a key came back a cache hit, the next keys run one at a time (Python-bound hits only
    fight over the GIL on two threads); once a cold compile finishes, slow keys overlap again."""
    FakeBackend.par = 4
    cached = {ScaleKernel.CompileKey(n, "float16") for n in (1, 2, 4, 8, 16)}
    FakeBackend.cache_hit_keys = frozenset(cached)
    spans, lock = [], threading.Lock()

    def hook(kernel, key, target):
        t0 = time.monotonic()
        time.sleep(0.02)  # ten times SPILL_SECONDS: slow, by the runner's clock
        with lock:
            spans.append((t0, time.monotonic(), key in cached))

    FakeBackend.hook = hook
    ns = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    report = warmkit.warmup(cfg(jobs=4), reg_of((ScaleKernel, {"n": ns})))
    assert statuses(report) == ["cached"] * 5 + ["compiled"] * 4
    first_end = min(end for _, end, _ in spans)

    def overlapping(group):
        return [(a, b) for a in group for b in group if a < b and a[0] < b[1] and b[0] < a[1]]

    later_hits = [s for s in spans if s[2] and s[0] >= first_end]
    assert len(later_hits) >= 3 and not overlapping(later_hits)
    assert overlapping([s for s in spans if not s[2]])  # cold compiles after the first overlap


_SHARED = P(7, False)


class _SharedKeyA(PyKernel):
    name = "tests.shared_a"

    def dispatch(self, *, n, flag=False):
        return _SHARED if n == 7 else super().dispatch(n=n, flag=flag)


class _SharedKeyB(_SharedKeyA):
    name = "tests.shared_b"


def test_one_key_object_planned_for_two_kernels_is_reported_in_plan_order_for_each():
    reg = reg_of((_SharedKeyB, {"n": [7, 1]}), (_SharedKeyA, {"n": [2, 7]}))
    report = warmkit.warmup(cfg(jobs=2), reg)
    plan = reg.plan()
    assert sum(key is _SHARED for keys in plan.values() for key in keys) == 2
    assert [(e.kernel, e.key) for e in report.entries] == [
        (name, key) for name, keys in plan.items() for key in keys
    ]
    assert statuses(report) == ["compiled"] * 4


def test_jobs_1_compiles_serially_in_plan_order(fake_backend):
    FakeBackend.par = 8
    running, peak, lock = [0], [0], threading.Lock()

    def hook(kernel, key, target):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        with lock:
            running[0] -= 1

    FakeBackend.hook = hook
    reg = reg_of((ScaleKernel, {"n": [64, 1, 8, 2]}))
    warmkit.warmup(cfg(jobs=1), reg)
    assert peak[0] == 1
    assert _kernels.compiled_keys() == reg.plan()[ScaleKernel.name]


def test_parallel_report_is_in_plan_order(fake_backend):
    FakeBackend.par = 4
    order = [1024, 1, 64, 2, 8, 4, 32, 16]
    reg = reg_of((ScaleKernel, {"n": order}), (PyKernel, {"n": [5, 4, 3]}))
    report = warmkit.warmup(cfg(jobs=4), reg)
    plan = reg.plan()
    assert [e.key for e in report.entries] == plan[ScaleKernel.name] + plan[PyKernel.name]


# -- allow-list, target --------------------------------------------------------------------


def test_backends_allow_list_skips_other_kernels_without_loading_their_backend(fake_backend):
    class Tile(ScaleKernel):
        backend = "tilelang"

    reg = reg_of((ScaleKernel, {"n": [1, 2]}), (Tile, {"n": 1}), (PyKernel, {"n": 1}))
    report = warmkit.warmup(cfg(backends=["fake"]), reg)
    assert statuses(report) == ["compiled", "compiled", "skipped", "skipped"]
    assert "allow-list" in report.entries[2].error
    assert "tilelang" not in plugins.loaded_backend_table() or "tilelang" in sys.modules
    assert report.totals()["skipped"] == 2


def test_target_is_passed_to_the_backend_and_kept_apart_from_the_runtime_cache(fake_backend):
    reg = reg_of((ScaleKernel, {"n": [1, 2]}), (PyKernel, {"n": 3}))
    report = warmkit.warmup(cfg(target="cuda:90"), reg)
    assert report.target == "cuda:90"
    assert {t for _n, _k, t in _kernels.COMPILES} == {"cuda:90"}  # PyKernel via current_target()
    assert FakeBackend.scopes == [("cuda:90", 1)]
    monitor.arm("error")  # compiled for another device: this process still misses
    with pytest.raises(RuntimeCompileError):
        ScaleKernel().get_or_compile(S(1, "float16"))


def test_target_equal_to_the_local_device_shares_the_runtime_cache(fake_backend):
    warmkit.warmup(cfg(target="cpu"), reg_of((ScaleKernel, {"n": [1, 2]})))
    assert {t for _n, _k, t in _kernels.COMPILES} == {None}
    monitor.arm("error")
    ScaleKernel().get_or_compile(S(2, "float16"))
    assert monitor.events() == ()


def test_a_target_spelled_otherwise_is_canonicalised_by_the_backend(fake_backend, monkeypatch):
    # "CPU" is another spelling of the fake device "cpu": the backend says so.
    monkeypatch.setattr(FakeBackend, "canonical_target", lambda self, t: t.lower(), raising=False)
    warmkit.warmup(cfg(target="CPU"), reg_of((ScaleKernel, {"n": [1]})))
    assert {t for _n, _k, t in _kernels.COMPILES} == {None}


def test_arming_loads_the_backend_of_an_already_imported_dsl(plugin_site, monkeypatch):
    # A process launching raw kernels of an imported DSL is watched even if its plan had
    # none of that backend's kernels; a backend whose DSL was never imported stays unloaded.
    plugin_site.add_module("wkdsl", "")
    plugin_site.add_module("wkdsl_backend", f"from {_kernels.__name__} import FakeBackend as B\n")
    plugin_site.add_module("wkother_backend", f"from {_kernels.__name__} import FakeBackend as B\n")
    plugin_site.add_dist(
        "wkdsl-backend",
        "1.0",
        backends={"wkdsl": "wkdsl_backend:B", "wkother": "wkother_backend:B"},
    )
    import wkdsl  # noqa: F401 -- the DSL is imported

    monitor.arm("warn")
    assert "wkdsl" in plugins.loaded_backend_table()
    assert "wkother" not in plugins.loaded_backend_table() and "wkother_backend" not in sys.modules
    assert "install" in FakeBackend.monitor_calls


def test_a_kernel_that_cannot_be_built_to_plan_it_is_named_before_any_bundle_install(
    fake_backend, monkeypatch
):
    class NeedsArgs(ScaleKernel):
        def __init__(self, size):
            self.size = size

    reg = WarmupRegistry()
    reg.add(NeedsArgs, n=1)
    installs = []
    monkeypatch.setattr("warmkit._cache.bundle.install_bundle", lambda path: installs.append(path))
    with pytest.raises(TypeError, match=f"{NeedsArgs.name}.*no arguments"):
        warmkit.warmup(cfg(bundle="kernels.wkb"), reg)
    assert installs == []


# -- progress and logs ---------------------------------------------------------------------


class FakeBar:
    made: ClassVar[list[FakeBar]] = []

    def __init__(self, *, total, **kw):
        self.total, self.kw, self.n, self.closed = total, kw, 0, False
        FakeBar.made.append(self)

    def update(self, n):
        self.n += n

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    import tqdm

    FakeBar.made = []
    monkeypatch.setattr(tqdm, "tqdm", FakeBar)
    return FakeBar.made


def test_progress_on_shows_a_bar_over_every_key(bars):
    warmkit.warmup(cfg(progress="on"), reg_of((PyKernel, {"n": [1, 2, 3]})))
    (bar,) = bars
    assert (bar.total, bar.n, bar.closed) == (3, 3, True)


def test_the_bar_counts_cheap_keys_in_batches_and_a_slow_key_at_once(bars):
    import time

    seen = []

    def hook(key):
        if key.n == 5:
            time.sleep(0.002)  # a compile over 1 ms: the bar shows it, and all before it, at once
        if key.n == 6:
            seen.append(bars[0].n)

    PyKernel.hook = hook
    warmkit.warmup(cfg(progress="on", jobs=1), reg_of((PyKernel, {"n": list(range(1, 101))})))
    assert seen == [5]
    (bar,) = bars
    assert (bar.total, bar.n, bar.closed) == (100, 100, True)  # the cheap rest, at close


@pytest.mark.parametrize(
    ("env", "value"), [("WARMKIT_RANK", "1"), ("RANK", "3"), ("WARMKIT_RANK", "2")]
)
def test_no_progress_bar_on_a_non_zero_rank(bars, monkeypatch, env, value):
    monkeypatch.setenv(env, value)
    warmkit.warmup(cfg(progress="on"), reg_of((PyKernel, {"n": [1, 2]})))
    assert bars == []


def test_warmkit_rank_takes_precedence_over_rank(bars, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WARMKIT_RANK", "0")
    warmkit.warmup(cfg(progress="on"), reg_of((PyKernel, {"n": [1]})))
    assert len(bars) == 1


def test_progress_auto_follows_the_tty_and_off_is_off(bars, monkeypatch):
    reg = reg_of((PyKernel, {"n": [1]}))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    warmkit.warmup(cfg(progress="auto"), reg)
    assert bars == []
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    warmkit.warmup(cfg(progress="off"), reg)
    assert bars == []
    warmkit.warmup(cfg(progress="auto"), reg)
    assert len(bars) == 1


def test_start_and_finish_are_logged_at_info_with_counts_and_seconds(caplog, fake_backend):
    caplog.set_level(logging.DEBUG, logger="warmkit")
    warmkit.warmup(cfg(jobs=2), reg_of((PyKernel, {"n": [1, 2]}), (ScaleKernel, {"n": 1})))
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("2 kernel(s), 3 key(s)" in m for m in info), info
    (done,) = [m for m in info if "done" in m]
    assert "3 compiled" in done and "s:" in done
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(PyKernel.name in m and m.endswith("s") for m in debug)
    assert any(ScaleKernel.name in m for m in debug)


def test_a_failure_is_logged_at_error(caplog):
    PyKernel.fail_on = frozenset({P(1, False)})
    with pytest.raises(WarmupError):
        warmkit.warmup(cfg(), reg_of((PyKernel, {"n": [1]})))
    assert any(r.levelno == logging.ERROR for r in caplog.records)


# -- the report ----------------------------------------------------------------------------


def test_report_to_dict_to_json_and_table():
    PyKernel.fail_on = frozenset({P(2, False)})
    reg = reg_of((PyKernel, {"n": [1, 2, 3]}), (OtherKernel, {"m": 1}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect", jobs=1), reg)
    report = info.value.report
    d = report.to_dict()
    assert d["enabled"] is True and d["jobs"] == 1 and d["target"] is None
    assert d["totals"] == {
        "compiled": 3,
        "cached": 0,
        "waited": 0,
        "fetched": 0,
        "failed": 1,
        "skipped": 0,
        "keys": 4,
    }
    assert d["entries"][1] == {
        "kind": "declared",
        "kernel": PyKernel.name,
        "backend": None,
        "key": repr(P(2, False)),
        "status": "failed",
        "seconds": d["entries"][1]["seconds"],
        "error": f"ValueError: cannot compile {P(2, False)!r}",
        "tuning": None,
    }
    assert json.loads(report.to_json()) == d
    assert "\n" not in report.to_json(indent=None)
    table = report.table()
    assert str(report) == table
    lines = table.splitlines()
    assert lines[0].split() == [
        "kernel",
        "backend",
        "keys",
        *warmkit._warmup.report.STATUSES,
        "seconds",
    ]
    assert any(line.startswith(PyKernel.name) and " 3 " in line for line in lines)
    assert any(line.startswith("tests.other") for line in lines)
    assert any(line.startswith("total") and " 4 " in line for line in lines)
    assert any(line.startswith("FAILED") and repr(P(2, False)) in line for line in lines)


def test_report_entries_are_attrs_objects():
    report = warmkit.warmup(cfg(), reg_of((PyKernel, {"n": [1]})))
    (entry,) = report.entries
    assert isinstance(entry, warmkit.ReportEntry)
    assert attrs.has(warmkit.ReportEntry) and attrs.has(warmkit.WarmupReport)
    assert (entry.kernel, entry.backend, entry.key, entry.status) == (
        PyKernel.name,
        None,
        P(1, False),
        "compiled",
    )


# -- nothing is skipped silently ----------------------------------------------------------


@pytest.mark.parametrize("via", ["config", "env"])
def test_an_unknown_backend_name_is_a_config_error_naming_the_known_ones(
    fake_backend, monkeypatch, via
):
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    if via == "env":
        monkeypatch.setenv("WARMKIT_BACKENDS", "fake,tritn")
        config = WarmupConfig.from_env(progress="off", monitor="off")
    else:
        config = cfg(backends="tritn")
    with pytest.raises(
        ValueError, match=r"unknown backend\(s\) 'tritn'.*installed backends:.*fake"
    ):
        warmkit.warmup(config, reg)
    assert _kernels.COMPILES == [] and warmkit.monitor.mode() == "off"


def test_a_warmup_that_filtered_out_every_key_says_so_and_is_not_warm(fake_backend, caplog):
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    caplog.set_level(logging.WARNING, logger="warmkit")
    report = warmkit.warmup(cfg(backends="tilelang", monitor="error"), reg)
    assert statuses(report) == ["skipped", "skipped"] and report.ok
    assert not report.warm and report.monitor == "off" and warmkit.monitor.mode() == "off"
    (msg,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "compiled nothing" in msg and "NOT warm" in msg and "fake" in msg
    # Partly filtered on purpose: the allowed keys are warm.
    report = warmkit.warmup(cfg(backends="fake", monitor="warn"), reg_of((ScaleKernel, {"n": 3})))
    assert report.warm and warmkit.monitor.mode() == "warn"


def test_an_unknown_target_is_refused_before_any_compile(fake_backend, monkeypatch):
    def canonical_target(self, target):
        if target != "fake:1":
            raise ValueError(f"unknown fake target {target!r}; accepted: 'fake:1'")
        return target

    monkeypatch.setattr(FakeBackend, "canonical_target", canonical_target, raising=False)
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    with pytest.raises(
        ValueError, match=r"target 'fake:999' \(backend 'fake'\).*accepted: 'fake:1'"
    ):
        warmkit.warmup(cfg(target="fake:999"), reg)
    assert _kernels.COMPILES == []
    assert statuses(warmkit.warmup(cfg(target="fake:1"), reg)) == ["compiled", "compiled"]


# -- cancellation and timeouts -------------------------------------------------------------


def test_sigint_cancels_queued_compiles_at_once_and_keeps_the_report(tmp_path):
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    starts = tmp_path / "starts"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "core._sigint_child", str(starts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while (
        not starts.exists() or len(starts.read_text().split()) < 4
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    t_signal = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    t_exit = time.monotonic()
    assert proc.returncode == 130, err
    began = [float(t) for t in starts.read_text().split()]
    after = [t for t in began if t > t_signal + 0.05]
    assert len(after) == 0, f"{len(after)} compile(s) started after SIGINT"
    assert t_exit - t_signal < 0.4 + 2.0  # the running compiles end, then at most 2 s
    report = json.loads(out)
    assert report["cancelled"] is True and report["monitor"] == "off"
    done = report["totals"]["compiled"]
    assert 2 <= done <= len(began) and report["totals"]["keys"] == 40  # running ones abandoned
    skipped = [e for e in report["entries"] if e["status"] == "skipped"]
    assert len(skipped) == 40 - done and all("cancelled" in e["error"] for e in skipped)
    assert "cancelled (SIGINT)" in err and "Traceback" not in err


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_hung_compile_is_a_timed_out_key_naming_kernel_and_key(jobs):
    import time

    release = threading.Event()
    base = 10 * jobs  # keys of their own: the other run's abandoned compile may finish later
    hung = PyKernel.CompileKey(n=base + 2, flag=False)

    def hook(key):
        if key == hung:
            release.wait(30)  # a compile that does not return

    PyKernel.hook = hook
    try:
        reg = reg_of((PyKernel, {"n": [base + 1, base + 2, base + 3]}))
        t0 = time.monotonic()
        with pytest.raises(WarmupError) as info:
            warmkit.warmup(cfg(jobs=jobs, compile_timeout=0.3, on_error="collect"), reg)
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
        PyKernel.hook = None
    report = info.value.report
    assert statuses(report) == ["compiled", "failed", "compiled"]
    (failed,) = report.failures
    assert failed.key == hung and isinstance(failed.exception, TimeoutError)
    assert "compile_timeout=0.3s" in failed.error and PyKernel.name in failed.error
    assert "abandoned" in failed.error and failed.seconds >= 0.3


def test_compile_timeout_is_validated():
    with pytest.raises(ValueError, match="compile_timeout"):
        WarmupConfig(compile_timeout=0)
    assert WarmupConfig(compile_timeout=2).compile_timeout == 2


@pytest.mark.parametrize("keys", [0, 1, 3])
def test_report_to_json_one_entry_per_line(keys):
    reg = reg_of((PyKernel, {"n": list(range(1, keys + 1))})) if keys else warmkit.WarmupRegistry()
    report = warmkit.warmup(cfg(jobs=1), reg)
    text = report.to_json()
    assert json.loads(text) == report.to_dict()
    entry_lines = [line for line in text.splitlines() if line.startswith("    {")]
    assert len(entry_lines) == keys
    assert json.loads(report.to_json(indent=4)) == report.to_dict()


# -- errors from user and plugin code name who raised them ------------------------------------


def test_an_exception_from_dispatch_names_the_kernel_and_keeps_its_type(monkeypatch):
    def dispatch(self, *, n, flag=False):
        raise KeyError("no such layer")

    reg = reg_of((PyKernel, {"n": [1, 2]}))
    monkeypatch.setattr(PyKernel, "dispatch", dispatch)
    with pytest.raises(KeyError) as info:
        warmkit.warmup(cfg(), reg)
    text = str(info.value)  # in the message itself: a log's %s shows it (issue 26)
    assert PyKernel.name in text and "while planning" in text and "no such layer" in text


@pytest.mark.parametrize(
    "method,value,words",
    [
        ("available", RuntimeError("driver exploded"), "raised by backend plugin"),
        ("available", True, "not a warmkit.BackendStatus"),
        ("parallelism", None, "not a positive int"),
        ("parallelism", RuntimeError("no cpus"), "raised by backend plugin"),
    ],
)
def test_a_misbehaving_plugin_is_named_in_each_key_error(
    fake_backend, monkeypatch, method, value, words
):
    def broken(self, *args):
        if isinstance(value, BaseException):
            raise value
        return value

    monkeypatch.setattr(FakeBackend, method, broken)
    reg = reg_of((ScaleKernel, {"n": [1, 2]}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect"), reg)
    report = info.value.report
    assert statuses(report) == ["failed", "failed"]
    assert all(words in e.error and "'fake'" in e.error for e in report.failures), report.failures[
        0
    ].error


def test_a_long_compiler_log_is_cut_to_its_first_and_last_lines():
    from warmkit._warmup.orchestrate import _describe

    log = "\n".join(f"line {i}" for i in range(5600))
    out = _describe(RuntimeError(f"ptxas failed\n{log}"))
    assert out.startswith("RuntimeError: ptxas failed | line 0") and "line 5599" in out
    assert "more lines; run with -v" in out and len(out) < 300


class _Tuned:
    def __init__(self, tuning, complete):
        self.tuning = tuning
        if complete:  # the rest of warmkit.ReportsTuning
            self.tuning_key, self.autotune_seconds = None, 0.0


class TuningKernel(PyKernel):
    """Its executor says how it was tuned: all of ReportsTuning for even n, ``tuning`` alone else."""

    name = "tests.TuningKernel"

    def compile(self, key):
        return _Tuned("benchmarked" if key.n < 4 else 3, complete=key.n % 2 == 0)


def test_a_report_takes_tuning_only_from_an_executor_that_reports_it():
    TuningKernel.clear_executors()
    reg = warmkit.WarmupRegistry()
    reg.add(TuningKernel, n=[1, 2, 4])
    report = warmkit.warmup(WarmupConfig(progress="off", monitor="off"), reg)
    by_n = {e.key.n: e.tuning for e in report.entries}
    # n=1 has no tuning_key/autotune_seconds (not a ReportsTuning); n=4's tuning is no str
    assert by_n == {1: None, 2: "benchmarked", 4: None}


@pytest.mark.parametrize("hook", ["available", "default_target", "parallelism", "compile_scope"])
def test_an_error_from_each_backend_hook_is_a_plugin_error_naming_plugin_and_hook(
    fake_backend, monkeypatch, hook
):
    def broken(self, *args):
        raise KeyError("driver table")

    monkeypatch.setattr(FakeBackend, hook, broken)
    reg = reg_of((ScaleKernel, {"n": [1]}))
    # default_target is asked only to compare a target with the device (see the next test)
    target = "fake:1" if hook == "default_target" else None
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect", target=target), reg)
    (failure,) = info.value.report.failures
    assert isinstance(failure.exception, warmkit.PluginError)
    assert failure.exception.plugin == "fake" and failure.exception.hook == hook
    assert isinstance(failure.exception.cause, KeyError)
    assert f"backend plugin 'fake' in its {hook}() hook" in failure.error
    assert "'driver table'" in failure.error and failure.error.count("driver table") == 1


def test_a_device_warmup_does_not_ask_the_backend_for_its_default_target(
    fake_backend, monkeypatch
):
    # Triton's answer starts the CUDA driver on the warmup's thread (0.1 s on an H100) for a
    # comparison a device warmup does not make; a target's warmup still compares.
    asked = []
    monkeypatch.setattr(FakeBackend, "default_target", lambda self: asked.append(1) or "cpu")
    reg = reg_of((ScaleKernel, {"n": [1]}))
    assert warmkit.warmup(cfg(monitor="off"), reg).count("compiled") == 1
    assert asked == []
    warmkit.warmup(cfg(monitor="off", target="cpu"), reg)
    assert asked


def test_an_error_from_canonical_target_is_a_plugin_error(fake_backend, monkeypatch):
    calls = []

    def canonical_target(self, target):
        calls.append(target)
        if len(calls) > 1:  # the target check passed it; planning the group raises
            raise ZeroDivisionError("bad table")
        return target

    monkeypatch.setattr(FakeBackend, "canonical_target", canonical_target, raising=False)
    reg = reg_of((ScaleKernel, {"n": [1]}))
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect", target="fake:1"), reg)
    (failure,) = info.value.report.failures
    assert isinstance(failure.exception, warmkit.PluginError)
    assert "in its canonical_target() hook" in failure.error and "bad table" in failure.error


def test_a_compile_scope_that_raises_on_entry_is_a_plugin_error(fake_backend, monkeypatch):
    import contextlib

    @contextlib.contextmanager
    def compile_scope(self, target, jobs):
        raise OSError("no device nodes")
        yield

    monkeypatch.setattr(FakeBackend, "compile_scope", compile_scope)
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(cfg(on_error="collect"), reg_of((ScaleKernel, {"n": [1, 2]})))
    failures = info.value.report.failures
    assert len(failures) == 2 and all(
        isinstance(f.exception, warmkit.PluginError) for f in failures
    )
    assert "in its compile_scope() hook" in failures[0].error
    assert "no device nodes" in failures[0].error


def test_an_error_from_specializations_in_coverage_is_a_plugin_error(fake_backend, monkeypatch):
    from warmkit._registry.coverage import coverage

    def specializations(self, kernel, keys, target):
        raise AttributeError("no specializer")

    monkeypatch.setattr(FakeBackend, "specializations", specializations, raising=False)
    with pytest.raises(warmkit.PluginError) as info:
        coverage(reg_of((ScaleKernel, {"n": [1]})), [], target="fake:1")
    assert info.value.plugin == "fake" and info.value.hook == "specializations"
    assert "in its specializations() hook" in str(info.value) and "no specializer" in str(
        info.value
    )
