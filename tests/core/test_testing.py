"""``warmkit.testing``: a backend object under a name for one block, and isolation of loaded backends."""

from __future__ import annotations

import pytest

import warmkit
from warmkit import WarmupConfig, monitor
from warmkit._plugin import discovery as plugins
from warmkit.testing import backend_override, isolated_backends, unload_backend

from ._kernels import FakeBackend, ScaleKernel


class Recording(FakeBackend):
    """A backend of the test's own: it records what it was asked to compile."""

    name = ""  # backend_override names it

    def __init__(self) -> None:
        super().__init__()
        self.compiled: list[object] = []

    def compile(self, kernel, key, target):
        self.compiled.append(key)
        return super().compile(kernel, key, target)


def test_the_override_serves_every_compile_in_the_block_then_the_entry_point_again(fake_backend):
    original = plugins.get_backend("fake")
    mine = Recording()
    reg = warmkit.WarmupRegistry()
    reg.add(ScaleKernel, n=[8, 16])
    with backend_override("fake", mine) as got:
        assert got is mine and mine.name == "fake"
        assert plugins.get_backend("fake") is mine
        report = warmkit.warmup(WarmupConfig(progress="off", monitor="off"), reg)
    assert [e.status for e in report.entries] == ["compiled", "compiled"]
    assert len(mine.compiled) == 2 and len(set(mine.compiled)) == 2
    assert plugins.get_backend("fake") is original


def test_the_override_of_a_name_nothing_provides_is_removed_after(fake_backend):
    with backend_override("nowhere", Recording()):
        assert plugins.get_backend("nowhere").name == "nowhere"
    with pytest.raises(warmkit.BackendUnavailableError, match="nowhere"):
        plugins.get_backend("nowhere")


def test_an_object_that_is_not_a_backend_is_refused_naming_what_it_lacks():
    class Half:
        def available(self):
            return warmkit.BackendStatus(ok=True)

        compile = "not callable"

    with pytest.raises(TypeError, match=r"Half is not a warmkit backend.*default_target.*compile"):
        backend_override("half", Half()).__enter__()
    assert "half" not in plugins.loaded_backend_table()


def test_an_armed_monitor_hooks_the_override_up_and_unhooks_it_after():
    mine = Recording()
    mine.monitor_calls = []
    monitor.arm("warn")
    try:
        with backend_override("rec", mine):
            assert mine.monitor_calls == ["install"]
        assert mine.monitor_calls == ["install", "uninstall"]
    finally:
        monitor.disarm()


def test_unload_makes_the_next_use_load_the_entry_point_again(fake_backend):
    first = plugins.get_backend("fake")
    unload_backend("fake")
    assert "fake" not in plugins.loaded_backend_table()
    assert plugins.get_backend("fake") is not first


def test_isolated_backends_restores_whatever_the_block_did(fake_backend):
    before = plugins.get_backend("fake")
    with isolated_backends():
        unload_backend("fake")
        plugins.swap_backend("extra", Recording())
        assert plugins.get_backend("fake") is not before
    table = plugins.loaded_backend_table()
    assert table["fake"] is before and "extra" not in table
