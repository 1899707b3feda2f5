"""``warmkit explain`` and ``warmkit bundle check``: one test per miss reason, text checked.

Bundles are built in fresh processes (``test_pins``' helpers) for cuda:90; the
checks run here, with no GPU. This process imports ``_pinned_kernels`` with
``PINNED_TEST_TF32`` unset (``PREC = 'ieee'``); the pinned manifest says
``'tf32'`` (the "GPU host").
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
import triton

import warmkit
from warmkit._cli import commands as _cli

from .test_pins import GPU_HOST, SAVE, _build, _env, _run

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pinned manifest, the bundle built from it, and one built without its pins."""
    tmp = tmp_path_factory.mktemp("explain")
    manifest = tmp / "m.json"
    proc = _run([sys.executable, "-c", SAVE, str(manifest)], _env(tmp / "c0", **GPU_HOST), tmp)
    assert proc.returncode == 0, proc.stderr
    assert _build(manifest, tmp / "pinned.wkb", tmp).returncode == 0
    data = json.loads(manifest.read_text())
    del data["pins"]
    old = tmp / "old.json"
    old.write_text(json.dumps(data))
    assert _build(old, tmp / "unpinned.wkb", tmp).returncode == 0
    return {"manifest": manifest, "pinned": tmp / "pinned.wkb", "unpinned": tmp / "unpinned.wkb"}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delenv("PINNED_TEST_TF32", raising=False)


def _reasons(found: list[warmkit.Explanation]) -> list[tuple[str, str | None]]:
    return [(e.status, e.reason) for e in found]


def test_a_bundle_that_hits_says_so(built) -> None:
    found = warmkit.explain(bundle=built["pinned"])
    assert [(e.status, e.key) for e in found] == [
        ("hit", "PinnedDot.CompileKey(block=16)"),
        ("hit", "PinnedDot.CompileKey(block=32)"),
    ]


def test_bundle_check_exits_1_on_another_target_naming_it(built, capsys) -> None:
    assert _cli.main(["bundle", "check", str(built["pinned"]), "--target", "cuda:80"]) == 1
    out = capsys.readouterr().out
    assert (
        f"MISS _pinned_kernels.PinnedDot PinnedDot.CompileKey(block=16): the bundle "
        f"{built['pinned']} was built for target cuda:90, here cuda:80"
    ) in out
    assert "2 key(s): 2 miss(es)" in out


def _with_meta(src: Path, dst: Path, edit) -> Path:
    """A copy of bundle ``src`` whose bundle.json is edited (an unsigned bundle needs no re-sign)."""
    with tarfile.open(src, "r:*") as tin, tarfile.open(dst, "w:gz") as tout:
        for member in tin:
            data = tin.extractfile(member).read() if member.isfile() else None
            if member.name == "bundle.json":
                meta = json.loads(data)
                edit(meta)
                data = json.dumps(meta).encode()
                member.size = len(data)
            tout.addfile(member, io.BytesIO(data) if data is not None else None)
    return dst


