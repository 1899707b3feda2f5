"""TritonKernel: definition checks, clear errors, launch binding, the interpreter end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
import torch
import triton
from warmkit_triton import (
    InterpretedExecutor,
    TritonBackend,
    TritonKernel,
    TritonNotInstalledError,
    WarmupTensor,
)
from warmkit_triton._kernel import bind_args

import warmkit
from warmkit import KernelDefinitionError, WarmupError

from ._kernels import Add, add_kernel

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

HERE = Path(__file__).resolve().parent
T = WarmupTensor("float32", (64,))

CASES = {
    "ok": (((T, T, T, 64), {"BLOCK": 128}), {"num_warps": 4}),
    "missing": (((T, T, T), {"BLOCK": 128}), {}),
    "unknown_kw": (((T, T, T, 64), {"BLOK": 128}), {}),
    "option_in_args": (((T, T, T, 64), {"BLOCK": 128, "num_warps": 4}), {}),
    "too_many": (((T, T, T, 64, 128, 7), {}), {}),
    "twice": (((T, T, T, 64), {"n": 64, "BLOCK": 128}), {}),
    "param_in_options": (((T, T, T, 64), {}), {"BLOCK": 128}),
    "unknown_option": (((T, T, T, 64), {"BLOCK": 128}), {"num_warp": 4}),
    "not_a_pair": ([T, T, T, 64], {}),
}


class Configurable(TritonKernel):
    fn = add_kernel

    @attrs.frozen
    class CompileKey:
        case: str

    def dispatch(self, *, case: str = "ok") -> CompileKey:
        return self.CompileKey(case)

    def warmup_args(self, key: CompileKey):
        return CASES[key.case][0]

    def launch_options(self, key: CompileKey):
        return CASES[key.case][1]


@pytest.mark.parametrize(
    "case,message",
    [
        ("missing", re.escape("does not give parameter 'n' of add_kernel(x, y, out, n, BLOCK)")),
        (
            "unknown_kw",
            re.escape(
                "'BLOK', which is not a parameter of add_kernel(x, y, out, n, BLOCK) (did you mean 'BLOCK'?)"
            ),
        ),
        (
            "option_in_args",
            "'num_warps', which is not a parameter .*launch options belong in launch_options",
        ),
        ("too_many", "gives 6 positional arguments but add_kernel.* takes 5"),
        ("twice", "gives parameter 'n' of add_kernel.* both positionally and by keyword"),
        (
            "param_in_options",
            "launch_options\\(key\\) sets 'BLOCK', which is a parameter of add_kernel",
        ),
        (
            "unknown_option",
            "'num_warp', which is not a Triton launch option \\(did you mean 'num_warps'\\?\\)",
        ),
        ("not_a_pair", "must return \\(args, kwargs\\)"),
    ],
)
def test_warmup_args_that_do_not_match_fn_name_the_parameter(case, message):
    backend = TritonBackend()
    key = Configurable().dispatch(case=case)
    with pytest.raises(TypeError, match=message) as exc:
        backend.compile(Configurable(), key, "cuda:90")
    assert Configurable.name in str(exc.value)


def test_mismatch_surfaces_in_warmkit_warmup_with_kernel_and_key():
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Configurable().register_warmup(case=["ok", "missing"])
    with pytest.raises(WarmupError) as exc:
        warmkit.warmup(
            warmkit.WarmupConfig(target="cuda:90", progress="off", monitor="off", jobs=1),
            registry=reg,
        )
    assert "missing" in repr(exc.value.key) and isinstance(exc.value.__cause__, TypeError)
    assert "'n'" in str(exc.value.__cause__)


def test_definition_errors():
    def key_and_dispatch(ns):
        @attrs.frozen
        class CompileKey:
            a: int

        ns["CompileKey"] = CompileKey
        ns["dispatch"] = lambda self, *, a=1: self.CompileKey(a)
        ns["warmup_args"] = lambda self, key: ((), {})

    with pytest.raises(KernelDefinitionError, match="without fn"):

        class NoFn(TritonKernel):
            @attrs.frozen
            class CompileKey:
                a: int

            def dispatch(self, *, a: int = 1):
                return self.CompileKey(a)

            def warmup_args(self, key):
                return (), {}

    with pytest.raises(KernelDefinitionError, match="must be a @triton.jit function"):

        class PlainFn(TritonKernel):
            fn = staticmethod(lambda x: x)

            @attrs.frozen
            class CompileKey:
                a: int

            def dispatch(self, *, a: int = 1):
                return self.CompileKey(a)

            def warmup_args(self, key):
                return (), {}

    with pytest.raises(KernelDefinitionError, match="warmup_args"):

        class NoWarmupArgs(TritonKernel):
            fn = add_kernel

            @attrs.frozen
            class CompileKey:
                a: int

            def dispatch(self, *, a: int = 1):
                return self.CompileKey(a)

    assert Add.backend == "triton" and issubclass(Add, warmkit.JitKernel)


def test_device_mode_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():  # pragma: no cover - GPU host
        pytest.skip("needs a host without a GPU")
    with pytest.raises(
        RuntimeError, match="no GPU is visible.*target='cuda:90'.*TRITON_INTERPRET=1"
    ):
        TritonBackend().compile(Add(), Add().dispatch(), None)


def test_triton_not_installed_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    backend = TritonBackend()
    status = backend.available()
    assert (
        not status.ok
        and status.install_hint
        and "pip install warmkit-triton" in status.install_hint
    )
    assert "pip install 'triton>=3.6'" in status.install_hint
    assert "Triton is not installed" in status.reason
    with pytest.raises(TritonNotInstalledError, match="pip install warmkit-triton") as exc:
        backend.compile(Add(), Add().dispatch(), "cuda:90")
    assert isinstance(exc.value, ImportError)
    assert backend.default_target() is None
    backend.install_monitor()  # nothing to hook: a no-op, not an error
    backend.uninstall_monitor()


def test_too_old_triton_is_reported(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "3.5.1")
    status = TritonBackend().available()
    assert not status.ok and "too old" in status.reason and status.version == "3.5.1"


def test_without_triton_in_a_fresh_process(tmp_path):
    """The package imports, the backend reports the hint, and warmkit's error names kernel, backend and hint."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["triton"] = None
        import attrs, warmkit, warmkit_triton
        print("status", warmkit_triton.TritonBackend().available())

        class NeedsTriton(warmkit.JitKernel):
            backend = "triton"
            @attrs.frozen
            class CompileKey:
                a: int
            def dispatch(self, *, a=1):
                return self.CompileKey(a)

        reg = warmkit.WarmupRegistry()
        with reg.activate():
            NeedsTriton().register_warmup(a=[1])
        try:
            warmkit.warmup(warmkit.WarmupConfig(target="cuda:90", progress="off"), registry=reg)
        except Exception as exc:
            print("error", type(exc).__name__, exc)
        """
    )
    path = tmp_path / "no_triton.py"
    path.write_text(script)
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "status BackendStatus(ok=False" in out.stdout
    error = next(line for line in out.stdout.splitlines() if line.startswith("error"))
    assert "NeedsTriton" in error and "'triton'" in error and "pip install warmkit-triton" in error


def test_bind_args():
    names, defaults = ["x", "n", "BLOCK"], {"BLOCK": 64}
    assert bind_args("k", "f", names, defaults, (1, 2), {}) == (1, 2, 64)
    assert bind_args("k", "f", names, defaults, (1,), {"BLOCK": 8, "n": 3}) == (1, 3, 8)
    with pytest.raises(TypeError, match="missing argument 'n'"):
        bind_args("k", "f", names, defaults, (1,), {})
    with pytest.raises(TypeError, match="'x' of f given twice"):
        bind_args("k", "f", names, defaults, (1,), {"x": 2, "n": 1})
    with pytest.raises(
        TypeError, match="'BLOK' is not a parameter of f \\(did you mean 'BLOCK'\\?\\)"
    ):
        bind_args("k", "f", names, defaults, (1, 2), {"BLOK": 3})
    with pytest.raises(TypeError, match="4 positional arguments given, f takes 3"):
        bind_args("k", "f", names, defaults, (1, 2, 3, 4), {})


def test_interpreter_end_to_end():
    """Under TRITON_INTERPRET=1 (its own process), warmup and TritonKernel launches work on CPU tensors."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-W", "ignore", str(HERE / "_interp_script.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "interpreter ok" in out.stdout


def test_interpreted_executor_repr():
    ex = InterpretedExecutor(kernel="k", key=1, fn=add_kernel, launch_options={"num_warps": 4})
    assert "InterpretedExecutor k" in repr(ex) and ex.cache_hit is True


def test_runtime_inputs_add_the_torch_dtype_a_launch_passes():
    got = TritonKernel.runtime_inputs({"dtype": "float16", "n": 4, "tag": "x"})
    assert list(got) == [
        {"dtype": "float16", "n": 4, "tag": "x"},
        {"dtype": torch.float16, "n": 4, "tag": "x"},
    ]
    assert list(TritonKernel.runtime_inputs({"n": 4})) == [{"n": 4}]  # nothing to add
