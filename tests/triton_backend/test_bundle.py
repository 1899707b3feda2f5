"""Bundles with real Triton on a CPU-only host: build for cuda:90, install elsewhere, disk hits only.

Every step that a serving node would run in its own process runs in a fresh
subprocess here (the CLI, or ``_bundle_child``), with its own ``TRITON_CACHE_DIR``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from warmkit_triton import check_aot_cache

import warmkit
from warmkit import BundleError

from ._kernels import Add
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

REPO = Path(__file__).resolve().parents[2]
#: where this package is importable from, as pytest imported it (``triton_backend._kernels``)
IMPORT_ROOT = Path(__file__).resolve().parents[len((__package__ or "").split("."))]
CHILD = f"{__package__}._bundle_child"
#: cuda:90 (the H200's target) here; on a GPU host another one, so that warmups stay ahead of time
TARGET = AOT_TARGET
N_KEYS = 4


@pytest.fixture(autouse=True)
def _serve_target(monkeypatch):
    """In-process installs serve TARGET, as the CLI's do (cli() sets WARMKIT_TARGET)."""
    monkeypatch.setenv("WARMKIT_TARGET", TARGET)


def _env(cache: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(IMPORT_ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    if cache is not None:
        env["TRITON_CACHE_DIR"] = str(cache)
    env["WARMKIT_TARGET"] = TARGET  # what installs serve (on an H200 that is not the GPU's)
    env.update(extra)
    return env


def cli(*argv: str, cache: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *argv],
        check=False,
        env=_env(cache, **extra),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def child_warmup(manifest: Path, cache: Path, bundle: Path | None = None) -> dict:
    """Warm up ``manifest`` for cuda:90 in a fresh process; what the compile listener saw."""
    argv = [sys.executable, "-m", CHILD, str(manifest), TARGET]
    if bundle is not None:
        argv.append(str(bundle))
    out = subprocess.run(
        argv, check=False, env=_env(cache), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def entries(directory: Path) -> set[str]:
    if not directory.exists():
        return set()
    return {p.name for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A bundle of 4 Add keys for cuda:90, built by the CLI in a fresh process (-j 2)."""
    root = tmp_path_factory.mktemp("bundle")
    reg = warmkit.WarmupRegistry()
    reg.add(Add, dtype=["float32", "float16"], n=64, block=[64, 128])
    manifest = reg.save(root / "warmup.json")
    out = root / "kernels.wkb"
    res = cli(
        "bundle", "build", str(manifest), "--target", TARGET, "-o", str(out), "-j", "2", "--json",
        cache=root / "build-cache",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    totals = json.loads(res.stdout)
    assert totals["keys"] == N_KEYS and totals["kernels"] == 1
    return manifest, out, totals


def rewrite(src: Path, dst: Path, *, meta=None, member=None) -> Path:
    """Copy a bundle, changing bundle.json (``meta(dict)``) or one member's bytes (``member(name, data)``)."""
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


# -- the round trip -------------------------------------------------------------------------------


def test_build_install_elsewhere_then_disk_hits_only(built, tmp_path):
    manifest, bundle, _totals = built
    info = warmkit.inspect_bundle(bundle)
    assert info["target"] == TARGET and info["totals"]["keys"] == N_KEYS
    fp = info["backends"]["triton"]["fingerprint"]
    assert fp["target"] == TARGET and fp["triton_version"] and fp["python_abi"]

    dest = tmp_path / "serving-cache"  # another path than the build's cache
    res = cli("bundle", "install", str(bundle), "--json", cache=dest, PYTHONPROFILEIMPORTTIME="1")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["installed"] == N_KEYS and summary["unchanged"] == summary["replaced"] == 0
    assert summary["directories"] == {"triton": str(dest)}
    # the launchers need this host's CUDA driver: none here, said so (test_gpu builds them),
    # known without Triton's driver selection, which imports torch (1.5 s of every install)
    assert "not built: no CUDA driver on this host" in summary["prepared"]["triton"]
    imported = [line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines()]
    assert "triton" in imported and "torch" not in imported
    assert len(entries(dest)) == N_KEYS
    assert not list(dest.glob(".warmkit-staging-*"))
    assert check_aot_cache(dest) == []  # group files point into the new place

    seen = child_warmup(manifest, dest)
    # Triton's compile never ran: an AOT warmup checks a disk hit without reading it into
    # memory (warmkit_triton._probe.aot_hit), so zero compiles and zero Triton reads
    assert seen["listener"] == []
    assert seen["statuses"] == ["cached"] * N_KEYS
    assert len(entries(dest)) == N_KEYS  # nothing new was written


def test_reinstall_is_idempotent(built, tmp_path):
    _manifest, bundle, _ = built
    dest = tmp_path / "cache"
    first = warmkit.install_bundle(bundle, cache_dirs={"triton": dest})
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    again = warmkit.install_bundle(bundle, cache_dirs={"triton": dest})
    assert len(first.installed) == N_KEYS
    assert again.installed == () and again.replaced == ()
    assert sorted(again.unchanged) == sorted(first.installed)
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == before
    res = cli("bundle", "install", str(bundle), "--json", cache=dest)
    assert res.returncode == 0 and json.loads(res.stdout)["unchanged"] == N_KEYS


def test_warmup_config_bundle_installs_then_hits(built, tmp_path):
    manifest, bundle, _ = built
    seen = child_warmup(manifest, tmp_path / "fresh", bundle=bundle)
    assert seen["listener"] == []  # no compile (the first test says why no disk hit either)
    assert seen["statuses"] == ["cached"] * N_KEYS


def test_a_half_written_entry_is_replaced(built, tmp_path):
    manifest, bundle, _ = built
    dest = tmp_path / "cache"
    warmkit.install_bundle(bundle, cache_dirs={"triton": dest})
    victim = min(entries(dest))
    for f in (dest / victim).iterdir():
        if f.suffix == ".cubin":
            f.write_bytes(f.read_bytes()[:10])  # a crashed compile's leftovers
    res = warmkit.install_bundle(bundle, cache_dirs={"triton": dest})
    assert res.replaced == (f"triton/{victim}",)
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]
    seen = child_warmup(manifest, dest)
    assert seen["listener"] == [] and seen["statuses"] == ["cached"] * N_KEYS


# -- refusals: nothing installed ----------------------------------------------------------------------


def test_fingerprint_mismatch_names_the_field(built, tmp_path):
    _manifest, bundle, _ = built

    def tamper(doc):
        doc["backends"]["triton"]["fingerprint"]["triton_version"] = "3.0.0"

    bad = rewrite(bundle, tmp_path / "bad.wkb", meta=tamper)
    dest = tmp_path / "cache"
    with pytest.raises(BundleError, match="triton_version='3.0.0'") as err:
        warmkit.install_bundle(bad, cache_dirs={"triton": dest})
    assert err.value.field == "triton_version" and err.value.backend == "triton"
    assert entries(dest) == set()
    res = cli("bundle", "install", str(bad), cache=dest)
    assert res.returncode == 1 and "triton_version" in res.stderr
    assert entries(dest) == set()


def test_cache_invalidating_env_at_install_is_refused(built, tmp_path, monkeypatch):
    _manifest, bundle, _ = built
    dest = tmp_path / "cache"
    monkeypatch.setenv(
        "TRITON_DEFAULT_FP_FUSION", "1"
    )  # changes every hash, although 1 is the default
    with pytest.raises(BundleError, match="env=") as err:
        warmkit.install_bundle(bundle, cache_dirs={"triton": dest})
    assert err.value.field == "env" and "TRITON_DEFAULT_FP_FUSION" in str(err.value)
    assert entries(dest) == set()


def test_a_corrupted_entry_is_refused(built, tmp_path):
    _manifest, bundle, _ = built
    flipped: list[str] = []

    def flip(name, data):
        if name.endswith(".cubin") and not flipped:
            flipped.append(name)
            return data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        return data

    bad = rewrite(bundle, tmp_path / "bad.wkb", member=flip)
    dest = tmp_path / "cache"
    with pytest.raises(BundleError, match="corrupt") as err:
        warmkit.install_bundle(bad, cache_dirs={"triton": dest})
    assert flipped and err.value.entry == flipped[0].removeprefix("backends/triton/")
    assert entries(dest) == set() and not any(dest.iterdir())  # no staging left either
    res = cli("bundle", "install", str(bad), cache=dest)
    assert res.returncode == 1 and "corrupt" in res.stderr


def test_a_truncated_archive_is_refused(built, tmp_path):
    _manifest, bundle, _ = built
    data = bundle.read_bytes()
    bad = tmp_path / "truncated.wkb"
    bad.write_bytes(data[: len(data) * 2 // 3])
    dest = tmp_path / "cache"
    with pytest.raises(BundleError):
        warmkit.install_bundle(bad, cache_dirs={"triton": dest})
    assert entries(dest) == set()
    assert not dest.exists() or not any(dest.iterdir())
    for cmd in ("install", "inspect"):
        res = cli("bundle", cmd, str(bad), cache=dest)
        assert res.returncode == 1, (cmd, res.stdout, res.stderr)
    assert entries(dest) == set()


def test_a_truncated_but_well_formed_gzip_is_refused(built, tmp_path):
    """Members cut short inside a valid gzip stream: the size/hash check catches it."""
    _manifest, bundle, _ = built
    raw = gzip.decompress(bundle.read_bytes())
    bad = tmp_path / "short.wkb"
    bad.write_bytes(gzip.compress(raw[: len(raw) // 2]))
    with pytest.raises(BundleError):
        warmkit.install_bundle(bad, cache_dirs={"triton": tmp_path / "cache"})
    assert entries(tmp_path / "cache") == set()


# -- concurrency -------------------------------------------------------------------------------


_RACER = """
import pathlib, sys, time
from warmkit._plugin import discovery as _plugins
from warmkit._cli.commands import main
_plugins.get_backend("triton").cache_fingerprint("cuda:90")  # imports and triton_key done
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.001)
sys.exit(main(["bundle", "install", sys.argv[3], "--json"]))
"""


@pytest.mark.parametrize("stale", [False, True], ids=["empty-cache", "stale-entry"])
def test_concurrent_installs_all_succeed_and_leave_a_correct_cache(built, tmp_path, stale):
    """4 processes, released at the same instant, install one bundle into one directory."""
    manifest, bundle, _ = built
    dest = tmp_path / "shared-cache"
    if stale:  # one entry half-written (e.g. by a crashed compile): every installer replaces it
        warmkit.install_bundle(bundle, cache_dirs={"triton": dest})
        victim = dest / min(entries(dest))
        for f in victim.iterdir():
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path / f"ready{i}"), str(go), str(bundle)],
            env=_env(dest),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    for r in results:
        assert r["installed"] + r["unchanged"] + r["replaced"] == N_KEYS
    if not stale:
        assert sum(r["installed"] for r in results) >= 1
    assert len(entries(dest)) == N_KEYS
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]  # no staging, no trash
    assert check_aot_cache(dest) == []
    seen = child_warmup(manifest, dest)
    assert seen["listener"] == [] and seen["statuses"] == ["cached"] * N_KEYS


# -- the command line --------------------------------------------------------------------------


def test_cli_exit_codes(built, tmp_path):
    manifest, bundle, _ = built
    res = cli("bundle", "inspect", str(bundle))
    assert res.returncode == 0 and "4 key(s)" in res.stdout and TARGET in res.stdout
    res = cli("bundle", "inspect", str(bundle), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["totals"]["keys"] == N_KEYS
    # usage errors: 2
    missing = str(tmp_path / "nope.wkb")
    for argv in (
        ("bundle", "install", missing),
        ("bundle", "inspect", missing),
        ("bundle", "build", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.wkb")),
        ("bundle", "build", str(manifest), "--target", "hip:gfx942", "-o", str(tmp_path / "x.wkb")),
        ("bundle", "install", str(bundle), "--cache-dir", "no-equals-sign"),
        ("bundle", "build", str(manifest)),  # no -o
        ("bundle",),
    ):
        res = cli(*argv, cache=tmp_path / "cache")
        assert res.returncode == 2, (argv, res.stdout, res.stderr)
    assert entries(tmp_path / "cache") == set()
    # a refused bundle: 1
    not_a_bundle = tmp_path / "junk.wkb"
    not_a_bundle.write_bytes(b"this is not a tar file")
    for cmd in ("install", "inspect"):
        res = cli("bundle", cmd, str(not_a_bundle), cache=tmp_path / "cache")
        assert res.returncode == 1, (cmd, res.stderr)
        assert len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1  # one clear line


@pytest.mark.parametrize("command", ["warmup", "plan", "bundle build"])
def test_an_unsupported_target_is_one_line_exit_2_and_writes_nothing(tmp_path, command):
    reg = warmkit.WarmupRegistry()
    reg.add(Add, n=64, block=[64, 128])
    manifest = reg.save(tmp_path / "warmup.json")
    cache = tmp_path / "cache"
    extra = ["-o", str(tmp_path / "k.wkb")] if command == "bundle build" else []
    res = cli(*command.split(), str(manifest), "--target", "cuda:999", *extra, cache=cache)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "cuda:999" in lines[0] and "supported: " in lines[0] and "cuda:90" in lines[0]
    assert res.stdout == "" and entries(cache) == set()
    assert not (tmp_path / "k.wkb").exists()


def test_bundle_output_under_a_regular_file_fails_before_compiling(tmp_path):
    reg = warmkit.WarmupRegistry()
    reg.add(Add, n=64, block=64)
    manifest = reg.save(tmp_path / "warmup.json")
    (tmp_path / "file").write_text("x")
    cache = tmp_path / "cache"
    res = cli(
        "bundle", "build", str(manifest), "--target", TARGET, "-o", str(tmp_path / "file" / "k.wkb"),
        cache=cache,
    )  # fmt: skip
    assert (
        res.returncode == 2
        and "is not a directory" in res.stderr
        and str(tmp_path / "file") in res.stderr
    )
    assert entries(cache) == set()  # nothing was compiled


def test_a_rebuilt_bundle_reinstalls_as_unchanged(built, tmp_path):
    """Two builds of one manifest, each in its own temporary cache: identical entries after install."""
    manifest, bundle, _ = built
    again = tmp_path / "again.wkb"
    res = cli(
        "bundle", "build", str(manifest), "--target", TARGET, "-o", str(again), cache=tmp_path / "c"
    )
    assert res.returncode == 0, res.stderr
    dest = tmp_path / "serving"
    assert len(warmkit.install_bundle(bundle, cache_dirs={"triton": dest}).installed) == N_KEYS
    second = warmkit.install_bundle(again, cache_dirs={"triton": dest})
    assert len(second.unchanged) == N_KEYS and second.replaced == () and second.installed == ()
    for record in dest.glob("*/warmkit-aot.json"):
        assert str(tmp_path) not in record.read_text()  # no build path in what was shipped
