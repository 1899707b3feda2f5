"""warmkit._schema: a malformed manifest is refused with the JSON path, the kernel and what was expected."""

from __future__ import annotations

import copy
import json

import pytest

import warmkit
from warmkit import ManifestError, WarmupRegistry
from warmkit._schema import validate_manifest

from ._kernels import OtherKernel, PyKernel


@pytest.fixture
def data():
    reg = WarmupRegistry()
    reg.add(PyKernel, n=warmkit.IntRange(1, 5), flag=[False, True])
    reg.add(OtherKernel, warmkit.zip_inputs({"m": 1}, {"m": 2}))
    return reg.to_dict()


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
]  # fmt: skip


@pytest.mark.parametrize("edit,where,words", CASES)
def test_each_malformation_names_its_json_path_kernel_and_expectation(data, edit, where, words):
    bad = copy.deepcopy(data)
    edit(bad)
    with pytest.raises(ManifestError) as info:
        WarmupRegistry.from_dict(bad, path="m.json")
    msg = str(info.value)
    assert msg.startswith("m.json: manifest does not match its schema: ")
    assert f"{where}" in msg and words in msg, msg
    if where.startswith("$.registrations[0]") and "kernel' is a required" not in words:
        assert PyKernel.__qualname__ in msg  # the kernel of that registration


def test_load_refuses_a_renamed_field_instead_of_planning_defaults(data, tmp_path):
    bad = copy.deepcopy(data)
    bad["registrations"][0]["spcae"] = bad["registrations"][0].pop("space")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match=r"\$\.registrations\[0\]"):
        WarmupRegistry.load(path)
