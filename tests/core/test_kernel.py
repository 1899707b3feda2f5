"""``JitKernel``: definition-time checks, names, the executor cache, ``get_or_compile``,
``register_warmup`` value checks and ``warmup``."""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import typing

import attrs
import pytest

import warmkit
from warmkit import JitKernel, KernelDefinitionError, RuntimeCompileError, monitor
from warmkit._kernel import jit as kernel_module

from . import _kernels
from ._kernels import Executor, OtherKernel, PyKernel

# -- definition-time checks ----------------------------------------------------------------


def test_dispatch_without_compile_key_is_definition_error():
    with pytest.raises(KernelDefinitionError, match="no nested CompileKey") as info:

        class NoKey(JitKernel):
            def dispatch(self, *, n):
                return n

            def compile(self, key):
                return object()

    assert info.value.kernel.__name__ == "NoKey"
    assert "NoKey" in str(info.value)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, warmkit.WarmkitError)


def test_compile_key_without_dispatch_is_definition_error():
    with pytest.raises(KernelDefinitionError, match="no dispatch"):

        class NoDispatch(JitKernel):
            @attrs.frozen
            class CompileKey:
                n: int

            def compile(self, key):
                return object()


def test_compile_key_that_is_not_a_class_is_definition_error():
    with pytest.raises(KernelDefinitionError, match="must be a class"):

        class NotAClass(JitKernel):
            CompileKey = 3

            def dispatch(self, *, n):
                return n

            def compile(self, key):
                return object()


@pytest.mark.parametrize(
    "decorate", [attrs.define, dataclasses.dataclass, lambda c: c], ids=["attrs", "dc", "plain"]
)
def test_non_frozen_compile_key_is_definition_error(decorate):
    with pytest.raises(KernelDefinitionError, match="frozen") as info:

        class Mutable(JitKernel):
            @decorate
            class CompileKey:
                n: int = 0

            def dispatch(self, *, n):
                return self.CompileKey(n)

            def compile(self, key):
                return object()

    assert "Mutable" in str(info.value)


def test_unhashable_compile_key_is_definition_error():
    with pytest.raises(KernelDefinitionError, match="hashable"):

        class Unhashable(JitKernel):
            @dataclasses.dataclass(frozen=True)
            class CompileKey:
                n: int
                __hash__ = None  # type: ignore[assignment]

            def dispatch(self, *, n):
                return self.CompileKey(n)

            def compile(self, key):
                return object()

    with pytest.raises(KernelDefinitionError, match="hashable"):

        class UnhashableAttrs(JitKernel):
            @attrs.frozen(unsafe_hash=False)
            class CompileKey:
                n: int

            def dispatch(self, *, n):
                return self.CompileKey(n)

            def compile(self, key):
                return object()


@pytest.mark.parametrize(
    "decorate",
    [attrs.frozen(eq=False), dataclasses.dataclass(frozen=True, eq=False)],
    ids=["attrs", "dataclass"],
)
def test_compile_key_compared_by_identity_is_definition_error(decorate):
    # Two equal keys would be two variants: nothing would ever dedupe or hit the cache.
    with pytest.raises(KernelDefinitionError, match="equality"):

        class ByIdentity(JitKernel):
            @decorate
            class CompileKey:
                n: int

            def dispatch(self, *, n):
                return self.CompileKey(n)

            def compile(self, key):
                return object()


def test_frozen_dataclass_attrs_and_namedtuple_keys_are_accepted():
    class WithDataclass(JitKernel):
        @dataclasses.dataclass(frozen=True)
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n)

        def compile(self, key):
            return object()

    class WithNamedTuple(JitKernel):
        class CompileKey(typing.NamedTuple):
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n)

        def compile(self, key):
            return object()

    assert WithDataclass().get_warmup_keys(n=[1, 1, 2]) == [
        WithDataclass.CompileKey(1),
        WithDataclass.CompileKey(2),
    ]
    assert WithNamedTuple().get_warmup_keys(n=[3]) == [(3,)]


