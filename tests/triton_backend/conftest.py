"""Shared fixtures of the Triton backend's tests: a private Triton cache per test, hooks restored."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from triton import knobs
from warmkit_triton import TritonBackend, _hooks
from warmkit_triton import _triton_api as api
from warmkit_triton._aot import _RoutingDriver

from warmkit import monitor

from . import _kernels

#: A target for ahead-of-time tests that go through ``warmkit.warmup``: not this host's GPU,
#: because the core turns a target equal to the local device into a device warmup.
AOT_TARGET = "cuda:80" if TritonBackend().default_target() == "cuda:90" else "cuda:90"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped where CUDA is absent")


@pytest.fixture(autouse=True)
def triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh TRITON_CACHE_DIR per test; monitor off; Triton's hook slots restored afterwards."""
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    for var in list(os.environ):
        if var.startswith("WARMKIT_"):
            monkeypatch.delenv(var)
    monitor.disarm()
    monitor.clear()
    _kernels.forget_all()
    saved_active = api.installed_driver()
    with knobs.runtime.scope(), knobs.compilation.scope():
        yield cache
        monitor.disarm()
        monitor.clear()
        _hooks.uninstall()
    _kernels.forget_all()
    # Triton creates its driver lazily on a GPU host; a test must never leave ours behind
    assert not isinstance(api.installed_driver(), _RoutingDriver), (
        "a test left the AOT driver installed"
    )
    assert saved_active is None or api.installed_driver() is saved_active, (
        "a test replaced Triton's driver"
    )
