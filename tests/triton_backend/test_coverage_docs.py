"""``warmkit coverage`` on the docs' own autotuned and heuristic kernels (issue 29, item 1).

It crashed with ``TypeError: warmup_args does not give parameter 'BLOCK'``:
the declared side bound ``warmup_args`` to the bare ``@triton.jit`` function,
without the values the autotune configs and the heuristics supply.
"""

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
ROOT = HERE.parents[1]


def _cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *argv],
        cwd=HERE,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    out["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("docs-cov") / "cache")
    out["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return out


@pytest.fixture(scope="module")
def deploy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(HERE))
    try:
        from _docs_tuned import HeurCopy, TunedScale
    finally:
        sys.path.remove(str(HERE))
    reg = warmkit.WarmupRegistry()
    reg.add(TunedScale, n=[4096, 5000])  # as docs/kernel-contract.md registers them
    reg.add(HeurCopy, n=[100, 1000])
    return reg.save(tmp_path_factory.mktemp("docs-deploy") / "deploy.json")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Path:
    out = tmp_path_factory.mktemp("docs-run") / "run.json"
    child = [sys.executable, str(HERE / "_docs_tuned_child.py"), "100", "3000"]
    proc = _cli("record", "-o", str(out), "--", *child, env=env)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_kernels_are_the_docs_own() -> None:
    page = (ROOT / "docs" / "kernel-contract.md").read_text()
    blocks = (HERE / "_docs_tuned.py").read_text().split("\n\n\n")[1:]  # after the imports
    assert len(blocks) == 4
    for block in blocks:
        assert block.strip() in page, block[:200]


def test_cli_coverage_maps_every_config_and_heuristic_value(
    deploy: Path, run: Path, env: dict[str, str]
) -> None:
    proc = _cli("coverage", str(deploy), "--recorded", str(run), "--json", env=env)
    assert proc.returncode == 1, proc.stderr  # 1: something is missed, not 2: an error
    data = json.loads(proc.stdout)
    # the three autotune configs of n=4096 and the heuristic's BLOCK=128 of n=100 are
    # declared; n=3000 gives BLOCK=4096, which no declared key does
    assert (data["total"], data["covered"]) == (5, 4)
    (missed,) = data["missed"]
    assert missed["kernel"] == "_docs_tuned.heur_copy_kernel"
    assert missed["variants"] == ["BLOCK: =4096 (declared =128)"]
    text = _cli("coverage", str(deploy), "--recorded", str(run), env=env)
    assert text.returncode == 1, text.stderr
    assert "coverage: 4 of 5 recorded specialization(s) covered" in text.stdout
    assert "TypeError" not in text.stderr


def test_cli_coverage_of_the_declared_manifest_alone_is_clean(
    deploy: Path, env: dict[str, str]
) -> None:
    proc = _cli("coverage", str(deploy), "--recorded", str(deploy), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True, "total": 0, "covered": 0, "missed": []}


def test_a_declared_autotuned_key_covers_its_raw_autotune_on_any_gpu(deploy: Path) -> None:
    def tuned(n: int, gpu: str) -> warmkit.RecordedEntry:
        key = {"tuple": [n, "torch.float32", "torch.float32"]}
        return warmkit.RecordedEntry.make(
            backend="triton",
            kind="raw",
            kernel="_docs_tuned:tuned_scale_kernel",
            name="_docs_tuned.tuned_scale_kernel",
            spec={"autotune": {"key": key, "winner": {"kwargs": {"BLOCK": 512}}, "gpu": gpu}},
            target="cuda:90",
        )

    sys.path.insert(0, str(HERE))
    try:
        reg = warmkit.WarmupRegistry.load(deploy)
        report = coverage(reg, [tuned(4096, "NVIDIA H200"), tuned(5000, "NVIDIA H100"),
                                tuned(4097, "NVIDIA H200")])  # fmt: skip
    finally:
        sys.path.remove(str(HERE))
    assert (report.total, report.covered) == (3, 2)
    assert report.missed[0].entry.spec["autotune"]["key"]["tuple"][0] == 4097


def test_cli_coverage_refuses_an_unknown_target_like_every_command(
    deploy: Path, run: Path, env: dict[str, str]
) -> None:
    proc = _cli("coverage", str(deploy), "--recorded", str(run), "--target", "cuda:999", env=env)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        "warmkit: error: ValueError: target 'cuda:999' (backend 'triton'): unknown Triton target"
    )
    # the accepted targets are listed (which ones depends on the Triton wheel's ptxas)
    assert "cuda:90" in line.split("unknown Triton target", 1)[1]
