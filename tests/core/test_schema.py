"""warmkit._registry.manifest.schema: a malformed manifest is refused with the JSON path, the kernel and what was expected."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warmkit
from warmkit import ManifestError, WarmupRegistry
from warmkit._registry.manifest import schema as _schema
from warmkit._registry.manifest.schema import validate_manifest

from ._kernels import OtherKernel, PyKernel


@pytest.fixture
def data():
    reg = WarmupRegistry()
    reg.add(PyKernel, n=warmkit.IntRange(1, 5), flag=[False, True])
    reg.add(OtherKernel, warmkit.zip_inputs({"m": 1}, {"m": 2}))
    for n in range(3):  # registrations[2]: consecutive points, written as one of rows
        reg.add(PyKernel, n=n, flag=True)
    data = reg.to_dict()
    assert data["registrations"][2]["points"] == {
        "names": ["n", "flag"],
        "rows": [[0, True], [1, True], [2, True]],
    }
    return data


def test_a_saved_manifest_matches_its_schema(data):
    validate_manifest(data)
    validate_manifest(json.loads(json.dumps(data)))


def _space(d):
    return d["registrations"][0]["space"]


CASES = [
    # (edit, JSON path, words of the message)
    (lambda d: d["registrations"][0].update(spaces=d["registrations"][0].pop("space")),
     "$.registrations[0]", "'space' is a required property"),
    (lambda d: d["registrations"][0].update(extra=1), "$.registrations[0]", "'extra' was unexpected"),
    (lambda d: d.update(registration=[]), "$", "'registration' was unexpected"),
    (lambda d: _space(d).update(n={"range": [1, 5]}), "$.registrations[0].space.n", "[start, stop, step]"),
    (lambda d: _space(d).update(n={"range": [1, 5, 0]}), "$.registrations[0].space.n.range[2]", "non-zero integer"),
    (lambda d: _space(d).update(n={"range": ["a", 5, 1]}), "$.registrations[0].space.n", "integers"),
    (lambda d: _space(d).update(n={"rnage": [1, 5, 1]}), "$.registrations[0].space.n", "an axis"),
    (lambda d: _space(d).update(n=[1, 2]), "$.registrations[0].space.n", "an axis"),
    (lambda d: _space(d).update(n={"list": []}), "$.registrations[0].space.n", "an axis"),
    (lambda d: d["registrations"][1]["zip"][0]["rows"].append([]), "$.registrations[1].zip[0].rows[2]",
     "one value per name (1)"),
    (lambda d: d["registrations"][1]["zip"][0]["rows"][0].append(7), "$.registrations[1].zip[0].rows[0]",
     "one value per name (1)"),
    (lambda d: d["registrations"][1]["zip"][0].pop("names"), "$.registrations[1].zip[0]", "'names' is a required"),
    (lambda d: d["registrations"][0].pop("kernel"), "$.registrations[0]", "'kernel' is a required"),
    (lambda d: d.update(registrations={}), "$.registrations", "not of type 'array'"),
    (lambda d: _points(d)["rows"][1].pop(), "$.registrations[2].points.rows[1]", "one value per name (2)"),
    (lambda d: _points(d)["rows"][1].append(1), "$.registrations[2].points.rows[1]", "one value per name (2)"),
    (lambda d: _points(d)["rows"][0].__setitem__(0, {"tuple": [1]}), "$.registrations[2].points.rows[0][0]",
     "not of type"),
    (lambda d: _points(d).update(rows=[]), "$.registrations[2].points.rows", "should be non-empty"),
    (lambda d: _points(d).update(names="n"), "$.registrations[2].points.names", "not of type 'array'"),
    (lambda d: d["registrations"][2].update(space={}), "$.registrations[2]", "'space' was unexpected"),
    (lambda d: d.update(version=1), "$.registrations[2]", "'space' is a required property"),
]  # fmt: skip


def _points(d):
    return d["registrations"][2]["points"]


@pytest.mark.parametrize("edit,where,words", CASES)
def test_each_malformation_names_its_json_path_kernel_and_expectation(data, edit, where, words):
    bad = copy.deepcopy(data)
    edit(bad)
    with pytest.raises(ManifestError) as info:
        WarmupRegistry.from_dict(bad, path="m.json")
    msg = str(info.value)
    assert msg.startswith("m.json: manifest does not match its schema: ")
    assert f"{where}" in msg and words in msg, msg
    if (
        where.startswith(("$.registrations[0]", "$.registrations[2]"))
        and "kernel' is a " not in words
    ):
        assert PyKernel.__qualname__ in msg  # the kernel of that registration


def test_load_refuses_a_renamed_field_instead_of_planning_defaults(data, tmp_path):
    bad = copy.deepcopy(data)
    bad["registrations"][0]["spcae"] = bad["registrations"][0].pop("space")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match=r"\$\.registrations\[0\]"):
        WarmupRegistry.load(path)


# -- the fast validator (jsonschema-rs) accepts exactly what jsonschema accepts ---------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=2)
)
_tags = st.sampled_from(["tuple", "float", "range", "choices", "list", "names", "rows", "x"])
_json = st.recursive(
    _scalars | st.sampled_from(["inf", "-inf", "nan", 0, 1.0]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tags, inner, max_size=2),
    max_leaves=8,
)
# Mostly well-formed values and axes, so that both answers come up often.
_value = st.recursive(
    _scalars | st.builds(lambda f: {"float": f}, st.sampled_from(["inf", "-inf", "nan", "1"])),
    lambda inner: st.builds(lambda v: {"tuple": v}, st.lists(inner, max_size=2)),
    max_leaves=4,
)
_axis = st.one_of(
    _value,
    st.builds(lambda *r: {"range": list(r)}, *[st.integers(-2, 2)] * 2, st.integers(-1, 1)),
    st.builds(
        lambda r: {"range": r}, st.lists(st.integers(-2, 2) | _scalars, min_size=2, max_size=4)
    ),
    st.builds(lambda v: {"choices": v}, st.lists(_value, max_size=2)),
    st.builds(lambda v: {"list": v}, st.lists(_value, max_size=2)),
    _json,
)
_group = st.fixed_dictionaries(
    {
        "names": st.sampled_from([["a"], ["a", "b"], ["a", "b"], [], ["a", "a"]]),
        "rows": st.lists(st.lists(_value, min_size=1, max_size=2), max_size=2) | _json,
    }
)
# One registration around the generated parts (so that one wrong part decides), and now
# and then a changed top-level field.
_manifest = st.builds(
    lambda axis, group, kernel, top: (
        {
            "format": "warmkit.manifest",
            "version": 1,
            "registrations": [
                {"kernel": kernel, "space": {"n": axis}}
                | ({} if group is None else {"zip": [group]})
            ],
        }
        | top
    ),
    _axis,
    st.none() | _group,
    st.sampled_from(["mod:K"] * 6 + ["", 0]),
    st.dictionaries(
        st.sampled_from(["format", "version", "recorded", "warmkit_version", "extra"]),
        st.sampled_from([1, 1.0, True, "warmkit.manifest", "0.1", [], [{}], [1]]),
        max_size=1,
    ),
)


@settings(max_examples=400, deadline=None)
@given(_manifest)
def test_the_fast_validator_agrees_with_jsonschema(data):
    fast = _schema._fast_validator()
    assert fast is not None, "jsonschema-rs is a dependency of warmkit"
    assert (_schema._errors(data) == []) == (_schema._jsonschema_errors(data) == [])


def test_the_fast_validator_itself_accepts_what_save_writes_in_either_version(data, tmp_path):
    # validate_manifest falls back to jsonschema when jsonschema-rs refuses: that would be
    # correct but slow, so the fast validator must accept every saved manifest itself.
    registry = WarmupRegistry.from_dict(data)
    registry.add_recorded(
        warmkit.RecordedEntry.make(backend=None, kind="key", kernel="m:K", name="K", spec={"k": 1})
    )
    saved = json.loads(registry.save(tmp_path / "m.json").read_text())
    assert saved["version"] == 2 and "points" in saved["registrations"][2] and saved["recorded"]
    assert _schema._fast_validator(2).is_valid(saved) and not _schema._jsonschema_errors(saved)
    v1 = {k: v for k, v in saved.items() if k != "recorded"} | {"version": 1}
    v1["registrations"] = [r for r in v1["registrations"] if "points" not in r]
    v1["recorded"] = [e.to_dict() for e in registry.recorded()]
    assert _schema._fast_validator(1).is_valid(v1) and not _schema._jsonschema_errors(v1)
    assert not _schema._fast_validator(1).is_valid(saved)  # a version-2 file is not version 1
