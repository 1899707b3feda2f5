"""Bundles of TileLang entries: build for sm_90a on this CPU host, install into an empty cache,
a new process finds only disk hits; a flipped bit or a fingerprint mismatch installs nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from warmkit_tilelang import TiledGemm, TileLangBackend

import warmkit
from warmkit import BundleError

from .conftest import AOT_TARGET, REPO, run_child

SHAPES = {"m": [64, 128], "n": 128, "k": 64}

CHILD = f"""
import json, warmkit
from warmkit_tilelang import TiledGemm
reg = warmkit.WarmupRegistry()
reg.add(TiledGemm, **{SHAPES!r})
report = warmkit.warmup(warmkit.WarmupConfig(target={AOT_TARGET!r}, progress="off"), reg)
print(json.dumps([e.status for e in report.entries]))
"""


def cli(*argv: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TILELANG_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A bundle of two TiledGemm keys for the AOT target, built by the CLI in a fresh process."""
    root = tmp_path_factory.mktemp("tl-bundle")
    reg = warmkit.WarmupRegistry()
    reg.add(TiledGemm, **SHAPES)
    manifest = reg.save(root / "warmup.json")
    out = root / "gemm.wkb"
    res = cli(
        "bundle", "build", str(manifest), "--target", AOT_TARGET, "-o", str(out), "--json",
        cache=root / "build-cache",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return manifest, out


def _namespace_dir(cache: Path) -> Path:
    return cache.joinpath(*warmkit_tilelang_namespace().split("/"), "kernels")


def warmkit_tilelang_namespace() -> str:
    from warmkit_tilelang import _tilelang_api as api

    return api.cache_namespace()


def test_round_trip_into_an_empty_cache_then_only_disk_hits(built, tmp_path):
    _manifest, bundle = built
    info = warmkit.inspect_bundle(bundle)
    meta = info["backends"]["tilelang"]
    fp = meta["fingerprint"]
    assert fp["target"] == AOT_TARGET and fp["tilelang"] == "0.1.15"
    assert fp["arch"] in ("sm_90a", "sm_100a") and fp["namespace"] == warmkit_tilelang_namespace()
    entry_names = {e["path"].split("/")[0] for e in meta["entries"]}
    assert len(entry_names) == 2
    assert all(len(e["sha256"]) == 64 and e["size"] > 0 for e in meta["entries"])

    dest = tmp_path / "serving-cache"
    res = cli("bundle", "install", str(bundle), "--json", cache=dest)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["installed"] == 2 and summary["directories"] == {
        "tilelang": str(_namespace_dir(dest).resolve())
    }
    assert {p.name for p in _namespace_dir(dest).iterdir()} == entry_names

    proc = run_child(CHILD, dest)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["cached", "cached"]
    assert {p.name for p in _namespace_dir(dest).iterdir()} == entry_names  # nothing new

    again = cli("bundle", "install", str(bundle), "--json", cache=dest)
    assert json.loads(again.stdout)["unchanged"] == 2  # idempotent


def _rewrite(src: Path, dst: Path, *, member=None, meta=None) -> Path:
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for info in tin.getmembers():
            data = tin.extractfile(info).read()
            if info.name == "bundle.json" and meta is not None:
                doc = json.loads(data)
                meta(doc)
                data = json.dumps(doc).encode()
            elif member is not None and info.name != "bundle.json":
                data = member(info.name, data)
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))
    return dst


def test_install_imports_no_dsl(built, tmp_path):
    """Installing entries is copying checked files: TileLang, TVM and torch stay unimported (their
    import was 3.8 of a 4-entry install's seconds on an H100, 2.6-3.2 s on the CPU box)."""
    _manifest, bundle = built
    code = (
        "import json, sys\n"
        "from warmkit._cli.commands import main\n"
        f"rc = main(['bundle', 'install', {str(bundle)!r}, '--target', {AOT_TARGET!r}, '--json'])\n"
        "heavy = sorted(m for m in ('tilelang', 'tvm_ffi', 'torch') if m in sys.modules)\n"
        "print(json.dumps([rc, heavy]), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TILELANG_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == [0, []], proc.stderr[-3000:]
    assert json.loads(proc.stdout)["installed"] == 2
    assert {p.name for p in _namespace_dir(tmp_path / "cache").iterdir()} == {
        e["path"].split("/")[0]
        for e in warmkit.inspect_bundle(bundle)["backends"]["tilelang"]["entries"]
    }


def test_a_flipped_bit_in_an_executable_installs_nothing(built, tmp_path):
    _manifest, bundle = built

    def flip(name: str, data: bytes) -> bytes:
        if name.endswith("executable.so"):
            b = bytearray(data)
            b[len(b) // 3] ^= 0x01
            return bytes(b)
        return data

    bad = _rewrite(bundle, tmp_path / "bad.wkb", member=flip)
    dest = tmp_path / "cache"
    with pytest.raises(BundleError, match="executable.so.*corrupt|corrupt.*executable.so"):
        warmkit.install_bundle(bad, cache_dirs={"tilelang": dest})
    assert not dest.exists() or not [p for p in dest.iterdir() if not p.name.startswith(".")]


def test_a_bundle_for_another_tilelang_is_refused_naming_the_field(built, tmp_path):
    _manifest, bundle = built

    def older(doc: dict) -> None:
        doc["backends"]["tilelang"]["fingerprint"]["tilelang"] = "0.1.14"

    bad = _rewrite(bundle, tmp_path / "old.wkb", meta=older)
    with pytest.raises(BundleError) as info:
        warmkit.install_bundle(bad, cache_dirs={"tilelang": tmp_path / "cache"})
    assert info.value.field == "tilelang" and "0.1.14" in str(info.value)


def test_fingerprint_without_a_target_or_gpu_is_a_usage_error():
    if TileLangBackend().default_target() is not None:
        pytest.skip("this host has a GPU: the default target is defined here")
    with pytest.raises(ValueError, match="cuda:90"):
        TileLangBackend().cache_fingerprint(None)
