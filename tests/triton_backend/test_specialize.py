"""specialization_rep against the installed Triton's own specializer.

Two views of Triton's rule are used, both read from ``triton.runtime.jit`` at
test time rather than copied: ``native_specialize_impl`` (the C++ function the
binder calls) and the binder Triton generates for a real ``@triton.jit``
function with ``do_not_specialize`` / ``do_not_specialize_on_alignment``.
"""

from __future__ import annotations

import random

import pytest
from triton.backends.compiler import BaseBackend
from triton.runtime import jit as triton_jit
from warmkit_triton import specialization_rep
from warmkit_triton._specialize import python_specialization

from ._kernels import flags_kernel

FLAGS = [(True, True), (False, True), (True, False), (False, False)]

try:  # hypothesis is a test dependency; the GPU machine may lack a wheel for its Python
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None


def triton_class(value, specialize=True, align=True):
    return tuple(triton_jit.native_specialize_impl(BaseBackend, value, False, specialize, align))


def sweep() -> list[int]:
    """Every table edge, negatives, ±1 around powers of two, and random values."""
    values = {0, 1, -1, 2, 15, 16, 17, 32, -16, -15, -17}
    for p in range(65):
        for d in (-1, 0, 1):
            values.add(2**p + d)
            values.add(-(2**p) + d)
    for edge in (2**31, 2**32, 2**63, 2**64):
        for d in (-17, -16, -15, -1, 0, 1, 15, 16, 17):
            values.add(edge + d)
            values.add(-edge + d)
    rng = random.Random(20260101)
    for _ in range(300):
        bits = rng.choice((8, 31, 32, 62, 63, 64, 65))
        values.add(rng.randrange(-(2**bits), 2**bits))
    return sorted(values)


SWEEP = sweep()


def test_issue_examples():
    assert specialization_rep(1) == 1
    assert (
        specialization_rep(0) == 16
        and specialization_rep(32) == 16
        and specialization_rep(-16) == 16
    )
    assert (
        specialization_rep(17) == 2
        and specialization_rep(-1) == 2
        and specialization_rep(2**31 - 1) == 2
    )
    assert specialization_rep(2**31) == 2**31 and specialization_rep(2**32) == 2**31
    assert (
        specialization_rep(2**31 + 1) == 2**31 + 1 and specialization_rep(-(2**31) - 1) == 2**31 + 1
    )
    assert specialization_rep(2**63) == 2**63 and specialization_rep(2**64 - 16) == 2**63
    assert specialization_rep(2**64 - 1) == 2**63 + 1
    with pytest.raises(OverflowError):
        specialization_rep(2**64)
    with pytest.raises(OverflowError):
        specialization_rep(-(2**63) - 1)
    # bools stay bools: Triton passes them as u1, never as the int 1
    assert specialization_rep(True) is True and specialization_rep(False) is False
    assert triton_class(True) == ("u1", None) != triton_class(specialization_rep(1))
    # do_not_specialize: one representative per width
    assert {specialization_rep(v, specialize=False) for v in (0, 1, 16, 17, 2**31 - 1)} == {2}
    assert specialization_rep(1, specialize=False) == 2
    assert specialization_rep(2**40, specialize=False) == 2**31 + 1
    assert specialization_rep(2**63, specialize=False) == 2**63 + 1
    # do_not_specialize_on_alignment: no divisible-by-16 class; 1 stays a constant
    assert specialization_rep(16, align=False) == 2 and specialization_rep(1, align=False) == 1
    assert specialization_rep(2**32, align=False) == 2**31 + 1


@pytest.mark.parametrize("specialize,align", FLAGS)
def test_sweep_matches_triton_native_specializer(specialize, align):
    checked = 0
    for v in SWEEP:
        try:
            want = triton_class(v, specialize, align)
        except OverflowError:
            with pytest.raises(OverflowError):
                specialization_rep(v, specialize=specialize, align=align)
            continue
        rep = specialization_rep(v, specialize=specialize, align=align)
        assert type(rep) is int
        assert triton_class(rep, specialize, align) == want, (v, rep)
        # the Python fallback table agrees with Triton too
        assert python_specialization(v, specialize=specialize, align=align) == want, v
        # idempotent: a representative is its own representative
        assert specialization_rep(rep, specialize=specialize, align=align) == rep
        checked += 1
    assert checked > 500


def test_sweep_matches_triton_generated_binder():
    """The binder Triton generates for flags_kernel(out, a, b, c) with b: do_not_specialize, c: no alignment."""
    binder = triton_jit.create_function_from_signature(
        flags_kernel.signature, flags_kernel.params, BaseBackend
    )
    out = _Ptr()
    for v in SWEEP:
        try:
            _, spec, _ = binder(out, v, v, v)
        except OverflowError:
            continue
        a = specialization_rep(v)
        b = specialization_rep(v, specialize=False)
        c = specialization_rep(v, align=False)
        _, rep_spec, _ = binder(out, a, b, c)
        assert [tuple(s) for s in rep_spec] == [tuple(s) for s in spec], v


def test_representatives_give_the_same_specialization_key_only_when_classes_match():
    binder = triton_jit.create_function_from_signature(
        flags_kernel.signature, flags_kernel.params, BaseBackend
    )
    reps = {specialization_rep(v) for v in SWEEP if -(2**63) <= v < 2**64}
    assert reps == {1, 2, 16, 2**31, 2**31 + 1, 2**63, 2**63 + 1}
    specs = {tuple(binder(_Ptr(), r, 0, 0)[1][1]) for r in reps}
    assert len(specs) == len(reps)  # one class per representative


def test_other_scalars():
    assert specialization_rep(None) is None
    assert specialization_rep(3.5) == 1.0 and triton_class(3.5) == triton_class(1.0)
    with pytest.raises(TypeError, match="numpy"):
        specialization_rep("16")  # type: ignore[arg-type]


def test_numpy_ints_are_rejected_like_triton_does():
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError):
        triton_class(np.int64(16))
    with pytest.raises(TypeError):
        specialization_rep(np.int64(16))  # type: ignore[arg-type]


if given is not None:

    @settings(max_examples=300, deadline=None)
    @given(st.integers(min_value=-(2**63), max_value=2**64 - 1), st.sampled_from(FLAGS))
    def test_random_values_match_triton(value, flags):
        specialize, align = flags
        rep = specialization_rep(value, specialize=specialize, align=align)
        assert triton_class(rep, specialize, align) == triton_class(value, specialize, align)


class _Ptr:
    dtype = "float32"

    @staticmethod
    def data_ptr() -> int:
        return 1 << 20


def test_python_table_stands_in_without_triton(monkeypatch):
    from warmkit_triton import _specialize

    native = {v: specialization_rep(v) for v in SWEEP if -(2**63) <= v < 2**64}
    monkeypatch.setattr(_specialize, "_native", lambda: None)
    for v, rep in native.items():
        assert specialization_rep(v) == rep
    with pytest.raises(OverflowError):
        specialization_rep(2**64)
