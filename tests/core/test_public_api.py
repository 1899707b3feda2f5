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

    Every name it imports from its own modules, the lazily loaded bundle names,
    ``monitor`` and ``__version__``.
    """
    tree = ast.parse((ROOT / "warmkit" / "__init__.py").read_text())
    names = {"__version__"}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names.update(a.asname or a.name for a in node.names)
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_LAZY":
            names.update(ast.literal_eval(node.value))
    return sorted(n for n in names if not n.startswith("_") or n == "__version__")


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
    tree = ast.parse((ROOT / "warmkit" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            module = importlib.import_module(f"warmkit.{node.module}")
            for alias in node.names:
                assert alias.name in module.__all__, (
                    f"{alias.name} is not in {module.__name__}.__all__"
                )


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