@pytest.mark.parametrize(
    "src",
    [
        "def dispatch(self, n):\n    return self.CompileKey(n)",
        "def dispatch(self, n=1):\n    return self.CompileKey(n)",
        "def dispatch(self, n, /):\n    return self.CompileKey(n)",
        "def dispatch(self, *args):\n    return self.CompileKey(*args)",
    ],
)
def test_positional_dispatch_input_is_definition_error(src):
    ns: dict[str, typing.Any] = {}
    exec(src, ns)  # noqa: S102 -- building test classes
    with pytest.raises(KernelDefinitionError, match="keyword-only"):
        type(
            "Positional",
            (JitKernel,),
            {
                "CompileKey": attrs.frozen(type("CompileKey", (), {"__annotations__": {"n": int}})),
                "dispatch": ns["dispatch"],
                "compile": lambda self, key: object(),
            },
        )


def test_fields_not_forwarded_is_definition_error():
    with pytest.raises(KernelDefinitionError, match=r"\*\*fields but never uses it"):

        class Drops(JitKernel):
            @attrs.frozen
            class CompileKey:
                n: int

            def dispatch(self, *, n, **fields):
                return self.CompileKey(n)

            def compile(self, key):
                return object()


def test_no_backend_and_no_compile_is_definition_error():
    with pytest.raises(KernelDefinitionError, match="backend"):

        class Nowhere(JitKernel):
            @attrs.frozen
            class CompileKey:
                n: int

            def dispatch(self, *, n):
                return self.CompileKey(n)


def test_intermediate_base_is_not_checked_but_its_subclasses_are():
    class DSLKernel(JitKernel):
        backend = "fake"

        def helper(self):
            return 1

    assert DSLKernel.dispatch_info() is None
    with pytest.raises(TypeError, match="abstract"):
        DSLKernel().get_warmup_keys()

    class Concrete(DSLKernel):
        @attrs.frozen
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n * self.helper())

    assert Concrete().get_warmup_keys(n=[2]) == [Concrete.CompileKey(2)]
    with pytest.raises(KernelDefinitionError):

        class Broken(DSLKernel):
            def dispatch(self, n):
                return n


_EXEC_SOURCE = """
class FromExec(JitKernel):
    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n, ignored=0):
        return self.CompileKey(n)

    def compile(self, key):
        return object()
"""


def test_unreadable_source_treats_every_input_as_used(caplog):
    caplog.set_level(logging.DEBUG, logger="warmkit")
    ns: dict[str, typing.Any] = {"JitKernel": JitKernel, "attrs": attrs}
    exec(_EXEC_SOURCE, ns)  # noqa: S102 -- a class whose source cannot be read
    cls = ns["FromExec"]
    assert cls.dispatch_info().used == frozenset({"n", "ignored"})
    assert any("source unavailable" in r.getMessage() for r in caplog.records)
    calls = []
    real = cls.dispatch

    def counting(self, **kw):
        calls.append(kw)
        return real(self, **kw)

    cls.dispatch = counting
    cls().get_warmup_keys(n=[1], ignored=[1, 2, 3])
    assert len(calls) == 3  # nothing was skipped on a guess


def test_kernel_definition_error_names_the_class_and_problem():
    err = KernelDefinitionError(PyKernel, "something is off")
    assert err.kernel is PyKernel
    assert err.problem == "something is off"
    assert str(err) == f"{PyKernel.__module__}.PyKernel: something is off"


# -- names ---------------------------------------------------------------------------------


def test_name_defaults_to_module_and_qualname():
    assert PyKernel.name == f"{_kernels.__name__}.PyKernel"
    assert PyKernel().name == PyKernel.name
    assert OtherKernel.name == "tests.other"

    class Sub(OtherKernel):
        pass

    assert Sub.name == f"{__name__}.test_name_defaults_to_module_and_qualname.<locals>.Sub"


# -- the executor cache --------------------------------------------------------------------


