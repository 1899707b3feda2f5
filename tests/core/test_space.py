"""Search spaces (``IntRange``, ``Choices``, lists, tuples, ``zip_inputs``, ``where=``) and their expansion."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warmkit
from warmkit import Choices, IntRange, JitKernel, zip_inputs

# -- kernels ------------------------------------------------------------------------------


class Tri(JitKernel):
    """Key = the three inputs: the expansion order is visible in the keys."""

    calls = 0

    @attrs.frozen
    class CompileKey:
        a: Any
        b: Any
        c: Any

    def dispatch(self, *, a=0, b=0, c=0):
        type(self).calls += 1
        return self.CompileKey(a, b, c)

    def compile(self, key):
        return object()


class Lossy(JitKernel):
    """Many points map to one key, and ``unused`` is accepted but never read."""

    calls = 0

    @attrs.frozen
    class CompileKey:
        r: int

    def dispatch(self, *, x, y=0, unused=None):
        type(self).calls += 1
        return self.CompileKey((x + y) % 3)

    def compile(self, key):
        return object()


class Shape(JitKernel):
    @attrs.frozen
    class CompileKey:
        shape: Any

    def dispatch(self, *, shape):
        return self.CompileKey(shape)

    def compile(self, key):
        return object()


def _helper(x):
    return x * 2


class Rich(JitKernel):
    """A dispatch using helpers, builtins, subscripts, in/is, conditional expressions,
    statement-level if and lambdas. ``flag`` is read only by an ``if``; ``shape``
    only inside a lambda."""

    @attrs.frozen
    class CompileKey:
        size: int
        kind: str
        big: bool
        d: int
        rank: int

    def dispatch(self, *, n, dtype="f16", mode=None, shape=(1, 1), flag=False):
        size = {"f16": 2, "f32": 4}[dtype]
        big = n in (64, 128)
        kind = ("big" if big else "small") + ("-default" if mode is None else f"-{mode}")
        if flag:
            size += 100
        rounder = lambda v: max(v, shape[1])
        return self.CompileKey(
            size=_helper(size), kind=kind, big=big, d=rounder(n), rank=len(shape)
        )

    def compile(self, key):
        return object()


class Fwd(JitKernel):
    """Forwards ``**fields`` into the key."""

    @attrs.frozen
    class CompileKey:
        block: int
        dtype: str = "f16"
        variant: int = 0

    def dispatch(self, *, n, **fields):
        return self.CompileKey(block=n * 16, **fields)

    def compile(self, key):
        return object()


@pytest.fixture(autouse=True)
def _reset_calls():
    Tri.calls = 0
    Lossy.calls = 0


def keys(kernel: JitKernel, *groups, **space) -> list[tuple]:
    return [attrs.astuple(k) for k in kernel.get_warmup_keys(*groups, **space)]


# -- IntRange -----------------------------------------------------------------------------


@settings(deadline=None)
@given(
    start=st.integers(-50, 50),
    stop=st.integers(-50, 50),
    step=st.integers(-7, 7).filter(bool),
)
def test_intrange_step_is_exactly_range(start, stop, step):
    expected = list(range(start, stop, step))
    if not expected:
        with pytest.raises(ValueError, match="empty"):
            IntRange(start, stop, step)
        return
    r = IntRange(start, stop, step)
    assert list(r) == expected
    assert len(r) == len(expected)


def test_intrange_default_step_is_one():
    assert list(IntRange(3, 7)) == [3, 4, 5, 6]
    assert list(IntRange(3, 7, step=2)) == [3, 5]


def test_intrange_advance_starts_at_start_and_stops_below_stop():
    assert list(IntRange(1, 100, advance=lambda v: v * 2)) == [1, 2, 4, 8, 16, 32, 64]
    assert list(IntRange(1, 2, advance=lambda v: v + 5)) == [1]
    assert list(IntRange(16, 65, advance=lambda v: v * 2)) == [16, 32, 64]


@pytest.mark.parametrize("f", [lambda v: v, lambda v: v - 1, lambda v: 0])
def test_intrange_advance_that_does_not_grow_is_value_error(f):
    with pytest.raises(ValueError, match="grow"):
        IntRange(1, 100, advance=f)


def test_intrange_step_and_advance_together_is_value_error():
    with pytest.raises(ValueError, match="step or advance"):
        IntRange(0, 10, 2, advance=lambda v: v + 1)


@pytest.mark.parametrize(
    ("args", "kwargs", "exc"),
    [
        ((0, 10, 0), {}, ValueError),
        ((0, 0), {}, ValueError),
        ((5, 1), {}, ValueError),
        ((0.0, 10), {}, TypeError),
        ((0, "10"), {}, TypeError),
        ((True, 10), {}, TypeError),
        ((0, 10, 1.5), {}, TypeError),
        ((0, 10), {"advance": 3}, TypeError),
        ((0, 10), {"advance": lambda v: v + 0.5}, TypeError),
    ],
)
def test_intrange_rejects_bad_arguments(args, kwargs, exc):
    with pytest.raises(exc):
        IntRange(*args, **kwargs)


def test_intrange_repr_and_equality():
    assert repr(IntRange(0, 4)) == "IntRange(0, 4)"
    assert repr(IntRange(0, 4, 2)) == "IntRange(0, 4, 2)"

    def double(v):
        return v * 2

    assert repr(IntRange(1, 4, advance=double)) == "IntRange(1, 4, advance=double)"
    assert IntRange(0, 4, 2) == IntRange(0, 4, 2)
    assert hash(IntRange(0, 4, 2)) == hash(IntRange(0, 4, 2))


# -- Choices, lists, tuples, other values --------------------------------------------------


def test_choices_are_exactly_these_values_in_order():
    assert keys(Tri(), a=Choices(3, 1, 2)) == [(3, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_choices_keep_a_tuple_as_one_value():
    assert list(Choices((1, 2), 3)) == [(1, 2), 3]
    assert keys(Shape(), shape=Choices((16, 32), (64, 64))) == [((16, 32),), ((64, 64),)]


def test_choices_needs_a_value():
    with pytest.raises(ValueError):
        Choices()


def test_list_is_alternatives_and_tuple_is_one_value():
    assert keys(Shape(), shape=[16, 32]) == [(16,), (32,)]
    assert keys(Shape(), shape=(16, 32)) == [((16, 32),)]
    assert keys(Shape(), shape=[(16, 32), (1, 2)]) == [((16, 32),), ((1, 2),)]


def test_range_is_alternatives_and_scalars_are_one_value():
    assert keys(Tri(), a=range(3)) == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert keys(Tri(), a="abc", b=None, c=1.5) == [("abc", None, 1.5)]


@pytest.mark.parametrize("value", [{1, 2}, frozenset({1}), {"a": 1}, iter([1, 2])])
def test_unordered_or_one_shot_collections_are_type_error(value):
    with pytest.raises(TypeError, match="not a search space"):
        Tri().get_warmup_keys(a=value)


def test_empty_list_is_value_error():
    with pytest.raises(ValueError, match="empty"):
        Tri().get_warmup_keys(a=[])


# -- zip_inputs ----------------------------------------------------------------------------


def test_zip_inputs_couples_rows_instead_of_a_product():
    g = zip_inputs({"a": 1, "b": 10}, {"a": 2, "b": 20})
    assert len(g) == 2
    assert keys(Tri(), g) == [(1, 10, 0), (2, 20, 0)]


def test_zip_rows_may_list_names_in_any_order():
    g = zip_inputs({"a": 1, "b": 10}, {"b": 20, "a": 2})
    assert keys(Tri(), g) == [(1, 10, 0), (2, 20, 0)]


def test_zip_row_values_are_single_values_even_lists_and_tuples():
    g = zip_inputs({"shape": (1, 2)}, {"shape": (3, 4)})
    assert keys(Shape(), g) == [((1, 2),), ((3, 4),)]


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ((), "at least one row"),
        (([("a", 1)],), "mapping"),
        ((5,), "mapping"),
        (({},), "empty"),
        (({"a": 1}, {}), "empty"),
        (({1: 2},), "non-string"),
        (({"a": 1}, {"b": 1}), "same inputs"),
        (({"a": 1}, {"a": 1, "b": 2}), "same inputs"),
    ],
)
def test_zip_inputs_errors_are_value_errors(rows, match):
    with pytest.raises(ValueError, match=match):
        zip_inputs(*rows)


@pytest.mark.parametrize("bad", [{"a": 1}, [1, 2], 3, None])
def test_positional_argument_that_is_not_a_zip_group_is_type_error(bad):
    with pytest.raises(TypeError, match="zip_inputs"):
        Tri().get_warmup_keys(bad)


def test_zip_groups_come_first_then_keywords_last_axis_fastest():
    g1 = zip_inputs({"a": 1}, {"a": 2})
    g2 = zip_inputs({"b": "x"}, {"b": "y"})
    assert keys(Tri(), g1, g2, c=[True, False]) == [
        (1, "x", True),
        (1, "x", False),
        (1, "y", True),
        (1, "y", False),
        (2, "x", True),
        (2, "x", False),
        (2, "y", True),
        (2, "y", False),
    ]


# -- order, dedup, defaults, names --------------------------------------------------------


def test_keyword_axes_follow_insertion_order_last_fastest():
    assert keys(Tri(), a=[1, 2], b=[10, 20]) == [(1, 10, 0), (1, 20, 0), (2, 10, 0), (2, 20, 0)]
    assert keys(Tri(), b=[10, 20], a=[1, 2]) == [(1, 10, 0), (2, 10, 0), (1, 20, 0), (2, 20, 0)]


def test_keys_are_deduplicated_in_first_seen_order():
    # x + y mod 3 for x in [2, 0, 1] (slowest), y in [0, 3]: 2, 2, 0, 0, 1, 1
    assert keys(Lossy(), x=[2, 0, 1], y=[0, 3]) == [(2,), (0,), (1,)]
    assert Lossy.calls == 6


def test_dispatch_defaults_fill_omitted_inputs():
    assert keys(Tri(), b=5) == [(0, 5, 0)]
    assert keys(Tri()) == [(0, 0, 0)]


def test_missing_required_input_is_type_error():
    with pytest.raises(TypeError, match="'x'"):
        Lossy().get_warmup_keys(y=1)


def test_name_in_a_zip_row_and_a_keyword_is_value_error():
    with pytest.raises(ValueError, match="'a' is given twice"):
        Tri().get_warmup_keys(zip_inputs({"a": 1}), a=2)
    with pytest.raises(ValueError, match="'a' is given twice"):
        Tri().get_warmup_keys(zip_inputs({"a": 1}), zip_inputs({"a": 2, "b": 3}))
    assert Tri.calls == 0


def test_unknown_input_is_type_error_listing_accepted_inputs():
    with pytest.raises(TypeError) as info:
        Lossy().get_warmup_keys(x=1, yy=2)
    msg = str(info.value)
    assert "'yy'" in msg
    assert "x, y, unused" in msg
    assert Lossy.__module__ in msg or "Lossy" in msg
    assert Lossy.calls == 0


def test_unknown_input_in_a_zip_row_is_type_error():
    with pytest.raises(TypeError, match="'zz'"):
        Lossy().get_warmup_keys(zip_inputs({"x": 1, "zz": 2}))


# -- unused inputs and max_points ----------------------------------------------------------


def test_input_dispatch_never_reads_is_not_expanded(caplog):
    caplog.set_level(logging.DEBUG, logger="warmkit")
    assert Lossy.dispatch_info().used == frozenset({"x", "y"})
    assert keys(Lossy(), x=[1, 2], unused=IntRange(0, 100)) == [(1,), (2,)]
    assert Lossy.calls == 2
    assert any("never reads input 'unused'" in r.getMessage() for r in caplog.records)


def test_unused_input_does_not_count_towards_max_points():
    class Small(Lossy):
        max_points = 5

    assert len(Small().get_warmup_keys(x=[1, 2], unused=IntRange(0, 10**9))) == 2


def test_unused_input_read_by_where_is_expanded():
    # dispatch ignores `unused`, but the predicate reads it: a point survives if any value passes.
    got = keys(Lossy(), x=[1, 2], unused=[0, 5], where=lambda unused: unused == 5)
    assert got == [(1,), (2,)]


def test_space_over_max_points_fails_before_any_work():
    with pytest.raises(ValueError) as info:
        Lossy().get_warmup_keys(x=IntRange(0, 1001), y=IntRange(0, 1000))
    assert "1,001,000" in str(info.value)
    assert "Lossy" in str(info.value)
    assert Lossy.calls == 0


def test_max_points_is_a_class_attribute():
    class Tiny(Tri):
        max_points = 4

    assert len(Tiny().get_warmup_keys(a=[1, 2], b=[1, 2])) == 4
    with pytest.raises(ValueError, match="5 points"):
        Tiny().get_warmup_keys(a=[1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="Tiny"):
        Tiny().get_warmup_keys(zip_inputs(*({"a": i} for i in range(3))), b=[1, 2])
    assert Tiny.calls == 4  # the two refused spaces ran no dispatch


# -- where= --------------------------------------------------------------------------------


def test_where_skips_points_where_it_is_falsy():
    got = keys(Tri(), a=[1, 2, 3], b=[1, 2, 3], where=lambda a, b: a < b)
    assert got == [(1, 2, 0), (1, 3, 0), (2, 3, 0)]
    assert Tri.calls == 3  # dispatch does not run for a skipped point


def test_where_reads_only_the_inputs_it_names_and_sees_defaults():
    assert keys(Tri(), a=[1, 2], where=lambda c: c == 0) == [(1, 0, 0), (2, 0, 0)]
    assert keys(Tri(), a=[1, 2], where=lambda a: None) == []
    assert keys(Tri(), zip_inputs({"a": 1}, {"a": 2}), where=lambda a: a == 2) == [(2, 0, 0)]


@pytest.mark.parametrize(
    ("where", "exc", "match"),
    [
        (lambda nope: True, TypeError, "nope"),
        (lambda *args: True, TypeError, "name the inputs"),
        (lambda **kw: True, TypeError, "name the inputs"),
        (42, TypeError, "callable"),
    ],
)
def test_bad_where_is_type_error(where, exc, match):
    with pytest.raises(exc, match=match):
        Tri().get_warmup_keys(a=[1], where=where)


# -- dispatch runs natively -----------------------------------------------------------------


def test_dispatch_semantics_are_python_s_own():
    k = Rich()
    info = Rich.dispatch_info()
    assert info.used == frozenset({"n", "dtype", "mode", "shape", "flag"})
    space = {
        "n": [1, 64, 100],
        "dtype": ["f16", "f32"],
        "mode": [None, "x"],
        "shape": [(1, 1), (2, 200)],
        "flag": [False, True],
    }
    expected: dict[Any, None] = {}
    for combo in itertools.product(*space.values()):
        expected[k.dispatch(**dict(zip(space, combo)))] = None
    got = k.get_warmup_keys(**space)
    assert got == list(expected)
    # spot-check what Python itself computes, not a re-interpretation
    assert k.dispatch(n=64, dtype="f32", flag=True, shape=(2, 200)) == Rich.CompileKey(
        size=208, kind="big-default", big=True, d=200, rank=2
    )
    assert len({key.size for key in got}) == 4  # the statement-level if was expanded
    assert len({key.d for key in got}) > 3  # the input read only in a lambda was expanded


def test_dispatch_forwards_fields_into_the_key():
    got = Fwd().get_warmup_keys(n=[1, 2], dtype=["f16", "bf16"], variant=3)
    assert got == [
        Fwd.CompileKey(16, "f16", 3),
        Fwd.CompileKey(16, "bf16", 3),
        Fwd.CompileKey(32, "f16", 3),
        Fwd.CompileKey(32, "bf16", 3),
    ]


def test_unknown_forwarded_field_is_type_error_naming_the_kernel():
    with pytest.raises(TypeError) as info:
        Fwd().get_warmup_keys(n=1, bogus=2)
    assert Fwd.name in str(info.value)
    assert "bogus" in str(info.value)
    assert isinstance(info.value.__cause__, TypeError)


def test_duplicated_forwarded_field_is_type_error_naming_the_kernel():
    with pytest.raises(TypeError) as info:
        Fwd().get_warmup_keys(n=1, block=2)
    assert Fwd.name in str(info.value)
    assert "block" in str(info.value)


# -- properties ----------------------------------------------------------------------------

_axis_values = st.lists(st.integers(0, 5), min_size=1, max_size=4)


class Mod(JitKernel):
    """Key collisions on purpose (``% 4``), so dedup is exercised."""

    @attrs.frozen
    class CompileKey:
        v: tuple

    def dispatch(self, *, x0=0, x1=0, x2=0, x3=0):
        return self.CompileKey(((x0 + x1) % 4, x2 % 2, x3))

    def compile(self, key):
        return object()


@settings(max_examples=150, deadline=None)
@given(
    names=st.permutations(["x0", "x1", "x2", "x3"]).map(lambda p: p[: len(p)]),
    n_axes=st.integers(0, 4),
    n_zip=st.integers(0, 2),
    data=st.data(),
)
def test_expansion_equals_brute_force_product(names, n_axes, n_zip, data):
    chosen = names[:n_axes]
    zipped, keyword = chosen[: min(n_zip, len(chosen))], chosen[min(n_zip, len(chosen)) :]
    groups = []
    if zipped:
        n_rows = data.draw(st.integers(1, 3))
        rows = [{name: data.draw(st.integers(0, 5)) for name in zipped} for _ in range(n_rows)]
        groups.append(zip_inputs(*rows))
    space = {name: data.draw(_axis_values) for name in keyword}

    axes: list[list[dict[str, int]]] = [[dict(zip(g.names, r)) for r in g.rows] for g in groups]
    axes += [[{name: v} for v in values] for name, values in space.items()]
    reference: dict[Any, None] = {}
    for combo in itertools.product(*axes):
        point = {k: v for part in combo for k, v in part.items()}
        reference[Mod().dispatch(**point)] = None

    got = Mod().get_warmup_keys(*groups, **space)
    assert got == list(reference)
    assert len(set(got)) == len(got)


@settings(max_examples=100, deadline=None)
@given(a=_axis_values, b=_axis_values, c=_axis_values)
def test_order_is_lexicographic_with_last_axis_fastest(a, b, c):
    got = keys(Tri(), a=a, b=b, c=c)
    expected = list(dict.fromkeys(itertools.product(a, b, c)))
    assert got == expected


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-3, 3), min_size=1, max_size=8))
def test_choices_and_list_expand_alike(values):
    assert keys(Tri(), a=values) == keys(Tri(), a=Choices(*values))
    assert keys(Tri(), a=values) == [(v, 0, 0) for v in dict.fromkeys(values)]


def test_public_names_are_the_space_types():
    assert warmkit.IntRange is IntRange
    assert warmkit.zip_inputs is zip_inputs
    assert isinstance(zip_inputs({"a": 1}), warmkit.ZipGroup)


def test_zip_group_passed_as_a_keyword_is_type_error():
    with pytest.raises(TypeError, match="positionally"):
        Tri().get_warmup_keys(a=zip_inputs({"a": 1}, {"a": 2}))


def test_dispatch_that_returns_no_compile_key_is_type_error():
    class Forgot(JitKernel):
        @attrs.frozen
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            self.CompileKey(n)  # no return

        def compile(self, key):
            return object()

    with pytest.raises(TypeError, match=r"dispatch\(n=1\) returned None, not a .*CompileKey"):
        Forgot().get_warmup_keys(n=[1, 2])


def test_subclass_keys_are_compile_keys():
    class Base(JitKernel):
        @attrs.frozen
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.Special(n) if n > 1 else self.CompileKey(n)

        def compile(self, key):
            return object()

    @attrs.frozen
    class Special(Base.CompileKey):
        pass

    Base.Special = Special
    assert Base().get_warmup_keys(n=[1, 2]) == [Base.CompileKey(1), Special(2)]


def test_unhashable_key_value_is_type_error_naming_kernel_and_point():
    class ListKey(JitKernel):
        @attrs.frozen
        class CompileKey:
            dims: object

        def dispatch(self, *, dims):
            return self.CompileKey(list(dims))

        def compile(self, key):
            return object()

    with pytest.raises(TypeError, match=r"ListKey.*dims=\(1, 2\).*hashable") as info:
        ListKey().get_warmup_keys(dims=(1, 2))
    assert isinstance(info.value.__cause__, TypeError)


def test_astronomically_large_space_still_fails_on_max_points_with_the_count():
    with pytest.raises(ValueError, match="1,180,591,620,717,411,303,424 points"):
        Lossy().get_warmup_keys(x=IntRange(0, 2**70))
    with pytest.raises(ValueError, match="over the limit"):
        Lossy().get_warmup_keys(x=IntRange(2**70, 0, -(2**3)))
    # an unread input costs nothing, however large
    assert keys(Lossy(), x=[1], unused=IntRange(0, 2**70)) == [(1,)]
    assert Lossy.calls == 1


def test_advance_that_grows_too_slowly_is_refused(monkeypatch):
    from warmkit._registry import space as _space

    monkeypatch.setattr(_space, "MAX_ADVANCE_VALUES", 50)
    assert len(IntRange(0, 50, advance=lambda v: v + 1)) == 50
    with pytest.raises(ValueError, match="more than 50 values"):
        IntRange(0, 10**9, advance=lambda v: v + 1)


class _Wrong(JitKernel):
    """dispatch returns a good key, a non-key, an unhashable key or raises, by the value of n."""

    @attrs.frozen
    class CompileKey:
        n: Any

    def dispatch(self, *, n, m=0):
        if n == 1:
            return (n,)  # not a CompileKey
        if n == 2:
            return self.CompileKey([n])  # unhashable
        if n == 3:
            raise TypeError("three is not allowed")
        return self.CompileKey(n)

    def compile(self, key):
        return key


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (1, "dispatch(n=1, m=0) returned (1,), not a _Wrong.CompileKey (a missing return?)"),
        (2, "dispatch(n=2, m=0) returned _Wrong.CompileKey(n=[2]), which is not hashable"),
        (3, "dispatch(n=3, m=0) failed: three is not allowed"),
    ],
)
def test_a_point_dispatch_cannot_key_is_named_on_every_expansion_path(bad, message):
    """The plain keyword loop (B6's inlined fast path) and the general one say the same."""
    kernel = _Wrong()
    assert kernel.get_warmup_keys(n=IntRange(4, 6), m=Choices(0, 1)) == [
        _Wrong.CompileKey(4),
        _Wrong.CompileKey(5),
    ]
    for where in (None, lambda n: True):  # keyword axes only: the plain loop; with where=: not
        with pytest.raises(TypeError) as info:
            kernel.get_warmup_keys(n=Choices(4, bad), m=Choices(0, 1), where=where)
        assert str(info.value).startswith(f"kernel {kernel.name!r}: {message}")
