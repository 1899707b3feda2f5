"""On a GPU: record real launches in one process, replay them in the next: 0 runtime events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

HERE = Path(__file__).parent
CHILD = HERE / "_record_child.py"


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_record_then_replay_in_error_mode_sees_no_event(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    out = tmp_path / "run.json"
    proc = _run(["record", "-o", str(out), "--json", "--", sys.executable, str(CHILD), "cuda"], env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout[proc.stdout.index("{\n") :])
    # 3 (dtype, n) cases x (aligned, unaligned view) of axpy
    assert summary["specializations"] >= 6 and not summary["unreplayable"], summary
    proc = _run(
        ["run", "-m", str(out), "--monitor", "error", "--", sys.executable, str(CHILD), "cuda"], env
    )
    assert proc.returncode == 0, proc.stderr
    (events,) = [line for line in proc.stderr.splitlines() if line.startswith("EVENTS")]
    assert events.strip() == "EVENTS", proc.stderr
