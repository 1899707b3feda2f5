"""A Triton cache entry is trusted only after it is checked: truncate, flip a bit, empty a file.

Real ahead-of-time sm_90/sm_80 compiles on this CPU host; each test breaks an
entry on purpose and asserts that warmkit neither reports it ``cached`` nor
fails with a raw error, but quarantines it (named in a WARNING) and recompiles.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from warmkit_triton import check_aot_cache
from warmkit_triton._entry import verify_cache_entry

import warmkit
from warmkit._cache import integrity as _integrity
from warmkit._cache.integrity import QUARANTINE_DIR, RECORD, STAMP, verify_cache

from ._kernels import Add
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")


def _warm(n: int = 64) -> warmkit.WarmupReport:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(n=n, block=128)
    Add.clear_executors()  # as a new process: only the disk cache
    cfg = warmkit.WarmupConfig(target=AOT_TARGET, progress="off", monitor="off", jobs=1)
    return warmkit.warmup(cfg, registry=reg)


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in cache.iterdir() if (p / RECORD).exists()]
    return entry


def _truncate_cubin(entry: Path) -> None:
    (cubin,) = entry.glob("*.cubin")
    cubin.write_bytes(cubin.read_bytes()[:100])


def _flip_bit(entry: Path) -> None:
    (cubin,) = entry.glob("*.cubin")
    data = bytearray(cubin.read_bytes())
    data[len(data) // 2] ^= 0x01
    cubin.write_bytes(bytes(data))


def _truncate_metadata(entry: Path) -> None:
    (meta,) = [p for p in entry.glob("*.json") if not p.name.startswith(("__grp__", "warmkit-"))]
    meta.write_text(meta.read_text()[:40])


def _empty_ptx(entry: Path) -> None:
    (ptx,) = entry.glob("*.ptx")
    ptx.write_bytes(b"")


def _truncate_metadata_no_record(entry: Path) -> None:
    (entry / RECORD).unlink()  # as if Triton had written the entry on its own
    _truncate_metadata(entry)


BREAKS = [_truncate_cubin, _flip_bit, _truncate_metadata, _empty_ptx, _truncate_metadata_no_record]


def test_a_compiled_entry_is_recorded_and_verifies(triton_cache):
    assert [e.status for e in _warm().entries] == ["compiled"]
    entry = _entry(triton_cache)
    record = json.loads((entry / RECORD).read_text())["files"]
    assert any(name.endswith(".cubin") for name in record)
    assert all(len(v["sha256"]) == 64 and v["size"] > 0 for v in record.values())
    assert verify_cache(triton_cache, verify_cache_entry) == {}
    assert check_aot_cache() == []


@pytest.mark.parametrize("stamped", [False, True], ids=["fresh", "stamped"])
@pytest.mark.parametrize("damage", BREAKS, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_entry_is_quarantined_named_and_recompiled(
    triton_cache, damage, stamped, caplog, monkeypatch
):
    _warm()
    entry = _entry(triton_cache)
    if stamped:  # a warm restart's lookup passed the full check and stamped the entry's stats
        with monkeypatch.context() as m:
            m.setattr(_integrity, "_RACY_NS", 0)  # its files are old enough to stamp
            assert [e.status for e in _warm().entries] == ["cached"]
        assert (entry / STAMP).is_file()
    damage(entry)
    assert verify_cache(triton_cache, verify_cache_entry).keys() == {str(entry)}
    problems = check_aot_cache()
    assert any(entry.name in p and "corrupt" in p for p in problems), problems

    with caplog.at_level(logging.WARNING, logger="warmkit"):
        report = _warm()
    assert [e.status for e in report.entries] == ["compiled"]  # never "cached"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(entry) in m and "quarantine" in m for m in warned), warned
    moved = list((triton_cache / QUARANTINE_DIR).iterdir())
    assert len(moved) == 1 and moved[0].name.startswith(entry.name)
    # The fresh entry is sound, recorded, and a hit from now on.
    assert verify_cache(triton_cache, verify_cache_entry) == {}
    assert (entry / RECORD).exists()
    assert [e.status for e in _warm().entries] == ["cached"]


def test_cache_verify_cli_names_bad_entries_and_quarantines(triton_cache):
    _warm(64)
    good = _entry(triton_cache)
    _warm(65)
    (bad,) = [p for p in triton_cache.iterdir() if (p / RECORD).exists() and p != good]
    _truncate_cubin(bad)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "warmkit", "cache", "verify", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    res = cli("--cache-dir", f"triton={triton_cache}")
    assert res.returncode == 1, res.stderr
    assert bad.name in res.stdout and good.name not in res.stdout and "bad" in res.stderr
    res = cli("--cache-dir", f"triton={triton_cache}", "--json")
    data = json.loads(res.stdout)["triton"]
    assert data["entries"] == 2 and list(data["bad"]) == [str(bad)]
    assert cli("--cache-dir", f"triton={triton_cache}", "--quarantine").returncode == 1
    assert not bad.exists() and good.exists()
    res = cli("--cache-dir", f"triton={triton_cache}")
    assert res.returncode == 0 and "1 entr(ies), 0 bad" in res.stdout
    res = cli("--cache-dir", f"nosuch={triton_cache}")
    assert res.returncode == 2 and "'nosuch'" in res.stderr and "triton" in res.stderr


def test_a_warm_key_walks_tritons_launch_path_once(triton_cache, monkeypatch):
    """The fleet's probe for the entry key finds the entry on disk and loads it in the same walk:
    Triton's binder, specialization and cache key run once per warm key, not twice."""
    from triton.runtime.jit import JITFunction

    assert [e.status for e in _warm().entries] == ["compiled"]
    runs = []
    inner = JITFunction.run
    monkeypatch.setattr(
        JITFunction,
        "run",
        lambda self, *a, **kw: runs.append(self.__name__) or inner(self, *a, **kw),
    )
    assert [e.status for e in _warm().entries] == ["cached"]
    assert len(runs) == 1, runs


