"""``warmkit.monitor``: modes that take effect, allow(reason), events, per-(kernel, key) warnings."""

from __future__ import annotations

import logging
import threading

import pytest

import warmkit
from warmkit import RuntimeCompileError, monitor
from warmkit._plugin import discovery as plugins

from . import _kernels
from ._kernels import FakeBackend, PyKernel, ScaleKernel

P = PyKernel.CompileKey


def warnings_in(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "warmkit.monitor"
    ]


def test_starts_off_and_misses_are_silent(caplog):
    assert monitor.mode() == "off"
    PyKernel().get_or_compile(P(1, False))
    assert monitor.events() == ()
    assert warnings_in(caplog) == []


def test_mode_changes_take_effect_every_time(caplog):
    k = PyKernel()
    monitor.arm("warn")
    k.get_or_compile(P(1, False))
    assert len(warnings_in(caplog)) == 1
    monitor.arm("error")
    with pytest.raises(RuntimeCompileError):
        k.get_or_compile(P(2, False))
    monitor.arm("warn")  # vLLM ignored changes after the first activation
    k.get_or_compile(P(3, False))
    assert len(warnings_in(caplog)) == 2
    monitor.disarm()
    k.get_or_compile(P(4, False))
    assert len(warnings_in(caplog)) == 2
    monitor.arm("error")
    with pytest.raises(RuntimeCompileError):
        k.get_or_compile(P(5, False))
    monitor.arm("off")
    assert monitor.mode() == "off"
    k.get_or_compile(P(5, False))
    assert _kernels.compiled_keys() == [P(1, False), P(3, False), P(4, False), P(5, False)]


def test_armed_for_a_recording_alone_a_compile_is_recorded_not_warned_about(caplog):
    """`warmkit record` arms the monitor so that the recording sees compiles: with no warmup in
    the process they are what it records, not stalls (INFO); after a warmup, warnings again."""
    caplog.set_level(logging.INFO, logger="warmkit.monitor")
    k = PyKernel()
    monitor._arm_for_recording()
    k.get_or_compile(P(1, False))
    assert warnings_in(caplog) == []
    assert [e.key for e in monitor.events()] == [P(1, False)]  # still recorded
    assert any("recorded a runtime compile" in r.getMessage() for r in caplog.records)
    warmkit.warmup(warmkit.WarmupConfig(monitor="warn", progress="off"), warmkit.WarmupRegistry())
    k.get_or_compile(P(2, False))
    assert len(warnings_in(caplog)) == 1 and "after warmup" in warnings_in(caplog)[0]


def test_unknown_mode_is_value_error():
    with pytest.raises(ValueError, match="off, warn, error"):
        monitor.arm("loud")
    assert monitor.mode() == "off"


def test_error_mode_raises_before_compiling_and_records_a_refusal():
    monitor.arm("error")
    with pytest.raises(RuntimeCompileError) as info:
        ScaleKernel().get_or_compile(ScaleKernel.CompileKey(64, "f16"), runtime_context="req 1")
    err = info.value
    assert (err.kernel, err.backend, err.context) == (ScaleKernel.name, "fake", "req 1")
    assert _kernels.COMPILES == []
    assert "fake" not in plugins.loaded_backend_table()  # not even the backend was touched
    assert "allow(" in str(err) and ScaleKernel.name in str(err)
    (event,) = monitor.events()
    assert (event.kind, event.mode, event.seconds, event.allowed) == ("refused", "error", 0.0, None)


def test_warn_logs_once_per_kernel_and_key_not_once_per_kernel(caplog):
    monitor.arm("warn")
    for _ in range(3):
        monitor.on_miss(kernel="k", key=("a", 1), backend="fake")
    monitor.on_miss(kernel="k", key=("a", 2), backend="fake")
    monitor.on_miss(kernel="other", key=("a", 1), backend="fake", context="ctx-7")
    got = warnings_in(caplog)
    assert len(got) == 3
    assert "('a', 2)" in got[1]
    assert "ctx-7" in got[2]


def test_warn_carries_the_miss_reason_computed_once_and_only_for_the_warning(caplog):
    calls = []

    def why():
        calls.append(1)
        return "nearest entry E differs in key: K(1) there, K(2) here"

    monitor.arm("warn")
    monitor.on_miss(kernel="k", key=("a", 1), backend="fake", why=why)
    monitor.on_miss(kernel="k", key=("a", 1), backend="fake", why=why)  # already warned
    (got,) = warnings_in(caplog)
    assert got.endswith(
        "to avoid this stall (why: nearest entry E differs in key: K(1) there, K(2) here)"
    )
    assert calls == [1]
    monitor.disarm()
    monitor.on_miss(kernel="k", key=("b", 1), backend="fake", why=why)
    assert calls == [1]


