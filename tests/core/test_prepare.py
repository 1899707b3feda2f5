"""``warmkit.prepare()``: the one-time setup in a background thread, joined by ``warmup``."""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import ClassVar

import pytest

import warmkit
from warmkit import WarmupConfig, WarmupError, WarmupRegistry
from warmkit.testing import backend_override

from ._kernels import FakeBackend, PyKernel, ScaleKernel

#: prepare() only for the fake backend: the installed ones (Triton) are not the subject here.
FAKE = WarmupConfig(backends=("fake",), jobs=1, progress="off")


class PreparingBackend(FakeBackend):
    """The fake backend with a setup that logs, may wait for ``release`` and may raise."""

    events: ClassVar[list[tuple[str, str]]] = []
    release: ClassVar[threading.Event | None] = None
    error: ClassVar[Exception | None] = None

    def prepare(self, target: str | None) -> None:
        if self.release is not None:
            assert self.release.wait(10)
        if self.error is not None:
            raise self.error
        self.events.append(("setup", threading.current_thread().name))

    def compile(self, kernel, key, target):
        self.events.append(("compile", threading.current_thread().name))
        return super().compile(kernel, key, target)


@pytest.fixture
def backend():
    PreparingBackend.events, PreparingBackend.release, PreparingBackend.error = [], None, None
    with backend_override("fake", PreparingBackend()) as b:
        yield b


def registry(*kernels) -> WarmupRegistry:
    reg = WarmupRegistry()
    for kernel in kernels:
        if kernel is ScaleKernel:
            reg.add(ScaleKernel, n=[1, 8])
        else:
            reg.add(kernel, n=[3])
    return reg


def test_the_setup_runs_in_a_background_thread_and_warmup_waits_for_it(backend, caplog):
    PreparingBackend.release = threading.Event()
    assert warmkit.prepare(FAKE) == 0  # jobs=1: no worker processes
    threading.Timer(0.3, PreparingBackend.release.set).start()
    t0 = time.perf_counter()
    with caplog.at_level("INFO", logger="warmkit._warmup.orchestrate"):
        report = warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    waits = [r.getMessage() for r in caplog.records if "for the setup" in r.getMessage()]
    assert len(waits) == 1
    waited = float(waits[0].split("waited ")[1].split(" s")[0])
    assert waited >= 0.25
    assert time.perf_counter() - t0 >= 0.3
    # the wait is the warmup's, not hidden (the timer started before the warmup did, so the
    # warmup itself can be a little under 0.3 s: 0.295 s in CI)
    assert report.seconds >= waited
    assert [e.status for e in report.entries] == ["compiled", "compiled"]
    kinds = [kind for kind, _ in PreparingBackend.events]
    assert kinds == ["setup", "compile", "compile"]  # set up before its first compile
    assert PreparingBackend.events[0][1] == "warmkit-prepare"
    assert PreparingBackend.events[1][1] == threading.current_thread().name


def test_prepare_is_idempotent_until_a_warmup_joins_it(backend):
    PreparingBackend.release = threading.Event()
    warmkit.prepare(FAKE)
    warmkit.prepare(FAKE)
    PreparingBackend.release.set()
    warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert [k for k, _ in PreparingBackend.events].count("setup") == 1
    warmkit.prepare(FAKE)  # after the join: a new setup
    warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert [k for k, _ in PreparingBackend.events].count("setup") == 2


class OtherBackend(FakeBackend):
    """A second backend whose setup only logs: ``PreparingBackend``'s events, under its own name."""

    def prepare(self, target: str | None) -> None:
        PreparingBackend.events.append(("other setup", threading.current_thread().name))


@pytest.fixture
def discovered(monkeypatch):
    """``prepare()`` discovers 'early' then 'fake' (as installed plugins), named in no config."""
    from warmkit._plugin import discovery

    infos = [
        discovery.PluginInfo(name, discovery.BACKENDS_GROUP, f"wk_{name}:Backend", None, None)
        for name in ("early", "fake")
    ]
    monkeypatch.setattr(discovery, "discover", lambda group, **kw: list(infos))
    return WarmupConfig(jobs=1)


