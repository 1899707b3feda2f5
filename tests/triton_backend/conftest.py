"""Shared fixtures of the Triton backend's tests: a private Triton cache per test, hooks restored."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from triton import knobs
from triton.runtime.driver import driver
from warmkit_triton import _hooks

from warmkit import monitor

from . import _kernels


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
    saved_active = driver._active
    with knobs.runtime.scope(), knobs.compilation.scope():
        yield cache
        monitor.disarm()
        monitor.clear()
        _hooks.uninstall()
    _kernels.forget_all()
    assert driver._active is saved_active, "a test left Triton's active driver replaced"
