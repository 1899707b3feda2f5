"""warmkit._kernel.memo: a memoized dispatch is exact (types, instance state, subclasses, bounds)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import warmkit
from warmkit._kernel import memo as _memo


class Typed(warmkit.JitKernel):
    """The key records the exact type of its input: 1, True and 1.0 are three kernels."""

    calls = 0

    @attrs.frozen
    class CompileKey:
        kind: str
        value: object

    def dispatch(self, *, n, tag="x"):
        Typed.calls += 1
        return self.CompileKey(type(n).__name__ + tag, n)

    def compile(self, key):
        return key


class Stateful(warmkit.JitKernel):
    """Reads instance state: must not be memoized."""

    block = 64

    @attrs.frozen
    class CompileKey:
        n: int
        block: int

    def dispatch(self, *, n):
        return self.CompileKey(n, self.block)

    def compile(self, key):
        return key


def memo_of(cls):
    return getattr(cls.dispatch, "_warmkit_memo", None)


def test_repeated_plain_inputs_return_the_same_key_object():
    k = Typed()
    first = k.dispatch(n=5)
    calls = Typed.calls
    assert k.dispatch(n=5) is first
    assert Typed.calls == calls  # answered by the memo
    assert Typed().dispatch(n=5) is first  # one memo per class, not per instance


@pytest.mark.parametrize("a, b", [(1, True), (0, False), (1, 1.0), (2, "2"), (None, 0)])
def test_equal_values_of_different_types_are_different_keys(a, b):
    k = Typed()
    ka, kb = k.dispatch(n=a), k.dispatch(n=b)
    assert ka.kind != kb.kind
    assert k.dispatch(n=a) == ka and k.dispatch(n=b) == kb


def test_floats_and_tuples_are_never_memoized():
    k = Typed()
    assert k.dispatch(n=0.0).value == 0.0
    neg = k.dispatch(n=-0.0)
    assert str(neg.value) == "-0.0"  # 0.0 == -0.0, but dispatch saw -0.0
    assert str(k.dispatch(n=(1,)).value) == "(1,)"
    assert str(k.dispatch(n=(True,)).value) == "(True,)"
    assert not [
        m for m in memo_of(Typed) if any(t in (float, tuple) for t in m if isinstance(t, type))
    ]


def test_unhashable_input_falls_through_to_dispatch():
    assert Typed().dispatch(n=[1, 2]).value == [1, 2]


def test_dispatch_reading_instance_state_is_not_memoized():
    assert memo_of(Stateful) is None
    k = Stateful()
    assert k.dispatch(n=3).block == 64
    k.block = 128
    assert k.dispatch(n=3).block == 128


def test_memoize_dispatch_setting_overrides_the_analysis():
    class Forced(Stateful):
        memoize_dispatch = True

    class Off(Typed):
        memoize_dispatch = False

    assert memo_of(Forced) is not None
    assert memo_of(Off) is None
    assert Off().dispatch(n=1) is not Off().dispatch(n=1)


def test_a_subclass_with_its_own_key_gets_its_own_memo():
    class Sub(Typed):
        @attrs.frozen
        class CompileKey:
            kind: str
            value: object
            extra: int = 7

    parent = Typed().dispatch(n=11)
    child = Sub().dispatch(n=11)
    assert type(child) is Sub.CompileKey and type(parent) is Typed.CompileKey
    assert memo_of(Sub) is not memo_of(Typed)


def test_planning_does_not_fill_the_memo():
    class Planned(Typed):
        pass

    Planned().get_warmup_keys(n=warmkit.IntRange(0, 500))
    assert len(memo_of(Planned)) == 0


def test_memo_is_bounded(monkeypatch):
    class Bounded(Typed):
        pass

    monkeypatch.setattr(_memo, "MEMO_LIMIT", 8)
    k = Bounded()
    for i in range(50):
        assert k.dispatch(n=i).value == i
    assert 0 < len(memo_of(Bounded)) <= 8


def test_positional_call_keeps_dispatch_own_error():
    with pytest.raises(TypeError):
        Typed().dispatch(5)


@pytest.mark.parametrize(
    "source, pure",
    [
        ("def dispatch(self, *, n):\n    return self.CompileKey(n)\n", True),
        ("def dispatch(self, *, n):\n    return self.CompileKey(helper(n))\n", True),
        ("def dispatch(self, *, n):\n    return self.CompileKey(n, self.block)\n", False),
        ("def dispatch(self, *, n):\n    return self.make(n)\n", False),
        ("def dispatch(self, *, n):\n    global G\n    return self.CompileKey(G)\n", False),
        ("def dispatch(self, *, n):\n    return super().dispatch(n=n)\n", False),
        ("def dispatch(self, *, n):\n    return self.CompileKey(**vars())\n", False),
        ("def dispatch(s, *, n):\n    return s.CompileKey(n)\n", True),
    ],
)
def test_source_analysis(source, pure, monkeypatch):
    namespace: dict = {}
    exec(compile(source, "<dispatch>", "exec"), namespace)  # noqa: S102 -- test input
    fn = namespace["dispatch"]
    assert _memo._uses_only_its_inputs(fn) is False  # no readable source: never memoized
    monkeypatch.setattr(_memo.inspect, "getsource", lambda _fn: source)
    assert _memo._uses_only_its_inputs(fn) is pure


@given(
    st.lists(
        st.one_of(st.integers(-5, 5), st.booleans(), st.none(), st.sampled_from("ab")), max_size=40
    )
)
def test_memoized_equals_unmemoized(values):
    k = Typed()
    raw = _memo.raw_dispatch(Typed)
    for v in values:
        assert k.dispatch(n=v) == raw(k, n=v)


class Forwarding(warmkit.JitKernel):
    """**fields: the generic memo (no generated signature)."""

    @attrs.frozen
    class CompileKey:
        n: object
        flag: object

    def dispatch(self, *, n, **fields):
        return self.CompileKey(n, **fields)

    def compile(self, key):
        return key


def test_forwarding_dispatch_is_memoized_exactly():
    k = Forwarding()
    first = k.dispatch(n=1, flag=True)
    assert k.dispatch(n=1, flag=True) is first
    assert k.dispatch(n=1, flag=1).flag.__class__ is int
    assert k.dispatch(n=True, flag=True).n.__class__ is bool
    assert str(k.dispatch(n=-0.0, flag=0).n) == "-0.0"
    with pytest.raises(TypeError):
        k.dispatch(n=1, unknown=2)


def test_defaults_apply_inside_dispatch():
    k = Typed()
    assert k.dispatch(n=3).kind == "intx"
    assert k.dispatch(n=3, tag="y").kind == "inty"
    assert k.dispatch(n=3).kind == "intx"
    with pytest.raises(TypeError):
        k.dispatch()  # the required input is still required


class Rehearsed(warmkit.JitKernel):
    """A launch passes ``dtype`` in another form than the registration (as Triton's dtypes)."""

    dispatches = 0

    @attrs.frozen
    class CompileKey:
        dtype: str
        n: int

    def dispatch(self, *, dtype, n):
        Rehearsed.dispatches += 1
        if dtype == "refused":
            raise ValueError("not a dtype")
        return self.CompileKey(dtype.upper() if isinstance(dtype, str) else "?", n)

    @classmethod
    def runtime_inputs(cls, inputs):
        return (inputs, {**inputs, "dtype": "refused"}, {**inputs, "n": inputs["n"] + 1})

    def compile(self, key):
        return ("executor", key)


def _warm(*registrations, target=None):
    Rehearsed.clear_executors()
    Rehearsed.dispatch._warmkit_memo.clear()
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        for space in registrations:
            Rehearsed().register_warmup(**space)
    return warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="off", target=target), reg)


