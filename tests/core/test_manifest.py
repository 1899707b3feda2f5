"""The manifest's text: the reader of exactly what warmkit writes agrees with the JSON reader,
and any text it does not vouch for (edited, damaged, re-spaced, reformatted) goes to the JSON
reader, which checks every entry as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warmkit
from warmkit import RecordedEntry
from warmkit._registry.manifest.entries import parse_recorded, read_manifest, written_groups
from warmkit._registry.manifest.text import manifest_text, split_written
from warmkit._registry.recorded import key_entry

from . import _kernels

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),  # newlines, quotes, "}]" and non-ASCII included
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
entries_st = st.lists(
    st.builds(
        lambda kind, kernel, spec, target, reason: RecordedEntry.make(
            backend=None if kind == "key" and kernel == "k" else "b",
            kind=kind,
            kernel=kernel,
            name=f"name of {kernel}",
            spec=spec,
            target=target,
            reason=reason,
        ),
        st.sampled_from(["raw", "key"]),
        st.sampled_from(["k", "pkg.mod:fn", 'odd "name"\n}]']),
        st.dictionaries(st.text(max_size=4), json_value, max_size=3),
        st.sampled_from([None, "cuda:90"]),
        st.sampled_from([None, "defined in __main__"]),
    ),
    min_size=1,
    max_size=8,
)
DATA = {"format": "warmkit.manifest", "version": 2, "registrations": []}


@settings(max_examples=60)
@given(entries_st)
def test_what_is_written_is_read_back_as_the_json_reader_reads_it(tmp_path_factory, entries):
    text = manifest_text(DATA, written_groups(entries))
    head, groups = split_written(text)
    assert head == DATA
    expected: dict[tuple[object, ...], list[tuple[str, str]]] = {}
    for e in entries:  # grouped by their shared fields, groups and entries in first-seen order
        head = (e.backend, e.kind, e.kernel, e.name, e.target, e.replayable, e.reason)
        expected.setdefault(head, []).append((e.id, e.spec_json))
    assert [pairs for _, pairs in groups] == list(expected.values())
    path = tmp_path_factory.mktemp("m") / "m.json"
    path.write_text(text)
    data, read = read_manifest(path)
    slow = parse_recorded(json.loads(text), keep=True)
    assert read == slow
    assert [e._parsed for e in read] == [e._parsed for e in slow]  # kept for key entries only
    assert [g["entries"] for g in data["recorded"]] == [[]] * len(groups)


def _saved(tmp_path: Path) -> tuple[Path, list[RecordedEntry]]:
    registry = warmkit.WarmupRegistry()
    registry.add(_kernels.PyKernel(), n=7, flag=False)
    entries = [
        key_entry(_kernels.PyKernel, _kernels.PyKernel.CompileKey(n, True)) for n in range(3)
    ]
    entries.append(
        RecordedEntry.make(
            backend="triton",
            kind="raw",
            kernel="pkg.mod:fn",
            name="fn",
            spec={"args": {"x": [1, 2]}, "options": {"num_warps": 4}},
        )
    )
    for e in entries:
        registry.add_recorded(e)
    path = tmp_path / "m.json"
    registry.save(path)
    return path, entries


def test_a_saved_manifest_loads_through_the_reader_of_written_text(tmp_path):
    path, entries = _saved(tmp_path)
    assert read_manifest(path)[1] == entries
    loaded = warmkit.WarmupRegistry.load(path)
    assert loaded.recorded() == entries
    assert (
        loaded.to_dict() == warmkit.WarmupRegistry.from_dict(json.loads(path.read_text())).to_dict()
    )


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        # a bit flipped in a spec, in an id, in a group's shared field: the id check catches it
        (lambda t: _replace_once(t, '"n":1}', '"n":3}'), "does not match its contents"),
        (lambda t: t[: t.index('["') + 2] + "0" * 24 + t[t.index('["') + 26 :], "does not match"),
        (
            lambda t: _replace_once(t, '"name": "fn"', '"name": "fn", "kernel2": 1'),
            "kernel2",
        ),
        (
            lambda t: _replace_once(t, '"kernel": "pkg.mod:fn"', '"kernel": "pkg.mod:gn"'),
            "does not match",
        ),
        (lambda t: _replace_once(t, '"kind": "raw"', '"kind": 3'), "kind"),
        # truncated, a trailing comma after the last group, garbage after the end
        (lambda t: t[: len(t) // 2], "invalid JSON"),
        (lambda t: _replace_once(t, "    ]}\n  ]\n}\n", "    ]},\n  ]\n}\n"), "invalid JSON"),
        (lambda t: t + "x\n", "invalid JSON"),
    ],
)
def test_damage_goes_to_the_json_reader_and_is_reported(tmp_path, damage, message):
    path, _ = _saved(tmp_path)
    path.write_text(damage(path.read_text()))
    assert split_written(path.read_text()) is None or read_manifest(path)[1] is None
    with pytest.raises(warmkit.ManifestError, match=message):
        warmkit.WarmupRegistry.load(path)
    with pytest.raises(warmkit.ManifestError, match=message):
        warmkit.read_recorded(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda t: _replace_once(
            t, '{"key":{"flag":true,"n":1}}', '{ "key": {"n": 1, "flag": true} }'
        ),
        lambda t: json.dumps(json.loads(t), indent=4),  # reformatted by a tool
        lambda t: _replace_once(t, '{"key":{"flag":true,"n":2}}', '{"key":{"n":2,"flag":true}}'),
    ],
)
def test_text_in_another_form_is_read_as_json_with_every_id_checked(tmp_path, change):
    path, entries = _saved(tmp_path)
    path.write_text(change(path.read_text()))
    assert read_manifest(path)[1] is None  # not vouched for by the written-text reader
    assert warmkit.WarmupRegistry.load(path).recorded() == entries
    assert warmkit.read_recorded(path) == entries


def test_a_manifest_without_recorded_entries_is_read_as_json(tmp_path):
    registry = warmkit.WarmupRegistry()
    registry.add(_kernels.PyKernel(), n=1, flag=False)
    registry.save(tmp_path / "m.json")
    assert split_written((tmp_path / "m.json").read_text()) is None
    assert read_manifest(tmp_path / "m.json")[1] is None
    assert len(warmkit.WarmupRegistry.load(tmp_path / "m.json").plan()) == 1


def test_an_id_made_on_purpose_for_text_that_is_not_one_object_is_refused(tmp_path):
    import hashlib

    from warmkit._registry.manifest.entries import _id_parts

    path, entries = _saved(tmp_path)
    victim = entries[0]  # a "key" entry: its group's specs are parsed in one call
    forged = victim.spec_json + ',{"x":1}'
    head, tail = _id_parts(victim)
    ident = hashlib.sha256(f"{head}{forged}{tail}".encode()).hexdigest()[:24]
    text = _replace_once(
        path.read_text(), f'["{victim.id}", {victim.spec_json}]', f'["{ident}", {forged}]'
    )
    path.write_text(text)
    assert split_written(text) is not None  # the form is right, and so is the id's hash
    assert read_manifest(path)[1] is None
    with pytest.raises(warmkit.ManifestError, match=r"must be \[id, spec\]"):
        warmkit.read_recorded(path)