def test_imported_dsls_go_first_and_a_joining_warmup_leaves_the_rest_alone(
    backend, discovered, monkeypatch
):
    # 'fake' is an imported module here, 'early' is not: fake's setup goes first though
    # discovered second; the warmup joins while it runs, so early's setup never starts (the
    # warmup has no key of it: it would only hold the GIL meanwhile).
    monkeypatch.setitem(sys.modules, "fake", types.ModuleType("fake"))
    PreparingBackend.release = threading.Event()
    with backend_override("early", OtherBackend()):
        warmkit.prepare(discovered)
        threading.Timer(0.2, PreparingBackend.release.set).start()
        report = warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
        assert [e.status for e in report.entries] == ["compiled", "compiled"]
        assert [k for k, _ in PreparingBackend.events] == ["setup", "compile", "compile"]
        # the stop was that warmup's: a later prepare() sets both up, in the order of need
        warmkit.prepare(discovered)
        deadline = time.monotonic() + 10
        while ("other setup" not in dict(PreparingBackend.events)) and time.monotonic() < deadline:
            time.sleep(0.01)  # the engine's own work, before its warmup joins
        warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    setups = [k for k, _ in PreparingBackend.events if "setup" in k]
    assert setups == ["setup", "setup", "other setup"]


class SlowOtherBackend(FakeBackend):
    """A second backend whose setup says it started, then waits for ``PreparingBackend.release``."""

    started: ClassVar[threading.Event] = threading.Event()

    def prepare(self, target: str | None) -> None:
        self.started.set()
        assert PreparingBackend.release is not None and PreparingBackend.release.wait(10)
        PreparingBackend.events.append(("other setup", threading.current_thread().name))


def test_a_joining_warmup_still_waits_for_the_setup_of_imported_dsls(
    backend, discovered, monkeypatch
):
    PreparingBackend.release = threading.Event()
    SlowOtherBackend.started = threading.Event()
    with backend_override("early", SlowOtherBackend()):
        warmkit.prepare(discovered)  # nothing imported
        assert SlowOtherBackend.started.wait(10)  # 'early' first, as discovered
        # the engine imports fake's DSL meanwhile, then warms up while early's setup runs;
        # fake's, imported but not started when the warmup joined, is what the warmup waits for
        monkeypatch.setitem(sys.modules, "fake", types.ModuleType("fake"))
        threading.Timer(0.2, PreparingBackend.release.set).start()
        warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    kinds = [k for k, _ in PreparingBackend.events]
    assert kinds == ["other setup", "setup", "compile", "compile"]


@pytest.mark.parametrize("named", [True, False], ids=["named", "discovered"])
def test_a_warmup_that_joins_first_waits_only_for_named_backends(backend, monkeypatch, named):
    # The warmup joins before the thread took any backend (a loaded host: seen in CI). 'fake'
    # is no module: named in the config, its setup still runs first (the engine's word that it
    # has keys); only discovered, it is left to the warmup, which compiles without it.
    from warmkit._warmup import prepare as _prepare

    original = _prepare._setup

    def joined_first(target, backends, stop):
        stop.set()
        original(target, backends, stop)

    monkeypatch.setattr(_prepare, "_setup", joined_first)
    if not named:
        from warmkit._plugin import discovery

        info = discovery.PluginInfo("fake", discovery.BACKENDS_GROUP, "wk_fake:B", None, None)
        monkeypatch.setattr(discovery, "discover", lambda group, **kw: [info])
    warmkit.prepare(FAKE if named else WarmupConfig(jobs=1))
    warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    kinds = [k for k, _ in PreparingBackend.events]
    assert kinds == (["setup", "compile", "compile"] if named else ["compile", "compile"])


def test_a_failed_setup_fails_that_backends_keys_naming_the_plugin(backend):
    PreparingBackend.error = RuntimeError("setup exploded")
    warmkit.prepare(FAKE)
    with pytest.raises(WarmupError) as info:
        warmkit.warmup(
            WarmupConfig(progress="off", on_error="collect"), registry(ScaleKernel, PyKernel)
        )
    report = info.value.report
    by_kernel = {(e.kernel, e.status) for e in report.entries}
    # the other kernel (no backend) compiled: one backend's setup fails only its keys
    assert by_kernel == {(ScaleKernel.name, "failed"), (PyKernel.name, "compiled")}
    failed = [e for e in report.entries if e.status == "failed"]
    assert len(failed) == 2
    for entry in failed:
        assert "setup exploded" in entry.error
        assert "backend plugin 'fake'" in entry.error and "warmkit.prepare()" in entry.error
        assert isinstance(entry.exception, warmkit.PluginError)  # named: plugin and hook
        assert entry.exception.cause is PreparingBackend.error and "prepare() hook" in entry.error
    assert report.monitor == "off"  # a failed warmup arms nothing
    # the failure belonged to that warmup: the next one runs normally
    PreparingBackend.error = None
    again = warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert [e.status for e in again.entries] == ["compiled", "compiled"]


