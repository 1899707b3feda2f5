"""``warmkit._cache.bundle`` with a plain-Python backend: build, inspect, install, refusals, concurrency, CLI."""

from __future__ import annotations

import errno
import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest

import warmkit
from warmkit import BundleError, WarmupConfig, WarmupError, WarmupRegistry
from warmkit._cli.commands import main

from . import _bundle_backend as bb
from ._bundle_backend import BundleBackend, BundledKernel, OtherBundleBackend, OtherBundledKernel
from ._kernels import PyKernel, ScaleKernel

TARGET = "fake:1"


@pytest.fixture
def site(fake_backend, tmp_path, monkeypatch):
    """Backends ``fakebundle``/``fakebundle2`` installed; each with a runtime cache dir of its own."""
    mod = bb.__name__
    fake_backend.add_dist(
        "fake-bundle",
        "1.0",
        backends={
            "fakebundle": f"{mod}:BundleBackend",
            "fakebundle2": f"{mod}:OtherBundleBackend",
        },
    )
    bb.reset()
    monkeypatch.setenv("WARMKIT_TARGET", TARGET)  # the target installs serve
    BundleBackend.root = tmp_path / "runtime-cache"
    OtherBundleBackend.root = tmp_path / "runtime-cache-2"
    yield fake_backend
    bb.reset()


@pytest.fixture
def reg() -> WarmupRegistry:
    r = WarmupRegistry()
    r.add(BundledKernel, block=[16, 32, 64], dtype=["float16", "bfloat16"])
    return r


@pytest.fixture
def bundle(site, reg, tmp_path) -> Path:
    out = tmp_path / "k.wkb"
    warmkit.build_bundle(reg, out, target=TARGET, progress="off")
    BundleBackend.log.clear()
    return out


def entries(d: Path) -> set[str]:
    return {p.name for p in d.iterdir() if not p.name.startswith(".")} if d.exists() else set()


def hidden(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.startswith(".")] if d.exists() else []


def rewrite(src: Path, dst: Path, *, meta=None, member=None, extra=()) -> Path:
    """Copy a bundle, editing bundle.json, a member's bytes (return None to drop it), or adding members."""
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dst, "w:gz") as tout:
        for info in tin.getmembers():
            data = tin.extractfile(info).read()
            if info.name == "bundle.json":
                if meta is not None:
                    doc = json.loads(data)
                    meta(doc)
                    data = json.dumps(doc).encode()
            elif member is not None:
                data = member(info.name, data)
                if data is None:
                    continue
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))
        for info, data in extra:
            tout.addfile(info, io.BytesIO(data) if data is not None else None)
    return dst


# -- build and inspect ----------------------------------------------------------------------


def test_build_then_inspect(site, reg, tmp_path):
    out = tmp_path / "sub" / "k.wkb"
    meta = warmkit.build_bundle(reg, out, target=TARGET, progress="off")
    assert out.is_file() and not [p for p in out.parent.iterdir() if p.name.endswith(".partial")]
    assert meta["target"] == TARGET and meta["format"] == "warmkit.bundle"
    info = warmkit.inspect_bundle(out)
    assert info["totals"] == {
        "kernels": 1,
        "keys": 6,
        "files": 12,
        "bytes": sum(e["size"] for e in info["backends"]["fakebundle"]["entries"]),
        "tuned": 0,
    }
    assert info["backends"]["fakebundle"]["fingerprint"] == {
        "target": TARGET,
        "version": "1.0",
        "abi": "fake-abi-1",
    }
    (name,) = info["kernels"]
    assert len(info["kernels"][name]) == 6
    assert WarmupRegistry.from_dict(info["manifest"]).plan() == reg.plan()
    # built in a private cache: the runtime cache was not touched
    assert entries(BundleBackend.root) == set()


def test_build_compiles_even_what_is_already_in_memory(site, reg, tmp_path):
    warmkit.warmup(WarmupConfig(target=TARGET, progress="off"), reg)  # executors now in memory
    meta = warmkit.build_bundle(reg, tmp_path / "k.wkb", target=TARGET, progress="off")
    assert len(meta["backends"]["fakebundle"]["entries"]) == 12