def test_bundle_check_exits_1_on_another_triton_version_naming_it(built, tmp_path, capsys) -> None:
    def older(meta):
        meta["backends"]["triton"]["fingerprint"]["triton_version"] = "3.0.0"

    bundle = _with_meta(built["pinned"], tmp_path / "older.wkb", older)
    assert _cli.main(["bundle", "check", str(bundle), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["misses"] == 2
    first = result["keys"][0]
    here = triton.__version__
    assert (first["factor"], first["there"], first["here"]) == ("triton_version", "3.0.0", here)
    assert first["reason"] == f"the bundle {bundle} was built for triton_version 3.0.0, here {here}"


def test_explain_names_a_cache_relevant_env_var(built, monkeypatch) -> None:
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    (first, _) = warmkit.explain(bundle=built["pinned"])
    assert first.factor == "env"
    assert first.reason == (
        f"the bundle {built['pinned']} was built for env {{}}, here "
        '{"TRITON_DEFAULT_FP_FUSION": "false"}'
    )


def test_explain_names_the_global_with_both_values(built) -> None:
    found = warmkit.explain(built["manifest"], bundle=built["unpinned"])
    assert [e.status for e in found] == ["miss", "miss"]
    assert all(e.factor == "global _pinned_kernels.PREC" for e in found)
    assert found[0].reason.endswith(
        "differs in global _pinned_kernels.PREC: tl.constexpr('ieee') there, "
        "tl.constexpr('tf32') here"
    )
    assert found[0].reason.startswith(f"nearest entry {found[0].entry} ")


def _cache_from(bundle: Path, tmp: Path) -> Path:
    cache = tmp / "cache"
    with tarfile.open(bundle, "r:*") as tar:
        tar.extractall(tmp / "x", filter="data")
    shutil.copytree(tmp / "x" / "backends" / "triton", cache)
    return cache


def test_explain_names_the_key_that_differs(built, tmp_path) -> None:
    cache = _cache_from(built["pinned"], tmp_path)
    hit16 = warmkit.explain(built["manifest"], cache_dirs={"triton": cache}, target="cuda:90")[0]
    for entry in cache.iterdir():  # keep block=16's entry only
        if entry.name != hit16.entry:
            shutil.rmtree(entry)
    found = warmkit.explain(
        built["manifest"], cache_dirs={"triton": cache}, target="cuda:90", key="block=32"
    )
    assert _reasons(found) == [
        (
            "miss",
            (
                f"nearest entry {hit16.entry} differs in key: PinnedDot.CompileKey(block=16) "
                "there, PinnedDot.CompileKey(block=32) here"
            ),
        )
    ]


def test_explain_names_the_function_whose_source_differs(built, tmp_path) -> None:
    cache = _cache_from(built["pinned"], tmp_path)
    first = warmkit.explain(built["manifest"], cache_dirs={"triton": cache}, target="cuda:90")[0]
    # The key's entry gone, and one built from another text of _scaled in its place (alone:
    # block=32's entry would be as near, differing in the key).
    other = cache / ("A" * 52)
    (cache / first.entry).rename(other)
    for entry in cache.iterdir():
        if entry != other:
            shutil.rmtree(entry)
    record = other / "warmkit-aot.json"
    data = json.loads(record.read_text())
    data["identity"]["sources"]["_pinned_kernels:_scaled"] = "ab" * 32
    record.write_text(json.dumps(data))
    found = warmkit.explain(
        built["manifest"], cache_dirs={"triton": cache}, target="cuda:90", key="block=16"
    )
    (miss,) = found
    assert miss.factor == "source _pinned_kernels:_scaled"
    assert miss.reason.startswith(f"nearest entry {other.name} differs in source ")
    assert miss.there == "abababababab" and miss.here != miss.there


def test_explain_says_when_no_entry_of_the_kernel_exists(built, tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    found = warmkit.explain(built["manifest"], cache_dirs={"triton": empty}, target="cuda:90")
    assert _reasons(found)[0] == (
        "miss",
        f"the cache {empty} has no entry of kernel _pinned_kernels.PinnedDot",
    )


def test_explain_cli_prints_one_line_per_key_and_exits_1_on_a_miss(built, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["explain", str(built["manifest"]), "--cache-dir", f"triton={empty}"]
    assert _cli.main([*argv, "--target", "cuda:90", "--kernel", "_pinned_kernels.PinnedDot"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "2 key(s): 2 miss(es)"
    assert lines[0].startswith("MISS _pinned_kernels.PinnedDot PinnedDot.CompileKey(block=16): ")


def test_explain_names_a_pinned_identity_this_host_cannot_build(built, tmp_path) -> None:
    data = json.loads(built["manifest"].read_text())
    data["pins"]["_pinned_kernels.PinnedDot"]["sources"]["_pinned_kernels:_scaled"] = "ab" * 32
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    (first, _) = warmkit.explain(edited, bundle=built["pinned"])
    assert first.status == "miss"
    assert first.reason.startswith(
        "PinMismatchError: kernel '_pinned_kernels.PinnedDot': the pinned identity cannot be "
        "reproduced on this host: function _pinned_kernels:_scaled: source sha256 abababababab "
        "when pinned, "
    )
