"""Shared fixtures of the TileLang backend's tests: a private TileLang cache, hooks and monitor reset.

These tests need TileLang (``pip install 'warmkit-tilelang[tilelang]'``, part of
the README's test command). Without it each one is skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from warmkit import monitor

pytest.importorskip(
    "tilelang", reason="TileLang is not installed; run: pip install 'warmkit-tilelang[tilelang]'"
)

from warmkit_tilelang import TiledGemm, TileLangBackend, _hooks

REPO = Path(__file__).resolve().parents[2]
#: An ahead-of-time target that is not this host's GPU (the core turns a target equal to
#: the local device into a device warmup).
AOT_TARGET = "cuda:100" if TileLangBackend().default_target() == "cuda:90" else "cuda:90"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped where CUDA is absent")


@pytest.fixture(autouse=True)
def tilelang_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh TILELANG_CACHE_DIR per test, nothing in memory; monitor off; hooks removed after."""
    from warmkit_tilelang import _tilelang_api as api

    cache = tmp_path / "tilelang-cache"
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(cache))
    for var in list(os.environ):
        if var.startswith("WARMKIT_"):
            monkeypatch.delenv(var)
    monitor.disarm()
    monitor.clear()
    api.forget_in_memory()
    TiledGemm.clear_executors()
    yield cache
    monitor.disarm()
    monitor.clear()
    _hooks.uninstall()
    assert not _hooks.installed(), "a test left warmkit's TileLang hooks installed"
    api.forget_in_memory()
    TiledGemm.clear_executors()


def run_child(code: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``cache`` as its TileLang cache."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    path = os.pathsep.join(p for p in (str(REPO / "tests"), os.environ.get("PYTHONPATH")) if p)
    child_env.update(TILELANG_CACHE_DIR=str(cache), PYTHONPATH=path, **env)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc
