"""``--json`` prints one JSON document on stdout, even when TileLang logs while compiling (issue 29).

TileLang's logger writes its INFO lines ("TileLang begins to compile kernel
...") to ``sys.stdout`` through tqdm; under ``--json`` they go to stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from warmkit_tilelang import TiledGemm

import warmkit

from .conftest import AOT_TARGET, REPO


def test_warmup_json_is_pure_json_while_tilelang_logs_to_stdout(tmp_path: Path) -> None:
    reg = warmkit.WarmupRegistry()
    reg.add(TiledGemm, m=[64], n=128, k=64)
    manifest = reg.save(tmp_path / "warmup.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TILELANG_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", "warmup", str(manifest), "--target", AOT_TARGET]
        + ["--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)  # the whole of stdout: nothing before or after the document
    assert [e["status"] for e in data["entries"]] == ["compiled"]
    assert "TileLang begins to compile kernel `gemm`" in proc.stderr  # not lost: on stderr