# -- complete_entry: what a warm key takes for a complete entry, broken on purpose -------------


def _group_entry(tmp_path: Path, children: dict) -> Path:
    entry = tmp_path / "ENTRY"
    entry.mkdir()
    for name in ("k.cubin", "k.json"):
        (entry / name).write_bytes(b"x")
    (entry / "__grp__k.json").write_text(json.dumps({"child_paths": children}))
    return entry


def test_complete_entry_lists_the_group_its_files_and_the_aot_record(tmp_path: Path) -> None:
    from warmkit_triton._entry import AOT_RECORD, complete_entry

    entry = tmp_path / "ENTRY"
    entry = _group_entry(tmp_path, {n: str(entry / n) for n in ("k.cubin", "k.json")})
    assert complete_entry(entry) == {
        "__grp__k.json": entry / "__grp__k.json",
        "k.cubin": entry / "k.cubin",
        "k.json": entry / "k.json",
    }
    (entry / AOT_RECORD).write_text("{}")
    assert set(complete_entry(entry) or {}) == {"__grp__k.json", "k.cubin", "k.json", AOT_RECORD}


@pytest.mark.parametrize("damage", ["a listed file is missing", "a path is not a string", "empty"])
def test_an_incomplete_group_is_no_entry(tmp_path: Path, damage: str) -> None:
    # An int would be a file descriptor to os.path.isfile (fd 0-2 exist in every process).
    from warmkit_triton._entry import complete_entry

    entry = tmp_path / "ENTRY"
    children: dict = {n: str(entry / n) for n in ("k.cubin", "k.json")}
    if damage == "a listed file is missing":
        children["k.ptx"] = str(entry / "k.ptx")
    elif damage == "a path is not a string":
        children["k.cubin"] = 1
    else:
        children = {}
    assert complete_entry(_group_entry(tmp_path, children)) is None


def test_no_directory_is_no_entry(tmp_path: Path) -> None:
    from warmkit_triton._entry import complete_entry

    assert complete_entry(tmp_path / "missing") is None