def test_compile_is_cached_per_kernel_and_key_and_shared_by_instances():
    a, b = PyKernel(), PyKernel()
    k1, k2 = PyKernel.CompileKey(1, False), PyKernel.CompileKey(2, False)
    e1 = a.get_or_compile(k1)
    assert isinstance(e1, Executor) and e1.key == k1
    assert a.get_or_compile(k1) is e1
    assert b.get_or_compile(k1) is e1  # two instances are one kernel
    assert b.get_or_compile(PyKernel.CompileKey(1, False)) is e1  # equal keys, one variant
    b.get_or_compile(k2)
    assert _kernels.compiled_keys(PyKernel.name) == [k1, k2]


def test_subclasses_have_their_own_cache():
    class Sub(PyKernel):
        pass

    key = PyKernel.CompileKey(1, False)
    parent = PyKernel().get_or_compile(key)
    child = Sub().get_or_compile(key)
    assert parent is not child
    assert child.kernel == Sub.name


def test_compile_returning_none_is_runtime_error_naming_kernel_key_and_context():
    class Lazy(PyKernel):
        def compile(self, key):
            super().compile(key)

    key = Lazy.CompileKey(5, True)
    with pytest.raises(RuntimeError) as info:
        Lazy().get_or_compile(key, runtime_context="request 7, layer 3")
    msg = str(info.value)
    assert Lazy.name in msg
    assert repr(key) in msg
    assert "request 7, layer 3" in msg
    # nothing was cached: the next call compiles again (and fails again)
    with pytest.raises(RuntimeError, match="returned None"):
        Lazy().get_or_compile(key)
    assert len(_kernels.compiled_keys(Lazy.name)) == 2


def test_failed_compile_is_not_cached():
    key = PyKernel.CompileKey(3, False)
    PyKernel.fail_on = frozenset({key})
    with pytest.raises(ValueError, match="cannot compile"):
        PyKernel().get_or_compile(key)
    PyKernel.fail_on = frozenset()
    assert PyKernel().get_or_compile(key).key == key


def test_concurrent_get_or_compile_compiles_once(monkeypatch):
    n_threads = 8
    waiting = threading.Semaphore(0)

    wait = kernel_module._Pending.wait

    def counting_wait(self):
        waiting.release()  # a second caller is about to wait for the first compile
        return wait(self)

    monkeypatch.setattr(kernel_module._Pending, "wait", counting_wait)
    compiles = []

    def hook(key):
        compiles.append(key)
        # Hold the compile until every other thread waits on it.
        for _ in range(n_threads - 1):
            assert waiting.acquire(timeout=10), "other callers never waited for the compile"

    PyKernel.hook = hook
    key = PyKernel.CompileKey(7, False)
    barrier = threading.Barrier(n_threads)
    results: list[object] = []
    errors: list[BaseException] = []

    def call():
        try:
            barrier.wait(timeout=10)
            results.append(PyKernel().get_or_compile(key))
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert compiles == [key]
    assert len(results) == n_threads
    assert all(r is results[0] for r in results)


def test_concurrent_callers_all_see_a_compile_failure_and_nothing_is_cached():
    key = PyKernel.CompileKey(9, False)
    PyKernel.fail_on = frozenset({key})
    release = threading.Event()
    PyKernel.hook = lambda k: release.wait(timeout=10)
    errors: list[BaseException] = []

    def call():
        try:
            PyKernel().get_or_compile(key)
        except ValueError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(timeout=30)
    assert len(errors) == 3
    assert key not in PyKernel.executors


# -- get_or_compile and the monitor ---------------------------------------------------------


def test_get_or_compile_hit_does_not_consult_the_monitor():
    key = PyKernel.CompileKey(1, False)
    PyKernel().get_or_compile(key)
    monitor.arm("error")
    assert PyKernel().get_or_compile(key).key == key
    assert monitor.events() == ()


def test_get_or_compile_miss_in_error_mode_raises_before_compiling():
    monitor.arm("error")
    key = PyKernel.CompileKey(4, True)
    with pytest.raises(RuntimeCompileError) as info:
        PyKernel().get_or_compile(key, runtime_context="decode step")
    assert _kernels.COMPILES == []
    assert info.value.kernel == PyKernel.name
    assert info.value.key == key
    assert info.value.context == "decode step"


