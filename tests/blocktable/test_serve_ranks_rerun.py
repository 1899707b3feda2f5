"""``serve_ranks.py`` on a store an earlier run filled says why it cannot measure, before any rank
starts, and ``warmkit cache clear-store`` empties the store (issue 29)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warmkit._cache.stores.base import entry_meta, open_store

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "serve_ranks.py"


def _filled_store(path: Path) -> str:
    files = {"k.cubin": b"\0" * 8}
    store = open_store(path)
    try:
        store.put("triton/abc", files, entry_meta("triton/abc", files, kernel="k"))
    finally:
        store.close()
    return str(path)


def test_a_rerun_on_a_filled_store_says_why_and_how_to_clear_it(tmp_path, capsys) -> None:
    url = _filled_store(tmp_path / "store")
    sys.path.insert(0, str(DEMO.parent))
    try:
        demo = importlib.import_module("serve_ranks")
    finally:
        sys.path.remove(str(DEMO.parent))
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--configs", "store", "--store", url, "--work", str(tmp_path / "work")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"the store {url} already holds 1 entr(ies), from an earlier run" in err
    assert f"clear it with `warmkit cache clear-store {url}`" in err
    assert not (tmp_path / "work").exists()  # no rank ran

    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    clear = subprocess.run(
        [sys.executable, "-m", "warmkit", "cache", "clear-store", url],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert clear.returncode == 0, clear.stderr
    assert clear.stdout == f"{url}: deleted 1 entr(ies)\n"
    assert demo.stored_entries(url) == 0