def test_build_refuses_what_cannot_be_bundled(site, tmp_path):
    r = WarmupRegistry()
    r.add(PyKernel, n=1)
    with pytest.raises(BundleError, match="compiles itself"):
        warmkit.build_bundle(r, tmp_path / "a.wkb", target=TARGET)
    r = WarmupRegistry()
    r.add(ScaleKernel, n=4)
    with pytest.raises(BundleError, match="does not support bundles.*cache_fingerprint"):
        warmkit.build_bundle(r, tmp_path / "b.wkb", target=TARGET)
    assert not list(tmp_path.glob("*.wkb"))


def test_build_refuses_a_backend_that_wrote_nothing(site, reg, tmp_path):
    BundleBackend.write_nothing = True
    with pytest.raises(BundleError, match="wrote no cache entries"):
        warmkit.build_bundle(reg, tmp_path / "k.wkb", target=TARGET, progress="off")
    assert not list(tmp_path.glob("*k.wkb*"))


def test_build_with_a_failing_key_writes_nothing(site, reg, tmp_path):
    BundleBackend.fail_keys = frozenset({BundledKernel.CompileKey(16, "float16")})
    try:
        with pytest.raises(WarmupError):
            warmkit.build_bundle(reg, tmp_path / "k.wkb", target=TARGET, progress="off")
    finally:
        BundleBackend.fail_keys = frozenset()
    assert not list(tmp_path.glob("*k.wkb*"))


def test_unknown_target_fails_before_compiling(site, reg, tmp_path):
    with pytest.raises(ValueError, match="unknown fake target"):
        warmkit.build_bundle(reg, tmp_path / "k.wkb", target="nope:1", progress="off")
    assert BundleBackend.log == []


# -- install ---------------------------------------------------------------------------------


def test_install_relocates_and_warmup_hits(site, reg, bundle):
    res = warmkit.install_bundle(bundle)
    dest = BundleBackend.root
    assert res.directories == {"fakebundle": str(dest)}
    assert len(res.installed) == 6 and res.unchanged == res.replaced == ()
    assert entries(dest) == {e.split("/", 1)[1] for e in res.installed}
    assert hidden(dest) == []  # staging removed
    for e in entries(dest):
        assert json.loads((dest / e / "index.json").read_text())["self"] == str(dest / e)
    assert {final for _staged, final in BundleBackend.relocated} == {
        dest / e for e in entries(dest)
    }
    BundledKernel.clear_executors()
    report = warmkit.warmup(WarmupConfig(target=TARGET, progress="off"), reg)
    assert [e.status for e in report.entries] == ["cached"] * 6
    assert [hit for *_, hit in BundleBackend.log] == [True] * 6


def test_install_prepares_every_entry_of_the_bundle_once_published(site, bundle):
    res = warmkit.install_bundle(bundle)
    names = sorted(e.split("/", 1)[1] for e in res.installed)
    assert BundleBackend.prepared == [(BundleBackend.root, names)]
    assert res.prepared == {"fakebundle": "6 entr(ies) prepared"}
    again = warmkit.install_bundle(bundle)  # a re-install prepares again (e.g. a GPU now)
    assert again.unchanged and BundleBackend.prepared[-1] == (BundleBackend.root, names)


def test_a_failed_prepare_is_reported_and_the_install_stands(site, bundle, caplog, capsys):
    BundleBackend.prepare_error = RuntimeError("gcc not found")
    with caplog.at_level("WARNING", logger="warmkit._cache.bundle"):
        res = warmkit.install_bundle(bundle)
    assert len(res.installed) == 6  # the entries are published and sound
    what = res.prepared["fakebundle"]
    assert what.startswith("not prepared: RuntimeError: gcc not found")
    assert "raised by backend plugin 'fakebundle' in its prepare_entries() hook" in what
    assert any(
        "'fakebundle'" in r.getMessage() and "gcc not found" in r.getMessage()
        for r in caplog.records
    )
    code, stdout, _ = run(capsys, "bundle", "install", str(bundle))  # the CLI says it too
    assert code == 0 and "fakebundle: not prepared: RuntimeError: gcc not found" in stdout


def test_cache_dirs_overrides_the_backend_dir(site, bundle, tmp_path):
    other = tmp_path / "elsewhere"
    res = warmkit.install_bundle(bundle, cache_dirs={"fakebundle": other})
    assert res.directories == {"fakebundle": str(other)} and len(entries(other)) == 6
    assert entries(BundleBackend.root) == set()


