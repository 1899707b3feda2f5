"""warmkit._cache.integrity: records, verification and quarantine of cache entries, broken on purpose."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warmkit._cache import integrity as _integrity
from warmkit._cache.integrity import (
    QUARANTINE_DIR,
    RECORD,
    STAMP,
    _own_files,
    compare,
    file_record,
    quarantine,
    read_record,
    verify_cache,
    verify_entry,
    verify_entry_stamped,
    write_record,
)


def _entry(root, name="ENTRY", files=None):
    entry = root / name
    entry.mkdir(parents=True)
    for rel, data in (files or {"k.bin": b"\x7fELF" * 64, "k.json": b'{"name": "k"}'}).items():
        (entry / rel).write_bytes(data)
    return entry


def test_record_covers_own_files_only(tmp_path):
    entry = _entry(tmp_path)
    (entry / "tmp.pid_1_x").mkdir()
    (entry / "tmp.pid_1_x" / "k.bin").write_bytes(b"partial")
    (entry / "warmkit-aot.json").write_text("{}")
    (entry / ".k.json.tmp").write_text("")
    assert set(file_record(entry)) == {"k.bin", "k.json"}
    assert write_record(entry) == read_record(entry) == file_record(entry)
    assert verify_entry(entry) == []
    # The record itself is deterministic: no times, no paths.
    text = (entry / RECORD).read_text()
    write_record(entry)
    assert (entry / RECORD).read_text() == text and str(tmp_path) not in text


def _rglob_own_files(entry):
    """The walk file_record made with pathlib until 2026-12 (its definition of an entry's files)."""
    for path in sorted(entry.rglob("*")):
        rel = path.relative_to(entry)
        if rel.parts[0].startswith(("tmp.", ".")) or rel.name == "lock":
            continue
        if len(rel.parts) == 1 and rel.name.startswith("warmkit-"):
            continue
        if path.is_file():
            yield rel.as_posix()


_NAMES = st.sampled_from(
    ["k.bin", "k.json", "lock", "tmp.pid_1", ".hidden", "warmkit-aot.json", "a-b", "a", "Z"]
)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_entrys_files_are_those_the_pathlib_walk_found(tmp_path_factory, data):
    """Any tree of files, directories and links: the same files, in the same order."""
    entry = tmp_path_factory.mktemp("c") / "ENTRY"
    entry.mkdir()
    dirs = [entry]
    for _ in range(data.draw(st.integers(0, 14))):
        parent = data.draw(st.sampled_from(dirs))
        path = parent / data.draw(_NAMES)
        if path.exists() or path.is_symlink():
            continue
        kind = data.draw(st.sampled_from(["file", "dir", "file-link", "dir-link"]))
        if kind == "file":
            path.write_bytes(b"x")
        elif kind == "dir":
            path.mkdir()
            dirs.append(path)
        else:
            target = data.draw(st.sampled_from(dirs if kind == "dir-link" else [entry / "k.bin"]))
            path.symlink_to(target)  # a link to a missing file is no file for either walk
    ours = [rel for rel, path in _own_files(entry)]
    assert ours == list(_rglob_own_files(entry))
    assert all(path == entry / rel for rel, path in _own_files(entry))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_truncation_or_bit_flip_is_found(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("c")
    blob = data.draw(st.binary(min_size=1, max_size=300))
    entry = _entry(root, files={"k.bin": blob})
    write_record(entry)
    i = data.draw(st.integers(0, len(blob) - 1))
    if data.draw(st.booleans()):
        damaged = blob[:i]
    else:
        damaged = bytearray(blob)
        damaged[i] ^= 1 << data.draw(st.integers(0, 7))
    (entry / "k.bin").write_bytes(bytes(damaged))
    (problem,) = verify_entry(entry)
    assert problem.startswith("k.bin ")


def test_missing_file_and_unreadable_record(tmp_path):
    entry = _entry(tmp_path)
    write_record(entry)
    (entry / "k.json").unlink()
    assert verify_entry(entry) == ["k.json is missing"]
    (entry / RECORD).write_text('{"files": ')
    (problem,) = verify_entry(entry)
    assert RECORD in problem and "unreadable" in problem
    (entry / RECORD).write_text('{"files": {"k.bin": {"size": 1}}}')
    assert "malformed" in verify_entry(entry)[0]


def test_compare_names_each_difference():
    rec = {"a": {"sha256": "0" * 64, "size": 3}, "b": {"sha256": "1" * 64, "size": 3}}
    act = {"a": {"sha256": "0" * 64, "size": 2}, "b": {"sha256": "2" * 64, "size": 3}}
    out = compare(rec, act)
    assert out[0] == "a has 2 bytes, recorded 3" and out[1].startswith("b sha256 222222222222")


def test_structural_check_runs_without_a_record(tmp_path):
    entry = _entry(tmp_path)
    assert verify_entry(entry, lambda e: [f"{e.name} looks wrong"]) == ["ENTRY looks wrong"]


def test_quarantine_moves_aside_with_one_rename_and_warns(tmp_path, caplog):
    entry = _entry(tmp_path)
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        dest = quarantine(entry, ["k.bin is empty"])
    assert not entry.exists() and dest.parent == tmp_path / QUARANTINE_DIR
    assert (dest / "k.bin").exists()
    (msg,) = [r.getMessage() for r in caplog.records]
    assert str(entry) in msg and "k.bin is empty" in msg and str(dest) in msg
    assert quarantine(entry, ["again"]) is None  # already gone: another process was first


def test_verify_cache_reports_and_moves_bad_entries_only(tmp_path):
    good = _entry(tmp_path, "GOOD")
    bad = _entry(tmp_path, "BAD")
    write_record(good)
    write_record(bad)
    (bad / "k.bin").write_bytes(b"")
    (tmp_path / "tmp.pid_3_x").mkdir()  # someone's in-progress write: not an entry
    assert verify_cache(tmp_path) == {str(bad): ["k.bin has 0 bytes, recorded 256"]}
    assert verify_cache(tmp_path, move=True).keys() == {str(bad)}
    assert not bad.exists() and good.exists() and verify_cache(tmp_path) == {}
    # The quarantine is not an entry.
    assert all(not p.startswith(str(tmp_path / QUARANTINE_DIR)) for p in verify_cache(tmp_path))


def test_a_failed_record_write_names_the_path_and_leaves_no_temporary(tmp_path):
    entry = _entry(tmp_path)
    (entry / RECORD).mkdir()  # the rename onto it fails, as a full or read-only disk would
    (entry / RECORD / "x").write_text("x")
    with pytest.raises(OSError, match="cannot write integrity record .*" + RECORD):
        write_record(entry)
    assert not [p for p in entry.iterdir() if p.name.startswith(".")]


def test_update_record_rerecords_only_the_named_files(tmp_path):
    entry = _entry(tmp_path)
    write_record(entry)
    (entry / "k.json").write_text('{"name": "k", "path": "/new/place"}')  # warmkit relocated it
    (entry / "k.bin").write_bytes(b"bad")  # corruption is not blessed
    from warmkit._cache.integrity import update_record

    update_record(entry, ["k.json"])
    assert verify_entry(entry) == ["k.bin has 3 bytes, recorded 256"]


# -- the verified stamp: a lookup skips the hashes only while the files are provably unchanged ----


@pytest.fixture
def stamped(tmp_path, monkeypatch):
    """A recorded entry whose full check passed and was stamped; sha256_file counts its calls."""
    monkeypatch.setattr(_integrity, "_RACY_NS", 0)  # the files were just written: stamp them anyway
    entry = _entry(tmp_path)
    write_record(entry)
    assert verify_entry_stamped(entry) == [] and (entry / STAMP).is_file()
    hashed = []
    inner = _integrity.sha256_file
    monkeypatch.setattr(_integrity, "sha256_file", lambda p: hashed.append(p) or inner(p))
    return entry, hashed


def test_a_stamped_unchanged_entry_is_not_hashed_again(stamped):
    entry, hashed = stamped
    assert verify_entry_stamped(entry, lambda e: ["the structural check ran"]) == []
    assert hashed == []


@pytest.mark.parametrize(
    "damage",
    ["flip a byte, same size and mtime", "truncate", "replace by rename", "remove", "add a file"],
)
def test_any_change_after_the_stamp_gets_the_full_check(stamped, damage):
    entry, hashed = stamped
    path = entry / "k.bin"
    st = os.stat(path)
    if damage == "flip a byte, same size and mtime":
        data = bytearray(path.read_bytes())
        data[3] ^= 1
        path.write_bytes(bytes(data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime tells
        expected = ["k.bin sha256"]
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:10])
        expected = ["k.bin has 10 bytes, recorded 256"]
    elif damage == "replace by rename":
        (entry / "new").write_bytes(b"\0" * 256)
        os.replace(entry / "new", path)
        expected = ["k.bin sha256"]
    elif damage == "remove":
        path.unlink()
        expected = ["k.bin is missing"]
    else:
        (entry / "extra.bin").write_bytes(b"")
        expected = ["extra.bin is empty"]
    problems = verify_entry_stamped(entry, lambda e: [f"{p.name} is empty" for p in e.iterdir()
                                                     if p.stat().st_size == 0])  # fmt: skip
    assert [p[: len(x)] for p, x in zip(problems, expected)] == expected and len(problems) == 1
    assert hashed or damage == "remove" or damage == "truncate"


def test_a_changed_record_or_a_garbage_stamp_gets_the_full_check(stamped):
    entry, hashed = stamped
    write_record(entry)  # rewritten: its own stat is part of the stamp
    assert verify_entry_stamped(entry) == [] and len(hashed) == 4  # hashed twice: record + check
    hashed.clear()
    (entry / STAMP).write_text('{"format": 1, "files": [')
    assert verify_entry_stamped(entry) == [] and len(hashed) == 2


def test_the_stamp_holds_each_file_and_the_record_as_os_stat_sees_them(stamped):
    # The stamp is compared with one os.scandir walk's DirEntry.stat(): it must say what
    # os.stat of each path says, the record's included, or a stamp would never match (or
    # match what it should not).
    entry, _ = stamped
    stats = _integrity._stat_entry(entry)
    assert sorted(stats) == ["k.bin", "k.json", RECORD]
    for rel, got in stats.items():
        st = os.stat(entry / rel)
        assert got == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def test_a_dangling_link_in_the_records_place_gets_the_full_check(stamped):
    # Left out of the stat as Path.exists left it out: the stamp no longer matches, so the
    # check runs in full (here the structural check, as for an entry with no record at all).
    entry, _ = stamped
    (entry / RECORD).unlink()
    (entry / RECORD).symlink_to(entry / "gone.json")
    assert RECORD not in _integrity._stat_entry(entry)
    assert verify_entry_stamped(entry, lambda e: ["the structural check ran"]) == [
        "the structural check ran"
    ]


def test_files_changed_just_before_the_check_are_not_stamped(tmp_path):
    """A file written within the racy window may change again without its ctime moving (coarse
    clock ticks): such an entry is checked in full, and stamped only once its files are older."""
    entry = _entry(tmp_path)
    write_record(entry)
    assert verify_entry_stamped(entry) == [] and not (entry / STAMP).exists()


def test_a_bad_entry_is_never_stamped(tmp_path, monkeypatch):
    monkeypatch.setattr(_integrity, "_RACY_NS", 0)
    entry = _entry(tmp_path)
    write_record(entry)
    (entry / "k.json").write_bytes(b"{}")
    assert verify_entry_stamped(entry)[0] == "k.json has 2 bytes, recorded 13"
    assert not (entry / STAMP).exists()
    assert verify_entry_stamped(entry)[0] == "k.json has 2 bytes, recorded 13"
