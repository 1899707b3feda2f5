"""Smoke runs of the demo runner and the throughput benchmark, so neither rots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton-cache"), WARMKIT_PROGRESS="off")
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_serve_demo(tmp_path: Path) -> None:
    proc = _run(
        [
            str(ROOT / "examples" / "serve.py"),
            "--steps",
            "40",
            "--seed",
            "3",
            "--manifest-out",
            str(tmp_path / "manifest.json"),
            "--json",
            str(tmp_path / "summary.json"),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["runtime_compile_events"] == 0
    assert summary["steps"] == 40
    assert summary["error"] is None
    # 3 groups (one NONE) x 2 DCP ranks + 2 placeholders: 4 distinct keys.
    assert summary["block_tables_built"] == 8
    assert summary["registrations"] == 4
    assert len(summary["keys"]) == 4
    assert summary["warmup"]["totals"]["failed"] == 0
    assert summary["checked_steps"] >= 4
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {r["kernel"] for r in manifest["registrations"]} == {"blocktable.slot_mapping"}
    if not torch.cuda.is_available():
        assert summary["implementation"] == ["reference"]
        assert summary["target"] == "cuda:90"
        assert "NO GPU" in proc.stdout and "REFERENCE" in proc.stdout
        assert "NO Triton kernel launched" in proc.stdout


def test_serve_rejects_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine]\nmax_num_reqs = 4\n")
    proc = _run([str(ROOT / "examples" / "serve.py"), "--config", str(bad)], tmp_path)
    assert proc.returncode != 0
    assert "malformed engine description" in proc.stderr


def test_throughput_benchmark_tiny(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = _run(
        [str(ROOT / "benchmarks" / "slot_mapping_throughput.py"), "--tiny", "--out", str(out)],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    cases = doc["results"]["cases"]
    assert {c["tokens"] for c in cases} == {1, 256}
    assert all("reference" in c and "torch" in c for c in cases)
    if not torch.cuda.is_available():
        assert "NO GPU" in proc.stdout
        assert all("kernel" not in c for c in cases)
    else:
        assert all(c["kernel_equals_reference"] for c in cases)


def test_serve_says_a_bad_target_or_variable_in_one_line(tmp_path: Path) -> None:
    serve = str(ROOT / "examples" / "serve.py")
    for args, extra, first in (
        (["--target", "cuda:999"], {}, "serve.py: error: target 'cuda:999' (backend 'triton')"),
        ([], {"WARMKIT_JOBS": "abc"}, "serve.py: error: environment variable WARMKIT_JOBS='abc'"),
    ):
        os.environ.update(extra)
        try:
            proc = _run([serve, "--steps", "1", *args], tmp_path)
        finally:
            for k in extra:
                del os.environ[k]
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
        assert len(lines) == 1 and lines[0].startswith(first), proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