def test_reinstall_is_idempotent(site, bundle):
    first = warmkit.install_bundle(bundle)
    dest = BundleBackend.root
    stamp = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    again = warmkit.install_bundle(bundle)
    assert again.installed == again.replaced == ()
    assert sorted(again.unchanged) == sorted(first.installed)
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == stamp


def test_a_different_entry_is_replaced(site, bundle):
    warmkit.install_bundle(bundle)
    dest = BundleBackend.root
    victim = min(entries(dest))
    (dest / victim / "payload.bin").write_bytes(b"half-written")
    (dest / victim / "junk.tmp").write_bytes(b"left over")
    res = warmkit.install_bundle(bundle)
    assert res.replaced == (f"fakebundle/{victim}",) and len(res.unchanged) == 5
    assert not (dest / victim / "junk.tmp").exists()
    assert (dest / victim / "payload.bin").read_bytes() != b"half-written"
    assert hidden(dest) == []


def test_warmup_config_bundle_installs_before_compiling(site, reg, bundle, monkeypatch):
    report = warmkit.warmup(WarmupConfig(target=TARGET, progress="off", bundle=str(bundle)), reg)
    assert [e.status for e in report.entries] == ["cached"] * 6
    BundledKernel.clear_executors()
    monkeypatch.setenv("WARMKIT_BUNDLE", str(bundle))
    report = warmkit.warmup(WarmupConfig.from_env(target=TARGET, progress="off"), reg)
    assert [e.status for e in report.entries] == ["cached"] * 6


def test_concurrent_installs_in_threads(site, reg, bundle):
    errors: list[BaseException] = []
    results = []
    barrier = threading.Barrier(8)

    def install():
        try:
            barrier.wait()
            results.append(warmkit.install_bundle(bundle))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=install) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for r in results:
        assert len(r.installed) + len(r.unchanged) + len(r.replaced) == 6
    dest = BundleBackend.root
    assert len(entries(dest)) == 6 and hidden(dest) == []
    report = warmkit.warmup(WarmupConfig(target=TARGET, progress="off"), reg)
    assert [e.status for e in report.entries] == ["cached"] * 6


# -- refusals: nothing installed -------------------------------------------------------------


def test_fingerprint_mismatch_names_the_field(site, bundle):
    BundleBackend.version = "1.1"  # another host
    with pytest.raises(BundleError, match=r"version='1\.0' but this host has version='1\.1'") as e:
        warmkit.install_bundle(bundle)
    assert (e.value.field, e.value.backend) == ("version", "fakebundle")
    assert entries(BundleBackend.root) == set() and hidden(BundleBackend.root) == []


def test_a_missing_fingerprint_field_is_a_mismatch(site, bundle, tmp_path):
    bad = rewrite(
        bundle,
        tmp_path / "bad.wkb",
        meta=lambda d: d["backends"]["fakebundle"]["fingerprint"].pop("abi"),
    )
    with pytest.raises(BundleError, match="abi=None") as e:
        warmkit.install_bundle(bad)
    assert e.value.field == "abi"


def test_second_backend_mismatch_installs_nothing_of_the_first(site, tmp_path):
    r = WarmupRegistry()
    r.add(BundledKernel, block=[16, 32])
    r.add(OtherBundledKernel, n=[1, 2])
    out = warmkit.build_bundle(r, tmp_path / "two.wkb", target=TARGET, progress="off")
    assert set(out["backends"]) == {"fakebundle", "fakebundle2"}
    OtherBundleBackend.version = "2.1"
    with pytest.raises(BundleError) as e:
        warmkit.install_bundle(tmp_path / "two.wkb")
    assert (e.value.backend, e.value.field) == ("fakebundle2", "version")
    assert entries(BundleBackend.root) == set() and entries(OtherBundleBackend.root) == set()
    OtherBundleBackend.version = "2.0"
    res = warmkit.install_bundle(tmp_path / "two.wkb")
    assert len(res.installed) == 4


def test_second_backend_corruption_installs_nothing_of_the_first(site, tmp_path):
    r = WarmupRegistry()
    r.add(BundledKernel, block=[16, 32])
    r.add(OtherBundledKernel, n=[1, 2])
    good = tmp_path / "two.wkb"
    warmkit.build_bundle(r, good, target=TARGET, progress="off")

    def flip(name, data):
        return data[:-1] + b"X" if name.startswith("backends/fakebundle2/") else data

    bad = rewrite(good, tmp_path / "bad.wkb", member=flip)
    with pytest.raises(BundleError, match="corrupt"):
        warmkit.install_bundle(bad)
    for d in (BundleBackend.root, OtherBundleBackend.root):
        assert entries(d) == set() and hidden(d) == []


