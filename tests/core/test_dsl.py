"""warmkit.FunctionKernel and warmkit.MethodHooks: the parts DSL backends share (no DSL needed here)."""

from __future__ import annotations

import importlib
import sys

import attrs
import pytest

import warmkit
from warmkit import FunctionKernel, KernelDefinitionError, MethodHooks


def _is_program(obj):
    return getattr(obj, "is_program", False)


def program(n):
    return n * 2


program.is_program = True


class DemoKernel(FunctionKernel):
    """A DSL plugin's base, as TileLangKernel is (compiles itself, so no backend is needed)."""

    backend = "demo"
    fn_kind = "@demo.jit function"
    fn_check = staticmethod(_is_program)


@attrs.frozen
class Key:
    n: int


def test_definitions_are_checked_with_the_plugins_words():
    with pytest.raises(KernelDefinitionError, match="DemoKernel without fn.*@demo.jit function"):

        class NoFn(DemoKernel):
            CompileKey = Key

            def dispatch(self, *, n):
                return Key(n)

    with pytest.raises(KernelDefinitionError, match="module:attr"):

        class BadPath(DemoKernel):
            CompileKey = Key
            fn = "no_colon"

            def dispatch(self, *, n):
                return Key(n)

    with pytest.raises(KernelDefinitionError, match="must be a @demo.jit function"):

        class NotJit(DemoKernel):
            CompileKey = Key
            fn = staticmethod(len)

            def dispatch(self, *, n):
                return Key(n)

    with pytest.raises(KernelDefinitionError, match="compile_args"):

        class NoArgs(DemoKernel):
            CompileKey = Key
            fn = f"{__name__}:program"

            def dispatch(self, *, n):
                return Key(n)


def test_jit_function_resolves_a_path_once_and_names_the_kernel_when_it_cannot():
    class Good(DemoKernel):
        CompileKey = Key
        fn = f"{__name__}:program"

        def dispatch(self, *, n):
            return Key(n)

        def compile_args(self, key):
            return (key.n,)

    assert Good.jit_function() is program and Good.fn is program

    class Missing(Good):
        fn = f"{__name__}:no_such_program"

    with pytest.raises(LookupError, match="Missing.*no_such_program"):
        Missing.jit_function()

    class Wrong(Good):
        fn = f"{__name__}:Key"

    with pytest.raises(TypeError, match="not a @demo.jit function"):
        Wrong.jit_function()


def test_run_uses_the_executor_cache_and_call_dispatches():
    @attrs.define
    class Exe:
        key: Key

        def launch(self, *args):
            return (self.key.n, args)

    compiled = []

    class Self(DemoKernel):
        CompileKey = Key
        fn = program

        def dispatch(self, *, n):
            return Key(n)

        def compile_args(self, key):
            return (key.n,)

        def compile(self, key):
            compiled.append(key)
            return Exe(key)

    k = Self()
    assert k("a", n=3) == (3, ("a",))
    assert k.run(Key(3), "b") == (3, ("b",)) and compiled == [Key(3)]  # compiled once


def test_method_hooks_chain_restore_exactly_and_stay_in_a_foreign_chain():
    class Lib:
        def compile(self, x):
            return f"compiled {x}"

    original = Lib.__dict__["compile"]
    seen = []

    def body(previous, inst, x):
        seen.append(x)
        return previous(inst, x)

    hooks = MethodHooks("demo hooks")
    hooks.install((((Lib, "compile"), body),))
    hooks.install((((Lib, "compile"), body),))  # idempotent: not wrapped twice
    assert hooks.installed() and Lib().compile(1) == "compiled 1" and seen == [1]
    hooks.uninstall()
    assert Lib.__dict__["compile"] is original and not hooks.installed()

    hooks.install((((Lib, "compile"), body),))
    ours = Lib.__dict__["compile"]
    foreign_calls = []

    def foreign(inst, x):
        foreign_calls.append(x)
        return ours(inst, x)

    Lib.compile = foreign  # another tool wraps on top of ours
    hooks.uninstall()
    assert Lib.__dict__["compile"] is foreign  # their chain is kept
    assert Lib().compile(2) == "compiled 2" and foreign_calls == [2] and seen == [1]  # ours passes


def test_method_hooks_passthrough_and_inherited_methods():
    class Base:
        def run(self):
            return "base"

    class Child(Base):
        pass

    state = {"pass": False}
    hooks = MethodHooks("demo", passthrough=lambda: state["pass"])
    hooks.install((((Child, "run"), lambda previous, inst: "hooked " + previous(inst)),))
    assert Child().run() == "hooked base"
    state["pass"] = True
    assert Child().run() == "base"
    hooks.uninstall()
    assert "run" not in Child.__dict__ and Child().run() == "base"


def test_public_names():
    assert warmkit.FunctionKernel is FunctionKernel and warmkit.MethodHooks is MethodHooks


def _dsl_module(tmp_path, monkeypatch, name: str, body: str = "VALUE = 1\n") -> None:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_hooks_wait_for_their_dsls_import_then_install_once(tmp_path, monkeypatch):
    from importlib.machinery import SourceFileLoader

    _dsl_module(tmp_path, monkeypatch, "wk_fake_dsl_a")
    calls = []
    hooks = MethodHooks("fake hooks")
    hooks.install_when_imported("wk_fake_dsl_a", lambda: calls.append(sys.modules["wk_fake_dsl_a"]))
    hooks.install_when_imported("wk_fake_dsl_a", lambda: calls.append("again"))  # still pending
    assert calls == [] and "wk_fake_dsl_a" not in sys.modules
    module = importlib.import_module("wk_fake_dsl_a")
    assert calls == [module] and module.VALUE == 1
    # the module sees its own loader, and nothing of warmkit's stays on the import path
    assert (
        type(module.__loader__) is SourceFileLoader and module.__spec__.loader is module.__loader__
    )
    assert not any(type(f).__name__ == "_AfterImportFinder" for f in sys.meta_path)
    hooks.install_when_imported("wk_fake_dsl_a", lambda: calls.append("now"))  # imported: at once
    assert calls == [module, "now"]


def test_uninstall_before_the_import_cancels_and_a_failing_install_never_fails_the_import(
    tmp_path, monkeypatch, caplog
):
    _dsl_module(tmp_path, monkeypatch, "wk_fake_dsl_b")
    _dsl_module(tmp_path, monkeypatch, "wk_fake_dsl_c")
    calls = []
    cancelled = MethodHooks("cancelled hooks")
    cancelled.install_when_imported("wk_fake_dsl_b", lambda: calls.append("b"))
    cancelled.uninstall()
    importlib.import_module("wk_fake_dsl_b")
    assert calls == []

    def broken() -> None:
        raise RuntimeError("the DSL moved its class")

    MethodHooks("broken hooks").install_when_imported("wk_fake_dsl_c", broken)
    with caplog.at_level("WARNING", logger="warmkit"):
        assert importlib.import_module("wk_fake_dsl_c").VALUE == 1
    (record,) = [r for r in caplog.records if "broken hooks" in r.getMessage()]
    assert (
        "wk_fake_dsl_c" in record.getMessage() and "the DSL moved its class" in record.getMessage()
    )
