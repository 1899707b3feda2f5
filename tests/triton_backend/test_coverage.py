"""warmkit coverage: declared spaces and recorded entries against what a run compiled (no GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import warmkit
from warmkit._registry.coverage import coverage

HERE = Path(__file__).parent
CHILD = HERE / "_record_child.py"


@pytest.fixture(scope="module")
def run_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cov")
    out = tmp / "run.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(tmp / "cache")
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", "record", "-o", str(out), "--"]
        + [sys.executable, str(CHILD), "aligned", "unaligned", "one", "fp16"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(HERE))
    from _record_declared import Axpy

    reg = warmkit.WarmupRegistry()
    reg.add(Axpy, dtype="float32", n=[64])
    return reg.save(tmp_path / "deploy.json")


def test_declared_space_covers_the_aligned_variant_and_names_what_it_misses(
    run_manifest: Path, declared: Path
) -> None:
    report = coverage(warmkit.WarmupRegistry.load(declared), warmkit.read_recorded(run_manifest))
    assert (report.total, report.covered, report.ok) == (4, 1, False)
    variants = sorted(v for m in report.missed for v in m.variants)
    assert variants == [
        "new dtype: out is *fp16 (declared *fp32)",
        "new dtype: x is *fp16 (declared *fp32)",
        "new dtype: y is *fp16 (declared *fp32)",
        "scalar equal to 1: n == 1 is a compile-time constant",
        "unaligned tensor: x is not 16-byte aligned (declared aligned)",
    ]


def test_cli_exit_codes_and_json(run_manifest: Path, declared: Path, tmp_path: Path) -> None:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warmkit",
            "coverage",
            str(declared),
            "--recorded",
            str(run_manifest),
        ]
        + ["--json"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["ok"], data["covered"], len(data["missed"])) == (False, 1, 3)
    # a manifest that recorded the same run covers all of it
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warmkit",
            "coverage",
            str(run_manifest),
            "--recorded",
            str(run_manifest),
        ],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 of 4" in proc.stdout


def test_declared_space_widened_to_the_missed_variants_covers_them(
    run_manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    from _record_declared import Axpy

    reg = warmkit.WarmupRegistry()
    reg.add(Axpy, dtype=["float32", "float16"], n=[64, 1])
    report = coverage(reg, warmkit.read_recorded(run_manifest))
    # fp16 and n == 1 are declared now; an unaligned tensor cannot be declared by this kernel
    assert report.covered == 3
    (missed,) = report.missed
    assert missed.variants == ("unaligned tensor: x is not 16-byte aligned (declared aligned)",)


def test_a_recorded_autotune_covers_only_its_own_autotune_key_and_gpu_model() -> None:
    def tuned(key: int, gpu: str, block: int) -> warmkit.RecordedEntry:
        winner = {"kwargs": {"BLOCK": block}, "num_warps": 4}
        return warmkit.RecordedEntry.make(
            backend="triton",
            kind="raw",
            kernel="_autotune_kernels:raw_tuned_add",
            name="_autotune_kernels.raw_tuned_add",
            spec={"autotune": {"key": {"tuple": [key]}, "winner": winner, "gpu": gpu}},
            target="cuda:90",
        )

    deploy = warmkit.WarmupRegistry()
    deploy.add_recorded(tuned(300, "NVIDIA H200", 64))
    report = coverage(deploy, [tuned(300, "NVIDIA H200", 128), tuned(301, "NVIDIA H200", 64),
                               tuned(300, "NVIDIA H100", 64)])  # fmt: skip
    assert report.covered == 1  # another winner for the same key and GPU is still covered
    missed = sorted(
        (m.entry.spec["autotune"]["key"]["tuple"][0], m.entry.spec["autotune"]["gpu"])
        for m in report.missed
    )
    assert missed == [(300, "NVIDIA H100"), (301, "NVIDIA H200")]
