"""Shared fixtures of the core's tests: isolation from the environment, and fake plugin sites."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import warmkit
from warmkit import monitor
from warmkit.testing import isolated_backends

from . import _kernels


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No WARMKIT_* variable, monitor off, no backend loaded by the test left behind."""
    import os

    for var in list(os.environ):
        if var.startswith("WARMKIT_") or var == "RANK":
            monkeypatch.delenv(var)
    monitor.disarm()
    monitor.clear()
    _kernels.reset()
    with isolated_backends():
        yield
        monitor.disarm()
        monitor.clear()
    _kernels.reset()


@pytest.fixture
def core_stubs() -> Iterator[None]:
    """The core's ``tilelang``/``cutedsl`` stubs loaded, even where their real plugins are installed."""
    from warmkit._plugin.contract import CuteDSLStubBackend, TileLangStubBackend
    from warmkit.testing import backend_override

    with (
        backend_override("tilelang", TileLangStubBackend()),
        backend_override("cutedsl", CuteDSLStubBackend()),
    ):
        yield


class PluginSite:
    """A directory on ``sys.path`` holding hand-made distributions (``*.dist-info``) and modules.

    ``importlib.metadata`` reads it like any installed distribution, so discovery
    runs its real code path: fresh entry points, distribution names and versions.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: set[str] = set()

    def add_dist(
        self,
        name: str,
        version: str = "1.0",
        *,
        backends: Mapping[str, str] | None = None,
        kernels: Mapping[str, str] | None = None,
    ) -> Path:
        info = self.root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
        )
        self.write_entry_points(info, backends=backends, kernels=kernels)
        importlib.invalidate_caches()
        return info

    @staticmethod
    def write_entry_points(
        info: Path,
        *,
        backends: Mapping[str, str] | None = None,
        kernels: Mapping[str, str] | None = None,
    ) -> None:
        text = ""
        for group, eps in (("warmkit.backends", backends), ("warmkit.kernels", kernels)):
            if eps:
                text += f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
        (info / "entry_points.txt").write_text(text, encoding="utf-8")

    def add_module(self, name: str, source: str) -> None:
        (self.root / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        self.modules.add(name)
        importlib.invalidate_caches()


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    site = PluginSite(root)
    yield site
    for name in site.modules:
        sys.modules.pop(name, None)


@pytest.fixture
def fake_backend(plugin_site: PluginSite) -> PluginSite:
    """Backend ``fake`` (``_kernels.FakeBackend``) installed as distribution ``fake-backend 2.0``."""
    plugin_site.add_dist(
        "fake-backend", "2.0", backends={"fake": f"{_kernels.__name__}:FakeBackend"}
    )
    return plugin_site


@pytest.fixture
def registry() -> Iterator[warmkit.WarmupRegistry]:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        yield reg
