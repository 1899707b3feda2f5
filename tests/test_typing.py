"""mypy finds 0 errors in the core and in every plugin package ([tool.mypy] in pyproject.toml).

Run once, from the README's ``.venv`` job (this file is outside the ``.venv36``
job's paths): the packages are the same source under both Tritons, and Triton is
an untyped module to mypy (``ignore_missing_imports``), so its version changes
nothing that mypy sees.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["warmkit", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("plugins/*/warmkit_*"))]
DISTRIBUTIONS = [
    "warmkit",
    "warmkit_triton",
    "warmkit_blocktable",
    "warmkit_tilelang",
    "warmkit_cutedsl",
]

#: public callables (``public_callables``) whose parameters or return mention ``Any``; a
#: change that adds one fails test_any_in_public_callables_does_not_grow: type it, or
#: raise this number with a reason in the commit. 95: TritonBackend.identity_pins and
#: key_factors (kernel: Any) were inherited from a base class the walk does not read; they
#: are its own members since the backend became a compiler plus components
ANY_BUDGET = 95


def test_every_plugin_package_is_checked():
    assert len(PACKAGES) == 1 + len(list(ROOT.glob("plugins/*/pyproject.toml")))
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file(), f"{package} ships no py.typed"


@pytest.mark.slow
def test_mypy_finds_no_errors(tmp_path):
    """~20 s with a cold cache (the cache is per test run, under tmp_path)."""
    pytest.importorskip(
        "mypy", reason="mypy is in warmkit's [test] extra: pip install -e './[test]'"
    )
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy"), *PACKAGES]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 0 and not errors, (
        f"mypy found {len(errors)} error(s) (run: {' '.join(cmd[2:])}):\n"
        + (result.stdout + result.stderr)[-20000:]
    )


def test_every_exception_a_package_exports_is_a_warmkit_error():
    """``except warmkit.WarmkitError`` catches what the core and every plugin raise."""
    import warmkit

    found = []
    for package in DISTRIBUTIONS:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                found.append(f"{package}.{name}")
                assert issubclass(obj, warmkit.WarmkitError), f"{package}.{name} is no WarmkitError"
    assert "warmkit_triton.TritonNotInstalledError" in found
    assert "warmkit_tilelang.TileLangNotInstalledError" in found
    assert "warmkit_cutedsl.CuteDSLNotInstalledError" in found


def test_plugin_errors_outside_all_are_warmkit_errors_and_keep_their_builtin():
    from warmkit_triton._autotune import AutotuneKeyMismatchError
    from warmkit_triton._pins import PinMismatchError
    from warmkit_triton._record import UnreplayableError

    import warmkit

    for cls, builtin in [
        (AutotuneKeyMismatchError, RuntimeError),
        (PinMismatchError, RuntimeError),
        (UnreplayableError, ValueError),
    ]:
        assert issubclass(cls, warmkit.WarmkitError) and issubclass(cls, builtin), cls


def public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    """Each public function of every package's ``__all__``, and each public method of its classes."""
    for package in DISTRIBUTIONS:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                yield f"{package}.{name}", obj
            elif inspect.isclass(obj):
                for member, fn in vars(obj).items():
                    if isinstance(fn, (staticmethod, classmethod)):
                        fn = fn.__func__
                    elif isinstance(fn, property):
                        fn = fn.fget
                    public = not member.startswith("_") or member in ("__call__", "__init__")
                    generated = inspect.isfunction(fn) and "<attrs" in fn.__code__.co_filename
                    if public and inspect.isfunction(fn) and not generated:
                        yield f"{package}.{name}.{member}", fn


def takes_or_returns_any(fn: Callable[..., object]) -> bool:
    """Whether a parameter's or the return's annotation mentions ``Any`` (``dict[str, Any]`` too)."""
    return any(re.search(r"\bAny\b", str(a)) for a in inspect.get_annotations(fn).values())


def any_count() -> tuple[int, int, list[str]]:
    found = list(public_callables())
    with_any = [name for name, fn in found if takes_or_returns_any(fn)]
    return len(with_any), len(found), with_any


def test_any_in_public_callables_does_not_grow():
    n, total, names = any_count()
    assert total > 200, f"only {total} public callables found: the walk of __all__ is broken"
    assert n <= ANY_BUDGET, (
        f"{n} of {total} public callables take or return Any, over the budget of {ANY_BUDGET}:\n"
        + "\n".join(names)
    )


if __name__ == "__main__":  # python tests/test_typing.py [-v]: the count the budget holds
    n, total, names = any_count()
    print(f"{n} of {total} public callables take or return Any")
    if "-v" in sys.argv:
        print("\n".join(names))
