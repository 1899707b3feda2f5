"""``warmkit coverage`` for the core's own key kernels: a declared manifest against a recorded run.

The Triton backend's version (raw specializations, missed variants):
``tests/triton_backend/test_coverage.py``. Here a run records the keys it
compiled at runtime (``WarmupConfig(record=...)``), and the CLI is called through
the console script's entry point.
"""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import warmkit

from . import _kernels

K = _kernels.PyKernel.CompileKey


@pytest.fixture
def run_manifest(tmp_path: Path, registry: warmkit.WarmupRegistry) -> Path:
    """A run that warmed n=1 and then compiled n=3 and (n=7, flag) at runtime."""
    path = tmp_path / "run.json"
    kernel = _kernels.PyKernel()
    kernel.register_warmup(n=[1])
    warmkit.warmup(warmkit.WarmupConfig(monitor="warn", record=path, progress="off"), registry)
    kernel.get_or_compile(K(3, False))
    kernel.get_or_compile(K(7, True))
    warmkit.monitor.disarm()
    assert [e.spec["key"] for e in warmkit.read_recorded(path)] == [
        {"n": 3, "flag": False},
        {"n": 7, "flag": True},
    ]
    return path


def declared(tmp_path: Path, name: str, **space: object) -> Path:
    reg = warmkit.WarmupRegistry()
    reg.add(_kernels.PyKernel, **space)
    return reg.save(tmp_path / name)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    (script,) = entry_points(group="console_scripts", name="warmkit")
    code = script.load()(list(argv))
    return code, capsys.readouterr().out


def test_a_declared_space_covers_the_keys_it_declares_and_names_the_missed_key(
    tmp_path, capsys, run_manifest
):
    deploy = declared(tmp_path, "deploy.json", n=[1, 2, 3])
    code, out = cli(capsys, "coverage", str(deploy), "--recorded", str(run_manifest), "--json")
    assert code == 1  # something the run compiled is not declared
    data = json.loads(out)
    assert (data["ok"], data["total"], data["covered"]) == (False, 2, 1)
    (missed,) = data["missed"]
    assert missed["kernel"] == _kernels.PyKernel.name and missed["kind"] == "key"
    assert missed["spec"] == {"key": {"n": 7, "flag": True}}
    # explained against the nearest declared key, field by field
    assert missed["variants"] == ["flag: true (declared false)", "n: 7 (declared 1, 2, 3)"]
    code, out = cli(capsys, "coverage", str(deploy), "--recorded", str(run_manifest))
    assert code == 1 and "coverage: 1 of 2" in out and "MISSED" in out and "'n': 7" in out
    assert "    missed variant: n: 7 (declared 1, 2, 3)" in out.splitlines()


def test_the_widened_space_or_the_run_itself_covers_the_whole_run(tmp_path, capsys, run_manifest):
    wide = declared(tmp_path, "wide.json", n=[3, 7], flag=[False, True])
    code, out = cli(capsys, "coverage", str(wide), "--recorded", str(run_manifest))
    assert code == 0 and "coverage: 2 of 2" in out
    # a manifest holding the run's own recorded entries covers it
    code, out = cli(capsys, "coverage", str(run_manifest), "--recorded", str(run_manifest))
    assert code == 0 and "coverage: 2 of 2" in out