def test_get_or_compile_miss_in_warn_mode_compiles_and_records():
    monitor.arm("warn")
    key = PyKernel.CompileKey(4, True)
    PyKernel().get_or_compile(key, runtime_context="ctx")
    (event,) = monitor.events()
    assert (event.kernel, event.key, event.context, event.kind) == (
        PyKernel.name,
        key,
        "ctx",
        "compile",
    )
    assert _kernels.compiled_keys() == [key]


# -- register_warmup -------------------------------------------------------------------------


class TensorLike:
    shape = (4, 4)
    dtype = "float16"
    device = "cuda:0"


@pytest.mark.parametrize(
    "value",
    [
        TensorLike(),
        object(),
        {"a": 1},
        {1, 2},
        b"bytes",
        (1, [2]),
        [1, [2]],
        [TensorLike()],
        enum.IntEnum("Mode", "A B").A,
    ],
    ids=[
        "tensor",
        "object",
        "dict",
        "set",
        "bytes",
        "list-in-tuple",
        "nested-list",
        "in-list",
        "int-enum",  # a manifest would bring it back as a plain int
    ],
)
def test_register_warmup_rejects_non_plain_values_naming_kernel_and_argument(value, registry):
    with pytest.raises(TypeError) as info:
        PyKernel().register_warmup(n=value)
    assert PyKernel.name in str(info.value)
    assert "'n'" in str(info.value)
    assert len(registry) == 0


def test_register_warmup_rejects_non_plain_values_outside_a_registry_too():
    with pytest.raises(TypeError, match="TensorLike"):
        PyKernel().register_warmup(n=TensorLike())


def test_register_warmup_rejects_non_plain_values_in_choices_and_zip_rows(registry):
    with pytest.raises(TypeError, match=PyKernel.name):
        PyKernel().register_warmup(n=warmkit.Choices(1, TensorLike()))
    with pytest.raises(TypeError, match="'n"):
        PyKernel().register_warmup(warmkit.zip_inputs({"n": TensorLike()}))
    with pytest.raises(TypeError):
        PyKernel().register_warmup(warmkit.zip_inputs({"n": [1, 2]}))


def test_register_warmup_accepts_plain_data_and_space_objects(registry):
    k = PyKernel()
    k.register_warmup(n=1, flag=True)
    k.register_warmup(n=None)
    k.register_warmup(n=1.5)
    k.register_warmup(n="s")
    k.register_warmup(n=(1, (2, "x"), None))
    k.register_warmup(n=[1, 2, (3, 4)])
    k.register_warmup(n=warmkit.Choices(1, (2, 3)))
    k.register_warmup(n=warmkit.IntRange(0, 4))
    k.register_warmup(warmkit.zip_inputs({"n": 1, "flag": True}))
    assert len(registry) == 9
    assert _kernels.COMPILES == []  # registering compiles nothing


def test_a_dropped_registration_warns_once_naming_the_kernel_and_the_fix(caplog, monkeypatch):
    from warmkit._registry import registry as _registry

    monkeypatch.setattr(_registry, "_unregistered", set())
    caplog.set_level(logging.DEBUG, logger="warmkit")
    before = len(warmkit.default_registry())
    PyKernel().register_warmup(n=1)
    PyKernel().register_warmup(n=2)  # the same kernel again: not reported twice
    assert len(warmkit.default_registry()) == before
    assert _kernels.COMPILES == []
    (record,) = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert PyKernel.name in record.getMessage() and "registry.activate()" in record.getMessage()

    # From a worker thread that was not bound: the fix is registry.bind.
    monkeypatch.setattr(_registry, "_unregistered", set())
    caplog.clear()
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        t = threading.Thread(target=PyKernel().register_warmup, kwargs={"n": 3}, name="loader")
        t.start()
        t.join()
    assert len(reg) == 0
    (record,) = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert record.levelno == logging.WARNING and "'loader'" in record.getMessage()
    assert "registry.bind(fn)" in record.getMessage() and PyKernel.name in record.getMessage()


