"""``warmkit._explain``'s comparison: the nearest entry of the kernel and the first factor that differs."""

from __future__ import annotations

from warmkit._explain import Explanation, miss_reason, nearest_difference

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