def test_device_warmup_makes_a_registered_point_s_first_launch_a_memo_and_identity_hit():
    report = _warm({"dtype": "f16", "n": 8})
    assert report.ok
    memo = Rehearsed.dispatch._warmkit_memo
    key = Rehearsed.CompileKey("F16", 8)
    before = Rehearsed.dispatches
    hit = Rehearsed().dispatch(dtype="f16", n=8)  # the launch's first call
    assert Rehearsed.dispatches == before  # answered by the memo, no key built
    assert hit == key
    seen = Rehearsed.launch_lookup(id(hit))
    assert seen is not None and seen[0] is hit and seen[1] == ("executor", key)
    # the refused variant was skipped; the n + 1 variant dispatched to an unwarmed key:
    # memoized (that is what dispatch returns) but never compiled nor put in the lookup
    assert len(memo) == 2
    assert Rehearsed.CompileKey("F16", 9) not in Rehearsed.executors
    other = Rehearsed().dispatch(dtype="f16", n=9)
    assert Rehearsed.launch_lookup(id(other)) is None


def test_ranges_and_ahead_of_time_warmups_are_not_rehearsed():
    report = _warm({"dtype": "f16", "n": warmkit.IntRange(1, 4)})
    assert report.ok and len(report.entries) == 3
    assert len(Rehearsed.dispatch._warmkit_memo) == 0  # a range's launches pass other values
    assert _warm({"dtype": "f16", "n": 8}, target="fake:1").count("compiled") == 1
    assert len(Rehearsed.dispatch._warmkit_memo) == 0  # compiled for another target: no launch here


def test_rehearse_is_bounded_and_skips_an_unmemoized_dispatch():
    Rehearsed.clear_executors()
    Rehearsed.dispatch._warmkit_memo.clear()
    limit = _memo.REHEARSE_LIMIT
    points = [{"dtype": "f16", "n": n} for n in range(limit + 10)]
    for p in points:
        Rehearsed().get_or_compile(Rehearsed.CompileKey("F16", p["n"]))
    # each rehearsed point hits twice: its own inputs and the n + 1 variant (warmed too)
    assert _memo.rehearse(Rehearsed(), points) == 2 * limit
    beyond = Rehearsed().dispatch(dtype="f16", n=limit + 5)
    assert Rehearsed.launch_lookup(id(beyond)) is None  # past the bound: not rehearsed
    assert _memo.rehearse(Stateful(), [{"n": 1}]) == 0  # reads self.block: no memo


def test_a_runtime_inputs_that_raises_is_a_warning_never_a_failed_warmup(monkeypatch, caplog):
    def broken(cls, inputs):
        raise RuntimeError("runtime_inputs broke")

    monkeypatch.setattr(Rehearsed, "runtime_inputs", classmethod(broken))
    with caplog.at_level("WARNING", logger="warmkit._kernel.memo"):
        report = _warm({"dtype": "f16", "n": 8})
    assert report.ok and [e.status for e in report.entries] == ["compiled"]
    assert any("runtime_inputs broke" in r.getMessage() for r in caplog.records)