def test_a_corrupted_member_is_refused_and_named(site, bundle, tmp_path):
    hit: list[str] = []

    def flip(name, data):
        if name.endswith("payload.bin") and not hit:
            hit.append(name)
            return bytes([data[0] ^ 1]) + data[1:]
        return data

    bad = rewrite(bundle, tmp_path / "bad.wkb", member=flip)
    with pytest.raises(BundleError, match="corrupt") as e:
        warmkit.install_bundle(bad)
    assert e.value.entry == hit[0].removeprefix("backends/fakebundle/")
    assert entries(BundleBackend.root) == set() and hidden(BundleBackend.root) == []


def test_a_resized_member_is_refused(site, bundle, tmp_path):
    bad = rewrite(
        bundle,
        tmp_path / "bad.wkb",
        member=lambda n, d: d + b"\n" if n.endswith("index.json") else d,
    )
    with pytest.raises(BundleError, match="corrupt"):
        warmkit.install_bundle(bad)
    assert entries(BundleBackend.root) == set()


def test_a_missing_member_is_refused(site, bundle, tmp_path):
    dropped: list[str] = []

    def drop(name, data):
        if not dropped:
            dropped.append(name)
            return None
        return data

    bad = rewrite(bundle, tmp_path / "bad.wkb", member=drop)
    with pytest.raises(BundleError, match="missing 1 file") as e:
        warmkit.install_bundle(bad)
    assert e.value.entry == dropped[0].removeprefix("backends/fakebundle/")
    assert entries(BundleBackend.root) == set()


@pytest.mark.parametrize(
    "name,kind,message",
    [
        ("backends/fakebundle/NEWENTRY/extra.bin", tarfile.REGTYPE, "not listed"),
        ("backends/fakebundle/../../evil.bin", tarfile.REGTYPE, "unsafe"),
        ("backends/fakebundle/a/b/c.bin", tarfile.REGTYPE, "unsafe"),
        ("backends/fakebundle/E/link", tarfile.SYMTYPE, "not a regular file"),
    ],
)
def test_unexpected_members_are_refused(site, bundle, tmp_path, name, kind, message):
    info = tarfile.TarInfo(name)
    info.type = kind
    data = b"x" if kind == tarfile.REGTYPE else None
    info.size = 1 if data else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    bad = rewrite(bundle, tmp_path / "bad.wkb", extra=[(info, data)])
    with pytest.raises(BundleError, match=message):
        warmkit.install_bundle(bad)
    assert entries(BundleBackend.root) == set()
    assert not (tmp_path / "evil.bin").exists()


def test_truncated_archive_is_refused(site, bundle, tmp_path):
    data = bundle.read_bytes()
    for cut in (len(data) // 3, len(data) - 40):
        bad = tmp_path / f"cut{cut}.wkb"
        bad.write_bytes(data[:cut])
        with pytest.raises(BundleError):
            warmkit.install_bundle(bad)
        assert entries(BundleBackend.root) == set() and hidden(BundleBackend.root) == []


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: d.update(format="something.else"), "not a warmkit bundle"),
        (lambda d: d.update(version=99), "version 99 is not supported"),
        (lambda d: d.pop("backends"), "not a warmkit bundle"),
        (lambda d: next(iter(d["backends"].values())).pop("fingerprint"), "malformed"),
        (lambda d: next(iter(d["backends"].values()))["entries"][0].pop("sha256"), "malformed"),
        (lambda d: d.update(refused="all"), "'refused' .* must be a list"),
        (lambda d: d.update(refused=[{"kernel": "k", "key": "x"}]), "'refused' .* must be a list"),
        (lambda d: d.update(refused=[{"kernel": 1, "key": "x", "reason": "r"}]), "'refused'"),
    ],
)
def test_bad_bundle_json_is_refused(site, bundle, tmp_path, edit, message):
    bad = rewrite(bundle, tmp_path / "bad.wkb", meta=edit)
    with pytest.raises(BundleError, match=message):
        warmkit.install_bundle(bad)
    with pytest.raises(BundleError, match=message):
        warmkit.inspect_bundle(bad)


