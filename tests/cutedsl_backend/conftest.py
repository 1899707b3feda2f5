"""Shared fixtures of the CuTe DSL backend's tests: a private export cache, monitor and hooks reset.

They need nvidia-cutlass-dsl (``pip install 'warmkit-cutedsl[cutedsl]'``, part of the
README's test command); without it each one is skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "nvidia_cutlass_dsl",
    reason="CuTe DSL is not installed; run: pip install 'warmkit-cutedsl[cutedsl]'",
)

from warmkit_cutedsl import CuteDSLBackend, VectorAdd, _hooks

from warmkit import monitor

REPO = Path(__file__).resolve().parents[2]
AOT_TARGET = "cuda:100" if CuteDSLBackend().default_target() == "cuda:90" else "cuda:90"


@pytest.fixture(autouse=True)
def cute_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh CUTE_DSL_CACHE_DIR per test; monitor off; hooks removed after."""
    monkeypatch.setenv("CUTE_DSL_CACHE_DIR", str(tmp_path / "cute-cache"))
    for var in list(os.environ):
        if var.startswith("WARMKIT_"):
            monkeypatch.delenv(var)
    monitor.disarm()
    monitor.clear()
    VectorAdd.clear_executors()
    yield CuteDSLBackend().cache_dir()
    monitor.disarm()
    monitor.clear()
    _hooks.uninstall()
    assert not _hooks.installed()
    VectorAdd.clear_executors()


def run_child(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["CUTE_DSL_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "tests"), env.get("PYTHONPATH")) if p
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc
