"""warmkit._registry.recorded: recorded entries, the recorder (dedup, atomic, several processes), replay of keys."""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warmkit
from warmkit import RecordedEntry, Recorder, monitor
from warmkit._registry.recorded import (
    decode_key,
    encode_key,
    expand_path,
    key_entry,
    resolve_recorded,
)

from . import _kernels


@pytest.fixture(autouse=True)
def _no_recording() -> Iterator[None]:
    warmkit.stop_recording()
    yield
    warmkit.stop_recording()


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=8)


@attrs.frozen
class _Key:
    a: object
    b: object


class _KeyKernel(warmkit.JitKernel["_KeyKernel.CompileKey"]):
    CompileKey = _Key

    def dispatch(self, *, a, b):
        return _Key(a, b)

    def compile(self, key):
        return _kernels.Executor(self.name, key)


def _same(x: object, y: object) -> bool:
    if isinstance(x, float) and math.isnan(x):
        return isinstance(y, float) and math.isnan(y)
    if isinstance(x, tuple):
        return type(y) is tuple and len(x) == len(y) and all(map(_same, x, y))
    return type(x) is type(y) and x == y and repr(x) == repr(y)  # -0.0 is not 0.0


@settings(max_examples=100, deadline=None)
@given(a=values, b=values)
def test_key_fields_round_trip_losslessly_through_a_manifest_file(a, b, tmp_path_factory) -> None:
    entry = key_entry(_KeyKernel, _Key(a, b))
    assert entry.replayable
    path = tmp_path_factory.mktemp("m") / "m.json"
    Recorder(path).add(entry)
    (back,) = warmkit.read_recorded(path)
    assert back == entry and back.id == entry.id
    key = decode_key(_KeyKernel, back.spec["key"])
    assert _same(key.a, a) and _same(key.b, b)


def test_a_key_with_an_object_field_is_recorded_unreplayable_with_the_reason() -> None:
    entry = key_entry(_KeyKernel, _Key(object(), 1))
    assert not entry.replayable
    assert "cannot be saved" in entry.reason and "field 'a'" in entry.reason


def test_entries_deduplicate_and_a_tampered_entry_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rec = Recorder(path)
    e = key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(3, True))
    assert rec.add(e) is True
    assert rec.add(e) is False
    assert Recorder(path).add(e) is True  # another process: new to it, still one entry on disk
    data = json.loads(path.read_text())
    (group,) = data["recorded"]
    assert len(group["entries"]) == 1
    group["entries"][0][1]["key"]["n"] = 4
    path.write_text(json.dumps(data))
    with pytest.raises(warmkit.ManifestError, match="does not match its contents"):
        warmkit.read_recorded(path)


def test_the_recorder_never_overwrites_a_file_it_cannot_read(tmp_path: Path) -> None:
    e = key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(3, True))
    for text in ('{"not": "a manifest"}', '{"format": "warmkit.manifest", "vers'):
        path = tmp_path / "x.json"
        path.write_text(text)
        with pytest.raises(warmkit.ManifestError):
            Recorder(path).add(e)
        assert path.read_text() == text
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    rec = Recorder(bad)
    rec.add_safely(lambda: e)  # inside a hook: logged, never raised
    assert bad.read_text() == "{"


def _record_many(path: str, rank: int, n: int) -> None:
    rec = Recorder(path)
    for i in range(n):
        # half the keys are shared by every process, half are this process's own
        key = _kernels.PyKernel.CompileKey(i if i % 2 else 1000 + rank * n + i, bool(rank % 2))
        shared = _kernels.PyKernel.CompileKey(i, False)
        rec.add(key_entry(_kernels.PyKernel, key))
        rec.add(key_entry(_kernels.PyKernel, shared))


def test_concurrent_processes_record_into_one_file_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_record_many, args=(str(path), r, 12)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got = {e.id for e in warmkit.read_recorded(path)}
    expected = set()
    for rank in range(4):
        for i in range(12):
            key = _kernels.PyKernel.CompileKey(i if i % 2 else 1000 + rank * 12 + i, bool(rank % 2))
            expected.add(key_entry(_kernels.PyKernel, key).id)
            expected.add(key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(i, False)).id)
    assert got == expected
    groups = json.loads(path.read_text())["recorded"]
    assert sum(len(g["entries"]) for g in groups) == len(expected)
    assert not list(tmp_path.glob(".*.tmp"))


def test_rank_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    assert expand_path(tmp_path / "run-{rank}.json") == tmp_path / "run-3.json"
    monkeypatch.setenv("WARMKIT_RANK", "5")
    assert Recorder(tmp_path / "run-{rank}.json").path.name == "run-5.json"


def test_record_needs_the_monitor_and_reads_the_environment(monkeypatch, tmp_path) -> None:
    with pytest.raises(ValueError, match="needs the monitor"):
        warmkit.WarmupConfig(record=tmp_path / "r.json", monitor="off")
    monkeypatch.setenv("WARMKIT_RECORD", str(tmp_path / "r-{rank}.json"))
    assert warmkit.WarmupConfig.from_env().record == str(tmp_path / "r-{rank}.json")


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_unwarmed_keys_are_recorded_in_warn_and_error_mode_then_replayed(
    mode: str, tmp_path: Path, registry: warmkit.WarmupRegistry
) -> None:
    path = tmp_path / "run.json"
    kernel = _kernels.PyKernel()
    kernel.register_warmup(n=[1, 2])
    warmkit.warmup(warmkit.WarmupConfig(monitor=mode, record=path, progress="off"), registry)
    missed = _kernels.PyKernel.CompileKey(7, True)
    if mode == "error":
        with pytest.raises(warmkit.RuntimeCompileError):
            kernel.get_or_compile(missed)
    else:
        kernel.get_or_compile(missed)
    (entry,) = warmkit.read_recorded(path)
    assert entry.kind == "key" and entry.name == _kernels.PyKernel.name and entry.replayable
    assert entry.spec == {"key": {"n": 7, "flag": True}}

    # the next start: the manifest's recorded key is warmed like a declared one, in its own rows
    monitor.disarm()
    _kernels.reset()
    loaded = warmkit.WarmupRegistry.load(path)
    assert len(loaded) == 0 and len(loaded.recorded()) == 1
    report = warmkit.warmup(warmkit.WarmupConfig(monitor="error", progress="off"), loaded)
    (row,) = report.entries
    assert (row.kind, row.key, row.status) == ("recorded", missed, "compiled")
    assert "[recorded]" in report.table()
    assert report.to_dict()["entries"][0]["kind"] == "recorded"
    kernel.get_or_compile(missed)  # warm: no RuntimeCompileError


def test_a_stale_recorded_entry_fails_alone_in_collect_mode(tmp_path: Path) -> None:
    reg = warmkit.WarmupRegistry()
    reg.add(_kernels.OtherKernel, m=[1])
    good = key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(5, False))
    gone = RecordedEntry.make(
        backend=None, kind="key", kernel="no_such_module_xyz:Kernel", name="gone", spec={"key": {}}
    )
    main = key_entry(_KeyKernel, _Key(1, 2))
    main = attrs.evolve(main, replayable=False, reason="it is defined in __main__")
    for e in (good, gone, main):
        reg.add_recorded(e)
    path = reg.save(tmp_path / "m.json")
    loaded = warmkit.WarmupRegistry.load(path)
    with pytest.raises(warmkit.WarmupError) as info:
        warmkit.warmup(warmkit.WarmupConfig(on_error="collect", progress="off"), loaded)
    rows = {(e.kernel, e.status) for e in info.value.report.entries}
    assert rows == {
        ("tests.other", "compiled"),
        (_kernels.PyKernel.name, "compiled"),
        ("gone", "failed"),
        (main.name, "skipped"),
    }
    failed = info.value.report.failures[0]
    assert "no_such_module_xyz" in failed.error and failed.kind == "recorded"
    assert "__main__" in info.value.report.table()


def test_resolve_recorded_reports_a_backend_without_replay(fake_backend) -> None:
    entries = [
        RecordedEntry.make(backend="fake", kind="raw", kernel="m:f", name="m.f", spec={"n": n})
        for n in (1, 2)
    ]
    items = resolve_recorded(entries)
    assert [item.entry for item in items] == entries  # each entry fails, the second one too
    for item in items:
        assert item.kernel is None and "cannot replay recorded kernels" in str(item.error)


class _Replays(_kernels.FakeBackend):
    """A backend that replays raw entries as PyKernel keys, flagged by which backend it is."""

    def __init__(self, flag: bool) -> None:
        super().__init__()
        self.flag = flag

    def recorded_kernel(self, entry: Any) -> tuple[Any, Any]:
        return _kernels.PyKernel(), _kernels.PyKernel.CompileKey(entry.spec["n"], self.flag)


def test_resolve_recorded_asks_each_raw_entrys_own_backend() -> None:
    from warmkit.testing import backend_override

    def raw(backend: str, n: int) -> RecordedEntry:
        return RecordedEntry.make(
            backend=backend, kind="raw", kernel="m:f", name="f", spec={"n": n}
        )

    with backend_override("yes", _Replays(True)), backend_override("no", _Replays(False)):
        items = resolve_recorded([raw("yes", 1), raw("no", 2), raw("yes", 3), raw("gone", 4)])
    assert [item.key for item in items[:3]] == [
        _kernels.PyKernel.CompileKey(1, True),
        _kernels.PyKernel.CompileKey(2, False),
        _kernels.PyKernel.CompileKey(3, True),
    ]
    assert items[3].key is None and isinstance(items[3].error, warmkit.BackendUnavailableError)


def test_encode_key_refuses_non_keys() -> None:
    with pytest.raises(TypeError):
        encode_key({"a": 1})
    assert sys.modules["warmkit._registry.recorded"].RecordedEntry is RecordedEntry


json_data = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(json_data)
def test_the_encoder_for_parsed_json_agrees_with_the_canonical_one(data) -> None:
    from warmkit._registry.manifest.codec import _encode_canonical, _encode_parsed

    parsed = json.loads(json.dumps(data))
    assert _encode_parsed(parsed) == _encode_canonical(parsed)
    for encode in (_encode_parsed, _encode_canonical):  # both refuse what JSON cannot hold
        with pytest.raises(ValueError, match="Out of range float"):
            encode([parsed, float("inf")])


@given(json_data, st.sampled_from(["", " ", "\n", "x", "]", " 1"]))
def test_the_decoder_for_canonical_json_is_json_loads(data, around) -> None:
    from warmkit._registry.manifest.codec import _canonical, _decode_canonical

    text = _canonical(data)
    assert _decode_canonical(text) == json.loads(text)
    for other in (around + text, text + around, around):  # not canonical: json.loads decides
        try:
            expected = json.loads(other)
        except json.JSONDecodeError as exc:
            with pytest.raises(json.JSONDecodeError, match=re.escape(exc.msg)):
                _decode_canonical(other)
        else:
            assert _decode_canonical(other) == expected


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": 3}, "field 'kind' has type int"),
        ({"spec": [1]}, "field 'spec' has type list"),
        ({"backend": 1}, "field 'backend' has type int"),
        ({"target": False}, "field 'target' has type bool"),
        ({"replayable": "yes"}, "field 'replayable' has type str"),
        ({"kind": "other"}, "'kind' must be in"),
        ({"spec": {"key": {"n": float("nan")}}}, "Out of range float"),
        ({"id": "0" * 24}, "does not match its contents"),
    ],
)
def test_a_bad_recorded_field_is_refused_by_both_parsers(keep, change, message) -> None:
    good = key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(3, True)).to_dict()
    assert RecordedEntry.from_dict(json.loads(json.dumps(good)), keep=keep).id == good["id"]
    with pytest.raises(warmkit.ManifestError, match=message):
        RecordedEntry.from_dict(good | change, index=7, keep=keep)
    for field in ("backend", "target", "spec"):
        bad = dict(good)
        del bad[field]
        with pytest.raises(warmkit.ManifestError, match=f"missing field '{field}'"):
            RecordedEntry.from_dict(bad, keep=keep)


# -- the manifest's version 2: the recorded section in groups ---------------------------------


def _entries(n: int = 3) -> list[RecordedEntry]:
    py = [key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(i, True)) for i in range(n)]
    other = key_entry(_kernels.OtherKernel, _kernels.OtherKernel.CompileKey(7))
    lost = RecordedEntry.make(
        backend="triton", kind="raw", kernel="m:f", name="m.f", spec={"args": []}, reason="why"
    )
    return [py[0], other, *py[1:], lost]  # kernels interleaved, as a run records them


def _save(tmp_path: Path, entries: list[RecordedEntry]) -> Path:
    registry = warmkit.WarmupRegistry()
    for e in entries:
        registry.add_recorded(e)
    return registry.save(tmp_path / "m.json")


def test_version_2_writes_one_group_per_kernel_and_one_line_per_entry(tmp_path: Path) -> None:
    entries = _entries()
    path = _save(tmp_path, entries)
    text = path.read_text()
    data = json.loads(text)
    assert data["version"] == 2
    groups = data["recorded"]
    assert [(g["kernel"], len(g["entries"])) for g in groups] == [
        (entries[0].kernel, 3),
        (entries[1].kernel, 1),
        ("m:f", 1),
    ]
    assert groups[2]["reason"] == "why" and groups[2]["replayable"] is False
    assert "reason" not in groups[0]
    assert groups[0]["entries"][1] == [entries[2].id, entries[2].spec]
    for e in entries:  # grep-able: each entry is one line holding its id and canonical spec
        assert f'["{e.id}", {e.spec_json}]' in text
    # the file is what to_dict() says, and it reads back as the same entries, grouped
    registry = warmkit.WarmupRegistry.load(path)
    assert registry.to_dict() == data
    grouped = [entries[0], *entries[2:4], entries[1], entries[4]]
    assert registry.recorded() == grouped
    assert warmkit.read_recorded(path) == registry.recorded()
    # load() sets each id itself (not through the cached property, which == ignores):
    # each must be the id its entry had when written, in the grouped order.
    assert [e.id for e in registry.recorded()] == [e.id for e in grouped]
    assert [e.id for e in warmkit.read_recorded(path)] == [e.id for e in grouped]


def _v1(tmp_path: Path, entries: list[RecordedEntry], name: str = "v1.json") -> Path:
    path = tmp_path / name
    data = {
        "format": "warmkit.manifest",
        "version": 1,
        "registrations": [
            {"kernel": f"{_kernels.PyKernel.__module__}:PyKernel", "space": {"n": 5}}
        ],
        "recorded": [e.to_dict() for e in entries],
    }
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_version_1_manifest_is_still_read_and_recording_into_it_upgrades_it(
    tmp_path: Path,
) -> None:
    entries = _entries()
    path = _v1(tmp_path, entries)
    registry = warmkit.WarmupRegistry.load(path)
    assert registry.recorded() == entries  # version 1 keeps its order
    assert [r.space for r in registry] == [{"n": 5}]
    assert warmkit.read_recorded(path) == entries
    new = key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(99, False))
    assert Recorder(path).add(new)
    data = json.loads(path.read_text())
    assert data["version"] == 2 and data["registrations"] == [
        {"kernel": f"{_kernels.PyKernel.__module__}:PyKernel", "space": {"n": 5}}
    ]
    assert set(warmkit.read_recorded(path)) == {*entries, new}
    # a damaged version-1 entry is refused, never carried into the new file
    bad = _v1(tmp_path, entries, "bad.json")
    data = json.loads(bad.read_text())
    data["recorded"][1]["spec"]["key"]["m"] = 8
    bad.write_text(before := json.dumps(data))
    with pytest.raises(warmkit.ManifestError, match="recorded entry 1.*does not match"):
        Recorder(bad).add(new)
    assert bad.read_text() == before


def test_recording_refuses_a_manifest_of_an_unknown_version(tmp_path: Path) -> None:
    path = _save(tmp_path, _entries())
    data = json.loads(path.read_text())
    path.write_text(text := json.dumps(data | {"version": 3}))
    new = key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(99, False))
    with pytest.raises(warmkit.ManifestError, match="version 3 is not supported"):
        Recorder(path).add(new)
    with pytest.raises(warmkit.ManifestError, match="version 3 is not supported"):
        warmkit.read_recorded(path)
    assert path.read_text() == text


def _flip(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


#: The two readers of a manifest's recorded section: each must refuse a damaged one.
_READERS = {"load": warmkit.WarmupRegistry.load, "read_recorded": warmkit.read_recorded}


@pytest.mark.parametrize("reader", ["load", "read_recorded"])
@pytest.mark.parametrize(
    ("edit", "words"),
    [
        # one bit of one grouped entry's spec (n=2 -> n=3), of its id, of its group's kernel
        (lambda t, e: _flip(t, '"n":2', '"n":3'), ["group 0", "entry 2", "does not match"]),
        (
            lambda t, e: _flip(t, e[3].id, e[3].id[:-1] + chr(ord(e[3].id[-1]) ^ 1)),
            ["group 0", "entry 2", "does not match"],
        ),
        (
            lambda t, e: _flip(
                t, '"target": null, "replayable": false', '"target": null, "replayable": true'
            ),
            [],
        ),
        (lambda t, e: t[: len(t) // 2], ["invalid JSON"]),
    ],
)
def test_a_damaged_grouped_entry_is_refused_naming_the_path_group_entry_and_kernel(
    tmp_path: Path, reader: str, edit: Any, words: list[str]
) -> None:
    entries = _entries()
    path = _save(tmp_path, entries)
    path.write_text(edit(path.read_text(), entries))
    with pytest.raises(warmkit.ManifestError) as info:
        _READERS[reader](path)
    message = str(info.value)
    assert str(path) in message and info.value.path == path
    for word in words:
        assert word in message
    if "does not match" in message:
        assert repr(entries[0].kernel) in message
    if not words:  # replayable with a reason: the group is named, with its kernel
        assert "group 2" in message and "'m:f'" in message


@pytest.mark.parametrize("reader", ["load", "read_recorded"])
@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"backend": 5}, ["backend"]),
        ({"replayable": "yes"}, ["replayable"]),
        ({"kind": 3}, ["kind"]),
        ({"kind": "other"}, ["kind"]),
        ({"entries": {}}, ["entries"]),
        ({"entries": [["only an id"]]}, ["0", "id"]),
        ({"entries": [[1, {}]]}, ["0", "id"]),
        ({"spec": {}}, ["spec"]),
    ],
)
def test_a_group_header_of_a_wrong_type_is_refused_naming_the_group_and_kernel(
    tmp_path: Path, reader: str, change: dict[str, Any], words: list[str]
) -> None:
    path = _save(tmp_path, _entries())
    data = json.loads(path.read_text())
    data["recorded"][1].update(change)
    path.write_text(json.dumps(data))
    with pytest.raises(warmkit.ManifestError) as info:
        _READERS[reader](path)
    message = str(info.value)
    where = "$.recorded[1]" if reader == "load" else "recorded group 1"
    assert where in message and str(path) in message, message
    assert repr(_entries()[1].kernel) in message, message
    for word in words:
        assert word in message, message


def test_from_dict_reads_version_2_data_without_keeping_the_callers_objects() -> None:
    registry = warmkit.WarmupRegistry()
    for e in _entries():
        registry.add_recorded(e)
    raw = registry.to_dict()
    loaded = warmkit.WarmupRegistry.from_dict(raw)
    assert sorted(loaded.recorded(), key=repr) == sorted(registry.recorded(), key=repr)
    raw["recorded"][0]["entries"][0][1]["key"]["n"] = 1234  # the caller's data, changed after
    assert resolve_recorded(loaded.recorded())[0].key == _kernels.PyKernel.CompileKey(0, True)


@pytest.mark.parametrize("jobs", [1, 2])
def test_each_key_is_reported_once_with_the_kind_it_came_from(jobs: int) -> None:
    """A recorded key also declared is declared; a key recorded twice is compiled once."""
    reg = warmkit.WarmupRegistry()
    reg.add(_kernels.PyKernel, n=[1, 2])
    key = _kernels.PyKernel.CompileKey
    for k, target in ((key(2, False), None), (key(7, False), None), (key(7, False), "cuda:90")):
        assert reg.add_recorded(key_entry(_kernels.PyKernel, k, target))
    assert len(reg.recorded()) == 3  # three ids: the target is part of an entry's identity
    report = warmkit.warmup(warmkit.WarmupConfig(progress="off", jobs=jobs), reg)
    kinds = {(e.key.n, e.kind, e.status) for e in report.entries}
    assert len(report.entries) == 3
    assert kinds == {(1, "declared", "compiled"), (2, "declared", "compiled"),
                     (7, "recorded", "compiled")}  # fmt: skip


def test_a_recorded_key_not_attempted_after_a_failure_is_still_reported_as_recorded() -> None:
    reg = warmkit.WarmupRegistry()
    reg.add(_kernels.PyKernel, n=[1])
    key = _kernels.PyKernel.CompileKey
    assert reg.add_recorded(key_entry(_kernels.PyKernel, key(7, False)))
    _kernels.PyKernel.fail_on = frozenset({key(1, False)})
    try:
        with pytest.raises(warmkit.WarmupError) as info:
            warmkit.warmup(warmkit.WarmupConfig(progress="off", jobs=1, on_error="raise"), reg)
    finally:
        _kernels.PyKernel.fail_on = frozenset()
    by_n = {e.key.n: e for e in info.value.report.entries}
    assert (by_n[1].kind, by_n[1].status) == ("declared", "failed")
    assert (by_n[7].kind, by_n[7].status) == ("recorded", "skipped")
    assert "not attempted" in by_n[7].error