def test_an_entry_that_cannot_be_published_is_an_error_not_a_success(site, bundle, monkeypatch):
    import errno as errno_

    def refuse(src, dst):
        raise PermissionError(errno_.EACCES, "Permission denied")

    monkeypatch.setattr("warmkit._cache.bundle.os.rename", refuse)
    with pytest.raises(BundleError, match="cannot publish cache entry"):
        warmkit.install_bundle(bundle)


def test_not_a_bundle(site, tmp_path):
    junk = tmp_path / "junk.wkb"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(BundleError):
        warmkit.install_bundle(junk)
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(BundleError, match="not a warmkit bundle"):
        warmkit.inspect_bundle(plain)
    with pytest.raises(FileNotFoundError):
        warmkit.install_bundle(tmp_path / "missing.wkb")


@pytest.mark.parametrize("meta", [b'{\x00"', b"\xff\xfe{\x00", b"\x80{}"])
def test_bundle_json_that_is_not_text_is_refused(site, tmp_path, meta):
    # json.loads guesses UTF-16/32 from NUL bytes: a bit flip can make bundle.json undecodable
    bad = tmp_path / "bad.wkb"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("bundle.json")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    for read in (warmkit.inspect_bundle, warmkit.install_bundle):
        with pytest.raises(BundleError, match="not a warmkit bundle"):
            read(bad)


# -- the command line --------------------------------------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_build_inspect_install(site, reg, tmp_path, capsys):
    manifest = reg.save(tmp_path / "warmup.json")
    out = tmp_path / "k.wkb"
    code, stdout, _ = run(capsys, "bundle", "build", str(manifest), "--target", TARGET, "-o", str(out), "--json")  # fmt: skip
    assert code == 0 and json.loads(stdout)["keys"] == 6
    code, stdout, _ = run(capsys, "bundle", "inspect", str(out))
    assert code == 0 and "6 key(s)" in stdout and "version: 1.0" in stdout
    code, stdout, _ = run(capsys, "bundle", "install", str(out), "--json")
    assert code == 0 and json.loads(stdout)["installed"] == 6
    code, stdout, _ = run(capsys, "bundle", "install", str(out))
    assert code == 0 and "unchanged 6" in stdout
    other = tmp_path / "other"
    code, stdout, _ = run(
        capsys, "bundle", "install", str(out), "--cache-dir", f"fakebundle={other}"
    )
    assert code == 0 and len(entries(other)) == 6


def test_cli_exit_codes(site, reg, bundle, tmp_path, capsys):
    manifest = reg.save(tmp_path / "warmup.json")
    BundleBackend.version = "9"
    code, _, err = run(capsys, "bundle", "install", str(bundle))
    assert code == 1 and "version" in err and len(err.strip().splitlines()) == 1
    BundleBackend.version = "1.0"
    bad = rewrite(bundle, tmp_path / "bad.wkb", member=lambda n, d: d + b"!")
    code, _, err = run(capsys, "bundle", "install", str(bad))
    assert code == 1 and "corrupt" in err
    code, _, _ = run(capsys, "bundle", "inspect", str(tmp_path / "missing.wkb"))
    assert code == 2
    code, _, _ = run(capsys, "bundle", "install", str(tmp_path / "missing.wkb"))
    assert code == 2
    code, _, _ = run(capsys, "bundle", "build", str(tmp_path / "missing.json"), "-o", "x.wkb")
    assert code == 2
    code, _, err = run(capsys, "bundle", "build", str(manifest), "--target", "nope:1", "-o", str(tmp_path / "x.wkb"))  # fmt: skip
    assert code == 2 and "unknown fake target" in err
    code, _, _ = run(capsys, "bundle", "install", str(bundle), "--cache-dir", "nodir")
    assert code == 2
    with pytest.raises(SystemExit) as e:
        main(["bundle", "build", str(manifest)])  # -o is required
    assert e.value.code == 2
    assert entries(BundleBackend.root) == set()


def test_an_entry_swapped_out_while_being_compared_is_replaced(site, bundle, monkeypatch):
    """A concurrent installer renames the entry away mid-comparison: no error, a correct entry."""
    from warmkit._cache import integrity as _integrity

    warmkit.install_bundle(bundle)
    dest = BundleBackend.root
    victim = min(entries(dest))
    (dest / victim / "payload.bin").write_bytes(b"stale")
    real = _integrity.sha256_file
    gone: list[Path] = []

    def sha_then_vanish(path):
        if path.parent == dest / victim and not gone:
            gone.append(dest / victim)
            (dest / victim).rename(dest / ".moved-away")  # what the other installer does
        return real(path)

    monkeypatch.setattr(_integrity, "sha256_file", sha_then_vanish)
    res = warmkit.install_bundle(bundle)
    assert gone and victim in {e.split("/", 1)[1] for e in res.replaced + res.installed}
    monkeypatch.setattr(_integrity, "sha256_file", real)
    again = warmkit.install_bundle(bundle)
    assert len(again.unchanged) == 6