def test_register_warmup_checks_names_outside_a_registry_too():
    with pytest.raises(TypeError, match="'nn'.*accepts: n, flag"):
        PyKernel().register_warmup(nn=1)
    with pytest.raises(TypeError, match="zip_inputs"):
        PyKernel().register_warmup({"n": 1})


def test_register_warmup_does_not_keep_the_instance_alive(registry):
    import gc
    import weakref

    class Heavy(PyKernel):
        def __init__(self):
            self.payload = bytearray(1 << 20)

    k = Heavy()
    ref = weakref.ref(k)
    k.register_warmup(n=1)
    del k
    gc.collect()
    assert ref() is None
    assert registry.plan() == {Heavy.name: [Heavy.CompileKey(1, False)]}


# -- warmup(**space) -------------------------------------------------------------------------


def test_kernel_warmup_compiles_every_key_now_and_returns_them():
    keys = PyKernel().warmup(n=[1, 2], flag=[False, True])
    assert keys == [
        PyKernel.CompileKey(1, False),
        PyKernel.CompileKey(1, True),
        PyKernel.CompileKey(2, False),
        PyKernel.CompileKey(2, True),
    ]
    assert _kernels.compiled_keys() == keys
    assert {t for (_n, _k, t) in _kernels.COMPILES} == {None}
    monitor.arm("error")
    for key in keys:  # all present for the runtime: no miss
        PyKernel().get_or_compile(key)
    assert monitor.events() == ()


def test_kernel_warmup_where_filters_points():
    keys = PyKernel().warmup(n=[1, 2, 3], where=lambda n: n != 2)
    assert [k.n for k in keys] == [1, 3]
    assert len(_kernels.COMPILES) == 2


def test_jit_kernel_is_generic_in_its_key():
    assert JitKernel[int] is not None
    assert typing.get_origin(JitKernel[int]) is JitKernel


def test_launch_lookup_finds_a_launched_key_object_by_identity_and_is_cleared():
    PyKernel.clear_executors()
    kernel = PyKernel()
    key = kernel.dispatch(n=7)
    assert PyKernel.launch_lookup(id(key)) is None
    executor = kernel.launch_executor(key)
    assert executor.key == key and kernel.executors[key] is executor
    seen = PyKernel.launch_lookup(id(key))
    assert seen is not None and seen[0] is key and seen[1] is executor
    equal = PyKernel.CompileKey(n=7, flag=False)  # equal, another object: not by identity
    assert PyKernel.launch_lookup(id(equal)) is None
    assert kernel.launch_executor(equal) is executor  # found by hash, not compiled again
    assert OtherKernel.launch_lookup(id(key)) is None  # per class
    PyKernel.clear_executors()
    assert PyKernel.launch_lookup(id(key)) is None


def test_launch_lookup_stays_bounded():
    PyKernel.clear_executors()
    kernel = PyKernel()
    keys = [
        PyKernel.CompileKey(n=i % 3, flag=False)
        for i in range(kernel_module.LAUNCH_LOOKUP_LIMIT + 5)
    ]
    for key in keys:
        kernel.launch_executor(key)
    assert PyKernel.launch_lookup(id(keys[0])) is None  # started over
    assert PyKernel.launch_lookup(id(keys[-1]))[0] is keys[-1]
    PyKernel.clear_executors()


def test_an_abstract_base_launch_names_the_fix():
    class Base(JitKernel):
        backend = "triton"

    assert Base.launch_lookup(123) is None
    with pytest.raises(TypeError, match="abstract kernel base"):
        Base().launch_executor(1)


def test_dispatch_memo_types_is_the_overridable_hook():
    assert JitKernel.dispatch_memo_types() == frozenset()

    class Token:  # an immutable value type a DSL would declare
        pass

    class Base(JitKernel):
        @classmethod
        def dispatch_memo_types(cls):
            return frozenset({Token})

    class K(Base):
        backend = "triton"

        @attrs.frozen
        class CompileKey:
            t: object

        def dispatch(self, *, t):
            return self.CompileKey(t)

    tok = Token()
    assert K().dispatch(t=tok) is K().dispatch(t=tok)  # memoized on the declared type
