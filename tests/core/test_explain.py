"""``warmkit._cache.misses``'s comparison: the nearest entry of the kernel and the first factor that differs."""

from __future__ import annotations

import json

import warmkit
from warmkit._cache.misses import Explanation, miss_reason, nearest_difference
from warmkit.testing import backend_override

from ._kernels import FakeBackend, ScaleKernel

HERE = {
    "target": "cuda:90",
    "version": "3.9.0",
    "kernel": "k",
    "source m:f": "aaa",
    "global m.P": "tl.constexpr('tf32')",
    "key": "K(16)",
    "option num_warps": "8",
}


def test_an_option_alone_is_named_with_both_values() -> None:
    entry = HERE | {"option num_warps": "4"}
    assert nearest_difference(HERE, {"E1": entry}, ["target", "version"]) == (
        "E1",
        "option num_warps",
        "4",
        "8",
    )


def test_factors_are_reported_fingerprint_first_then_source_global_key_option() -> None:
    entry = HERE | {"version": "3.6.0", "global m.P": "x", "key": "K(32)", "option num_warps": "4"}
    assert nearest_difference(HERE, {"E": entry}, ["target", "version"])[1] == "version"
    entry = HERE | {"global m.P": "x", "key": "K(32)", "source m:f": "bbb"}
    assert nearest_difference(HERE, {"E": entry}, ["target", "version"])[1] == "source m:f"


def test_the_nearest_entry_agrees_on_most_factors_and_other_kernels_are_ignored() -> None:
    far = HERE | {"key": "K(32)", "option num_warps": "4"}
    near = HERE | {"key": "K(64)"}
    other = HERE | {"kernel": "other"}
    found = nearest_difference(HERE, {"far": far, "near": near, "other": other})
    assert found == ("near", "key", "K(64)", "K(16)")
    assert nearest_difference(HERE, {"other": other}) is None


def test_factors_only_one_side_has_are_not_compared() -> None:
    entry = {k: v for k, v in HERE.items() if not k.startswith("option")}  # no record of options
    assert nearest_difference(HERE, {"E": entry}) == ("E", "", "", "")


def test_a_backend_that_cannot_explain_gives_no_reason_and_never_raises() -> None:
    assert miss_reason(object(), object(), "key", None) is None


def test_an_explanation_reads_as_one_line() -> None:
    e = Explanation(
        "triton", "k", "K(16)", "miss", "nearest entry E differs in key: a there, b here"
    )
    assert e.line() == "MISS k K(16): nearest entry E differs in key: a there, b here"
    assert Explanation("triton", "k", "K(16)", "hit", entry="E").line() == "HIT k K(16)"


class _Pinning(FakeBackend):
    """A fake backend that pins a kernel's identity, or fails to."""

    fail = False

    def identity_pins(self, kernel):
        if type(self).fail:
            raise RuntimeError("Unsupported function referenced: <lambda>")
        return {"globals": [{"module": "m", "name": "P", "constexpr": True, "value": "tf32"}]}


def test_save_writes_pins_and_a_failed_pin_saves_the_manifest_unpinned(tmp_path, caplog):
    reg = warmkit.WarmupRegistry()
    reg.add(ScaleKernel, n=64)
    with backend_override("fake", _Pinning()):
        data = json.loads(reg.save(tmp_path / "m.json").read_text())
        assert data["pins"] == {
            ScaleKernel.name: {
                "backend": "fake",
                "globals": [{"module": "m", "name": "P", "constexpr": True, "value": "tf32"}],
            }
        }
        loaded = warmkit.WarmupRegistry.load(tmp_path / "m.json")
        assert loaded.pins == data["pins"]
        _Pinning.fail = True
        try:
            data = json.loads(reg.save(tmp_path / "n.json").read_text())
        finally:
            _Pinning.fail = False
    assert "pins" not in data
    assert (
        f"kernel {ScaleKernel.name}: its identity cannot be pinned in the manifest "
        "(RuntimeError: Unsupported function referenced: <lambda>)"
    ) in caplog.text


def test_a_manifest_whose_backends_pin_nothing_builds_without_the_predates_pins_warning(
    tmp_path, caplog
):
    """TileLang's and CuTe DSL's backends pin nothing: their manifests were saved without
    ``pins`` and every ahead-of-time build told the user it predated pins and to save it
    again. Saved now with empty pins, they build quietly; a failed pin still warns."""
    from warmkit._registry.identity import pins_scope

    reg = warmkit.WarmupRegistry()
    reg.add(ScaleKernel, n=64)
    config = warmkit.WarmupConfig(target="cuda:90", progress="off")
    with backend_override("fake", FakeBackend()):  # implements no PinsIdentity
        saved = reg.save(tmp_path / "m.json")
        assert json.loads(saved.read_text())["pins"] == {}
        loaded = warmkit.WarmupRegistry.load(saved)
        with pins_scope(loaded, config):
            pass
        assert loaded.to_dict()["pins"] == {}  # and a re-save keeps it
    with backend_override("fake", _Pinning()):
        _Pinning.fail = True
        try:
            failed = warmkit.WarmupRegistry.load(reg.save(tmp_path / "n.json"))
        finally:
            _Pinning.fail = False
        assert "no pinned identity" not in caplog.text
        with pins_scope(failed, config):
            pass
    assert caplog.text.count("this manifest has no pinned identity") == 1