# -- the target served, corrupt archives, atomic publishing, identity --------------------------


def test_a_bundle_for_another_target_is_refused_naming_both(site, reg, bundle, monkeypatch):
    with pytest.raises(
        BundleError, match=r"built for target fake:1 but is installed to serve fake:2"
    ) as e:
        warmkit.install_bundle(bundle, target="fake:2")
    assert (e.value.field, e.value.backend) == ("target", "fakebundle")
    monkeypatch.setenv("WARMKIT_TARGET", "fake:2")  # the configured target
    with pytest.raises(BundleError, match="fake:2"):
        warmkit.install_bundle(bundle)
    with pytest.raises(BundleError, match="fake:2"):
        warmkit.warmup(WarmupConfig(target="fake:2", progress="off", bundle=str(bundle)), reg)
    assert entries(BundleBackend.root) == set() and BundleBackend.log == []


def test_without_a_target_the_local_device_is_the_one_served(site, bundle, monkeypatch, caplog):
    monkeypatch.delenv("WARMKIT_TARGET")
    monkeypatch.setattr(BundleBackend, "device", "fake:7")  # this host's device
    with pytest.raises(BundleError, match="serve fake:7"):
        warmkit.install_bundle(bundle)
    monkeypatch.setattr(BundleBackend, "device", None)  # no device, no target: said, not hidden
    res = warmkit.install_bundle(bundle)
    assert len(res.installed) == 6
    assert any("cannot be checked" in r.getMessage() for r in caplog.records)


def test_a_bit_flip_anywhere_is_a_bundle_error_or_changes_nothing(site, bundle, tmp_path):
    """Every 7th byte of the archive, one bit flipped: a BundleError, never a raw error or a bad entry.

    A flip in the gzip header's name/mtime, or in a redundant bit of a deflate
    block, leaves the content byte-identical: that bundle installs correctly.
    """
    import gzip

    data = bundle.read_bytes()
    content = gzip.decompress(data)
    harmless = refused = 0
    for i in range(0, len(data), 7):
        flipped = bytearray(data)
        flipped[i] ^= 0x10
        bad = tmp_path / "flipped.wkb"
        bad.write_bytes(bytes(flipped))
        try:
            same = gzip.decompress(bytes(flipped)) == content
        except (OSError, EOFError, ValueError, __import__("zlib").error):
            same = False
        if same:
            harmless += 1
            assert (
                len(
                    warmkit.install_bundle(bad, cache_dirs={"fakebundle": tmp_path / "ok"}).replaced
                )
                == 0
            )
            continue
        refused += 1
        with pytest.raises(BundleError):
            warmkit.install_bundle(bad)
        with pytest.raises(BundleError):
            warmkit.inspect_bundle(bad)
    assert refused > harmless > 0
    assert entries(BundleBackend.root) == set() and hidden(BundleBackend.root) == []


def test_readers_never_see_an_entry_missing_while_installs_replace_it(site, bundle):
    """Readers resolve every entry as the runtime does (index.json -> payload) during 40 replacing installs."""
    warmkit.install_bundle(bundle)
    dest = BundleBackend.root
    names = sorted(entries(dest))
    good = {n: (dest / n / "payload.bin").read_bytes() for n in names}
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader():
        while not stop.is_set():
            for n in names:
                try:
                    index = json.loads((dest / n / "index.json").read_text())
                    payload = (Path(index["self"]) / "payload.bin").read_bytes()
                    assert payload in (good[n], b"stale"), payload[:20]
                    reads[0] += 1
                except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(40):
            for n in names:  # an entry gone stale, written atomically (it is not the subject)
                (dest / n / "payload.tmp").write_bytes(b"stale")
                os.replace(dest / n / "payload.tmp", dest / n / "payload.bin")
            res = warmkit.install_bundle(bundle)
            assert len(res.replaced) == 6
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == [] and reads[0] > 0
    assert hidden(dest) == []


