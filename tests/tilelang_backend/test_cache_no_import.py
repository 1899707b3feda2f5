"""``warmkit cache`` commands import TileLang only when its cache has entries (issue 29, item 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = "sorted(m for m in ('tilelang', 'tvm', 'cutlass') if m in sys.modules)"


def _child(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TILELANG_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


def test_cache_paths_and_targets_before_the_import_are_tilelangs_own(tmp_path: Path) -> None:
    """The kernels' directory, the namespace and a target's ``arch`` are read before TileLang is
    imported: ``warmkit cache`` commands and a bundle's install need them, and the import took
    3.8 s of a 4-entry ``bundle install`` on an H100. This canary checks TileLang agrees."""
    caps = [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (12, 1)]
    read = "[str(api.kernels_dir()), api.cache_namespace(), [api.cuda_target(c)['arch'] for c in caps]]"
    code = (
        "import json, sys\n"
        "from warmkit_tilelang import _tilelang_api as api\n"
        f"caps = {caps!r}\n"
        f"before = {read}\n"
        "assert 'tilelang' not in sys.modules\n"
        "import tilelang\n"
        f"print(json.dumps([before, {read}]))\n"
    )
    proc = _child(code, tmp_path / "tl-cache")
    assert proc.returncode == 0, proc.stderr
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before == after and before[0].startswith(str((tmp_path / "tl-cache").resolve()))
    assert "sm_90a" in before[2] and "sm_80" in before[2]


def test_cache_info_and_verify_of_an_empty_tilelang_cache_import_no_dsl(tmp_path: Path) -> None:
    for command in ("info", "verify"):
        code = (
            "import json, sys\n"
            "from warmkit._cli.commands import main\n"
            f"rc = main(['cache', '{command}', '--json'])\n"
            f"print(json.dumps([rc, {HEAVY}]), file=sys.stderr)\n"
        )
        proc = _child(code, tmp_path / "empty")
        rc, heavy = json.loads(proc.stderr.strip().splitlines()[-1])
        assert (rc, heavy) == (0, []), proc.stderr
        assert "tilelang" in json.loads(proc.stdout)  # still listed, with its directory


def test_a_host_without_a_gpu_names_no_target_without_importing_torch(tmp_path: Path) -> None:
    """``bundle install`` and ``record`` ask every backend for this host's target: TileLang's
    answer came from torch, 1.5 s to import on a CPU host, only to learn there is no GPU."""
    from warmkit._plugin.contract import no_gpu_device

    if not no_gpu_device():  # pragma: no cover - a GPU host
        pytest.skip("this host has a GPU device node or a libcuda.so.1")
    code = (
        "import sys\n"
        "from warmkit_tilelang import TileLangBackend\n"
        "print(TileLangBackend().default_target(), 'torch' in sys.modules)\n"
    )
    proc = _child(code, tmp_path / "tl-cache")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", "False"]