def test_a_backend_without_setup_and_one_that_cannot_load_are_left_alone():
    # FakeBackend has no prepare(); 'nonexistent' is no installed backend: neither fails
    # anything, and the warmup reports what it would have without prepare().
    with backend_override("fake", FakeBackend()):
        warmkit.prepare(WarmupConfig(backends=("fake", "nonexistent"), jobs=1))
        report = warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert [e.status for e in report.entries] == ["compiled", "compiled"]


def test_disabled_prepare_does_nothing(backend):
    assert warmkit.prepare(WarmupConfig(enabled=False, backends=("fake",))) == 0
    warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert "setup" not in [k for k, _ in PreparingBackend.events]


def test_the_environment_form_reads_warmkit_variables(backend, monkeypatch):
    monkeypatch.setenv("WARMKIT_BACKENDS", "fake")
    assert warmkit.prepare(2) == 0  # auto: 2 jobs stay on threads, no worker processes
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "off")  # none whatever the jobs
    assert warmkit.prepare(4) == 0
    warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert PreparingBackend.events[0][0] == "setup"


def test_prepares_is_a_capability():
    assert isinstance(PreparingBackend(), warmkit.Prepares)
    assert not isinstance(FakeBackend(), warmkit.Prepares)


def test_a_setup_failure_for_another_target_fails_nothing_here(backend, caplog):
    PreparingBackend.error = RuntimeError("sm_100 is unknown here")
    warmkit.prepare(WarmupConfig(backends=("fake",), jobs=1, progress="off", target="fake:100"))
    with caplog.at_level("WARNING", logger="warmkit._warmup.prepare"):
        report = warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))
    assert [e.status for e in report.entries] == ["compiled", "compiled"]
    assert any("fake:100" in r.getMessage() and "sm_100" in r.getMessage() for r in caplog.records)


def test_prepare_takes_jobs_by_keyword(backend, monkeypatch):
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "off")
    assert warmkit.prepare(jobs=8) == 0  # processes off: the setup only, and no TypeError
    warmkit.warmup(WarmupConfig(progress="off"), registry(ScaleKernel))


class WorkerRefusing(PreparingBackend):
    """Compiles in workers, but cannot say for which target: setting the workers up fails."""

    def worker_target(self, target):
        raise RuntimeError("no worker target here")


def test_a_failure_setting_up_the_workers_is_a_warning_not_a_failed_key(caplog):
    from warmkit._warmup import workers as _workers

    PreparingBackend.events, PreparingBackend.release, PreparingBackend.error = [], None, None
    _workers.start_workers(1, modules=[])  # a started pool: prepare() then sets it up
    try:
        with backend_override("fake", WorkerRefusing()), caplog.at_level("WARNING"):
            warmkit.prepare(FAKE)
            report = warmkit.warmup(WarmupConfig(progress="off", jobs=1), registry(ScaleKernel))
    finally:
        _workers.shutdown()
    assert [e.status for e in report.entries] == ["compiled", "compiled"]
    assert any(
        "compile workers for backend 'fake'" in r.getMessage()
        and "no worker target here" in r.getMessage()
        for r in caplog.records
    )


def test_the_workers_are_set_up_before_this_process_is(backend, monkeypatch):
    """The workers' setup runs in their processes meanwhile: it must not wait for this one's."""
    from warmkit._warmup import workers as _workers

    scheduled = []
    monkeypatch.setattr(
        _workers, "prepare_workers", lambda name, b, target: scheduled.append(name) or []
    )
    PreparingBackend.release = threading.Event()
    warmkit.prepare(FAKE)
    try:
        deadline = time.monotonic() + 10
        while not scheduled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert scheduled == ["fake"]  # while this process's setup still waits for release
        assert PreparingBackend.events == []
    finally:
        PreparingBackend.release.set()
        warmkit._warmup.prepare.join()
    assert [kind for kind, _ in PreparingBackend.events] == ["setup"]