def test_identical_builds_reinstall_as_unchanged(site, reg, tmp_path):
    # Each build compiles in a temporary directory of its own, whose path the entries'
    # index files hold until install relocates them: identity is taken after that.
    warmkit.build_bundle(reg, tmp_path / "a.wkb", target=TARGET, progress="off")
    BundledKernel.clear_executors()
    warmkit.build_bundle(reg, tmp_path / "b.wkb", target=TARGET, progress="off")
    warmkit.install_bundle(tmp_path / "a.wkb")
    res = warmkit.install_bundle(tmp_path / "b.wkb")
    assert len(res.unchanged) == 6 and res.replaced == () and res.installed == ()


def test_install_cache_dirs_naming_a_backend_not_in_the_bundle_is_an_error(site, bundle, tmp_path):
    with pytest.raises(ValueError, match=r"'tilelang', which has no entries.*fakebundle"):
        warmkit.install_bundle(bundle, cache_dirs={"tilelang": tmp_path / "x"})
    assert entries(BundleBackend.root) == set()


@pytest.mark.parametrize(
    "err,words",
    [
        (errno.ENOSPC, "the disk is full (ENOSPC)"),
        (errno.EFBIG, "larger than its filesystem or a limit allows (EFBIG)"),
    ],
)
def test_a_write_error_of_this_host_is_named_with_its_path_not_a_truncated_bundle(
    site, bundle, monkeypatch, err, words
):
    import builtins

    from warmkit._cache import bundle as _bundle

    written = []

    def failing_open(file, mode="r", *args, **kwargs):
        f = builtins.open(file, mode, *args, **kwargs)  # noqa: SIM115 -- closed by the wrapper
        if "w" not in mode:
            return f

        class Full:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, data):
                written.append(str(file))
                raise OSError(err, os.strerror(err))

        return Full()

    monkeypatch.setattr(_bundle, "open", failing_open, raising=False)
    with pytest.raises(BundleError) as info:
        warmkit.install_bundle(bundle)
    message = str(info.value)
    assert words in message and "truncated" not in message
    assert f"writing {written[0]} failed" in message and "free space" in message
    assert entries(BundleBackend.root) == set() and hidden(BundleBackend.root) == []


def test_a_build_ignores_warmkit_variables_on_purpose_without_a_warning(
    site, reg, tmp_path, monkeypatch, caplog
):
    from warmkit._warmup import config as _config

    monkeypatch.setattr(_config, "_warned", set())
    monkeypatch.setenv("WARMKIT_MONITOR", "error")  # a build never arms the monitor
    with caplog.at_level("WARNING"):
        warmkit.build_bundle(reg, tmp_path / "b.wkb", target=TARGET, progress="off")
    assert not [r for r in caplog.records if "not applied" in r.getMessage()]


def test_every_bit_of_the_streams_ends_flipped_is_refused_or_installs_the_same_files(
    site, bundle, tmp_path
):
    """Every bit of the gzip header, the end of the last deflate block and the CRC/size
    trailer: a ``BundleError``, or the very files the intact bundle installs (issue 26: about 1
    flip in 300 used to install entries that differed).

    Bounded: 26 bytes x 8 bits; ``test_a_bit_flip_anywhere_is_a_bundle_error_or_changes_nothing``
    covers the middle. A full sweep of all 16,368 bits of this bundle (and 2,500 random
    flips of a real Triton bundle) accepted none that differ.
    """
    import hashlib

    def tree(root):
        return {
            str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            # the integrity record holds install times; the files it records are compared
            if p.is_file() and p.name != "warmkit-integrity.json"
        }

    data = bundle.read_bytes()
    import shutil

    dest = tmp_path / "cache"  # one place: an index records its entry's absolute path
    warmkit.install_bundle(bundle, cache_dirs={"fakebundle": dest})
    good = tree(dest)
    refused = same = 0
    for i in [*range(10), *range(len(data) - 16, len(data))]:
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            bad = tmp_path / "flipped.wkb"
            bad.write_bytes(bytes(flipped))
            shutil.rmtree(dest, ignore_errors=True)
            try:
                warmkit.install_bundle(bad, cache_dirs={"fakebundle": dest})
            except BundleError:
                refused += 1
                continue
            assert tree(dest) == good, f"byte {i} bit {bit}: installed files differ"
            same += 1
    assert refused and refused + same == 26 * 8
