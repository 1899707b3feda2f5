"""The public API is a contract: ``__all__``, importability, ``py.typed``, no torch/triton on import."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import warmkit

ROOT = Path(__file__).resolve().parents[2]


def _public_names() -> list[str]:
    """What ``warmkit/__init__.py`` re-exports, read from its code (not a hand copy).

    Every name of its ``_LAZY`` table (each loaded from its module on first use) and
    ``__version__``.
    """
    return sorted({"__version__", *_lazy_table()})


def _lazy_table() -> dict[str, str]:
    """``warmkit/__init__.py``'s ``_LAZY``: public name -> the module it is imported from."""
    tree = ast.parse((ROOT / "warmkit" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "_LAZY":
            assert node.value is not None
            table = ast.literal_eval(node.value)
            assert isinstance(table, dict)
            return table
    raise AssertionError("warmkit/__init__.py has no _LAZY table")


PUBLIC = _public_names()

#: Names released before; code outside this repository imports them, so they never go away.
RELEASED = {
    "Backend",
    "BackendNotImplementedError",
    "BackendStatus",
    "BackendUnavailableError",
    "BundleError",
    "BundleInstall",
    "CacheMissError",
    "Choices",
    "Fleet",
    "IntRange",
    "JitKernel",
    "KernelDefinitionError",
    "ManifestError",
    "PluginFailure",
    "PluginLoadError",
    "RecordedEntry",
    "Recorder",
    "Registration",
    "ReportEntry",
    "RuntimeCompileError",
    "StoreError",
    "StoreUnavailableError",
    "WarmkitError",
    "WarmupConfig",
    "WarmupError",
    "WarmupRegistry",
    "WarmupReport",
    "ZipGroup",
    "__version__",
    "activate",
    "active_recorder",
    "active_registry",
    "build_bundle",
    "current_fleet",
    "current_target",
    "default_registry",
    "inspect_bundle",
    "install_bundle",
    "metrics",
    "monitor",
    "read_recorded",
    "start_recording",
    "stop_recording",
    "warmup",
    "zip_inputs",
}

#: The typed contract's names (issue 28): plugins and operators' scripts parse targets with it.
TYPED_CONTRACT = {"ReportStatus", "Target"}

#: The names issue #2 lists; tests outside this repository import them from ``warmkit``.
ISSUE_NAMES = {
    "JitKernel",
    "KernelDefinitionError",
    "IntRange",
    "Choices",
    "zip_inputs",
    "WarmupRegistry",
    "default_registry",
    "activate",
    "warmup",
    "WarmupConfig",
    "WarmupReport",
    "WarmupError",
    "RuntimeCompileError",
    "PluginLoadError",
    "BackendNotImplementedError",
    "monitor",
}


def test_all_is_exactly_the_public_names_sorted():
    assert warmkit.__all__ == PUBLIC
    assert warmkit.__all__ == sorted(warmkit.__all__)
    assert ISSUE_NAMES <= set(warmkit.__all__)
    assert set(warmkit.__all__) >= RELEASED
    assert set(warmkit.__all__) >= TYPED_CONTRACT


def test_each_public_name_is_defined_where_init_imports_it_from():
    """Every re-exported name is in its module's own ``__all__`` (no accidental re-export)."""
    for name, where in _lazy_table().items():
        module = importlib.import_module(where, "warmkit")
        if module.__name__ == f"warmkit.{name}":  # a public submodule (monitor, metrics)
            continue
        assert name in module.__all__, f"{name} is not in {module.__name__}.__all__"


def test_import_warmkit_imports_none_of_its_modules_until_a_name_is_used():
    """``import warmkit`` imports no module of its own but ``_version``: the CLI's ``warmkit
    run`` and the startup hook import only what they use (B7). Checked in a fresh process."""
    code = (
        "import sys, warmkit\n"
        "before = sorted(m for m in sys.modules if m.startswith('warmkit.'))\n"
        "warmkit.WarmupConfig\n"
        "print(before, 'warmkit._warmup.config' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['warmkit._version'] True"


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_importable(name):
    ns: dict[str, object] = {}
    exec(f"from warmkit import {name}", ns)  # noqa: S102 -- the import statement is the test
    assert ns[name] is getattr(warmkit, name)


def test_star_import_gives_every_public_name():
    ns: dict[str, object] = {}
    exec("from warmkit import *", ns)  # noqa: S102
    assert set(PUBLIC) <= set(ns)


def test_monitor_is_the_public_module():
    assert inspect.ismodule(warmkit.monitor)
    for name in ("arm", "disarm", "allow", "events", "on_miss", "record", "in_managed_compile"):
        assert callable(getattr(warmkit.monitor, name))


def test_unknown_attribute_is_attribute_error():
    with pytest.raises(AttributeError):
        warmkit.no_such_name  # noqa: B018


def test_version_matches_the_distribution():
    assert warmkit.__version__ == importlib.metadata.version("warmkit")


def test_exception_hierarchy():
    builtin = {
        "KernelDefinitionError": TypeError,
        "ManifestError": ValueError,
        "PluginLoadError": ImportError,
        "BackendUnavailableError": RuntimeError,
        "BackendNotImplementedError": NotImplementedError,
        "WarmupError": RuntimeError,
        "RuntimeCompileError": RuntimeError,
    }
    for name, base in builtin.items():
        cls = getattr(warmkit, name)
        assert issubclass(cls, warmkit.WarmkitError), name
        assert issubclass(cls, base), name


def test_py_typed_is_in_the_package_and_the_wheel(tmp_path):
    assert (ROOT / "warmkit" / "py.typed").is_file()
    built = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("warmkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "warmkit/py.typed" in names
    # `warmkit run`/`record` put this folder on the command's PYTHONPATH
    assert "warmkit/_cli/hook/sitecustomize.py" in names
    assert not [n for n in names if n.startswith(("plugins/", "tests/"))]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "warmkit = warmkit._cli.commands:main" in text
    assert "tilelang = warmkit._plugin.contract:TileLangStubBackend" in text
    assert "cutedsl = warmkit._plugin.contract:CuteDSLStubBackend" in text


def test_console_script_and_stub_entry_points_are_installed():
    eps = importlib.metadata.distribution("warmkit").entry_points
    assert {(e.group, e.name, e.value) for e in eps} >= {
        ("console_scripts", "warmkit", "warmkit._cli.commands:main"),
        ("warmkit.backends", "tilelang", "warmkit._plugin.contract:TileLangStubBackend"),
        ("warmkit.backends", "cutedsl", "warmkit._plugin.contract:CuteDSLStubBackend"),
    }


_PROBE = """
import json, sys
import warmkit
after_import = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton"))

import attrs

class K(warmkit.JitKernel):
    @attrs.frozen
    class CompileKey:
        n: int

    def dispatch(self, *, n):
        return self.CompileKey(n)

    def compile(self, key):
        return object()

reg = warmkit.WarmupRegistry()
with reg.activate():
    K().register_warmup(n=[1, 2])
report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="error"), reg)
warmkit.monitor.disarm()
after_use = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton"))
print(json.dumps({"import": after_import, "use": after_use, "keys": len(report.entries)}))
"""


def test_import_and_a_plain_warmup_import_no_torch_or_triton():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"},
    )
    result = json.loads(out.stdout)
    assert result == {"import": [], "use": [], "keys": 2}


def test_import_warmkit_leaves_entry_point_metadata_for_the_first_scan():
    """B7: importlib.metadata (and the email package it pulls in) was 20-45 ms of `import warmkit`
    on the 2-core box; it is imported at the first plugin scan, which an engine may never make."""
    code = (
        "import sys, warmkit\n"
        "print(sorted(m for m in ('importlib.metadata', 'email.message') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_type_checkers_see_every_lazy_name_from_its_module():
    """``_LAZY`` (what runs) and the ``if TYPE_CHECKING:`` imports (what mypy and IDEs read)
    name the same names from the same modules."""
    tree = ast.parse((ROOT / "warmkit" / "__init__.py").read_text())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    seen: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names:
            seen[alias.asname or alias.name] = (
                "." + node.module if node.module else "." + alias.name
            )
    assert seen == _lazy_table()