def test_warn_mode_handles_unhashable_backend_keys(caplog):
    monitor.arm("warn")
    monitor.on_miss(kernel="raw_fn", key=[1, {"a": 2}], backend="triton")
    monitor.on_miss(kernel="raw_fn", key=[1, {"a": 2}], backend="triton")
    assert len(warnings_in(caplog)) == 1


def test_warn_mode_records_each_runtime_compile():
    monitor.arm("warn")
    k = PyKernel()
    k.get_or_compile(P(1, True), runtime_context={"request": 3})
    k.get_or_compile(P(1, True))  # a hit: no event
    (event,) = monitor.events()
    assert isinstance(event, monitor.MonitorEvent)
    assert (event.kernel, event.key, event.backend, event.context, event.kind, event.mode) == (
        PyKernel.name,
        P(1, True),
        None,
        {"request": 3},
        "compile",
        "warn",
    )
    assert event.seconds >= 0 and event.timestamp > 0


def test_allow_permits_a_compile_in_error_mode_and_records_the_reason():
    monitor.arm("error")
    with monitor.allow("LoRA adapter loaded at runtime"):
        PyKernel().get_or_compile(P(8, False))
    assert _kernels.compiled_keys() == [P(8, False)]
    (event,) = monitor.events()
    assert (event.kind, event.allowed) == ("compile", "LoRA adapter loaded at runtime")
    with pytest.raises(RuntimeCompileError):  # the window is closed again
        PyKernel().get_or_compile(P(9, False))


def test_allow_nests_and_is_local_to_the_thread():
    monitor.arm("error")
    errors = []

    def other_thread():
        try:
            PyKernel().get_or_compile(P(2, False))
        except RuntimeCompileError as exc:
            errors.append(exc)

    with monitor.allow("outer"):
        with monitor.allow("inner"):
            PyKernel().get_or_compile(P(1, False))
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        PyKernel().get_or_compile(P(3, False))
    assert len(errors) == 1
    assert [e.allowed for e in monitor.events() if e.kind == "compile"] == ["inner", "outer"]


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_allow_needs_a_reason(reason):
    with pytest.raises(ValueError, match="reason"), monitor.allow(reason):
        pass


def test_events_clear_and_record():
    assert monitor.record(kernel="k", key=1, backend="b", seconds=0.1, kind="compile") is None
    monitor.arm("warn")
    event = monitor.record(kernel="k", key=1, backend="b", seconds=0.25, kind="disk_hit")
    assert monitor.events() == (event,)
    assert (event.kind, event.seconds, event.context) == ("disk_hit", 0.25, None)
    monitor.disarm()
    assert monitor.events() == (event,)  # disarming keeps the log
    monitor.clear()
    assert monitor.events() == ()


def test_arm_installs_and_disarm_uninstalls_backend_hooks(fake_backend):
    plugins.get_backend("fake")
    monitor.arm("warn")
    monitor.arm("error")
    monitor.disarm()
    assert FakeBackend.monitor_calls == ["install", "install", "uninstall"]


def test_a_backend_loaded_after_arming_gets_its_hooks(fake_backend):
    monitor.arm("warn")
    plugins.get_backend("fake")
    assert FakeBackend.monitor_calls == ["install"]


def test_managed_compiles_are_marked_so_backend_hooks_skip_them():
    seen = []
    PyKernel.hook = lambda key: seen.append(monitor.in_managed_compile())
    assert monitor.in_managed_compile() is False
    PyKernel().get_or_compile(P(1, False))
    for jobs in (1, 2):  # in the calling thread, and in the runner's threads
        warmkit.warmup(
            warmkit.WarmupConfig(progress="off", jobs=jobs),
            _registry_of(PyKernel, n=[2 * jobs, 2 * jobs + 1]),
        )
    assert monitor.in_managed_compile() is False  # warmup's scope (one per group) is undone
    PyKernel().get_or_compile(P(9, False))
    assert seen == [True] * 6
    assert monitor.in_managed_compile() is False


def _registry_of(kernel, **space):
    reg = warmkit.WarmupRegistry()
    reg.add(kernel, **space)
    return reg
