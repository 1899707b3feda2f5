"""Every plugin's modules import each other without cycles (read from their import statements).

Files are read, not imported, so the test needs none of the plugins' heavy
dependencies (triton, tilelang, cutlass) installed.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parent.parent / "plugins"
PACKAGES = {
    "warmkit_triton": PLUGINS / "triton_backend" / "warmkit_triton",
    "warmkit_blocktable": PLUGINS / "blocktable" / "warmkit_blocktable",
    "warmkit_tilelang": PLUGINS / "tilelang_backend" / "warmkit_tilelang",
    "warmkit_cutedsl": PLUGINS / "cutedsl_backend" / "warmkit_cutedsl",
}


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(modules: set[str], name: str) -> str | None:
    """The longest module of the package that ``name`` is or lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: str, root: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports, at module level or inside functions alike.

    A module is named by its dotted path (``warmkit_triton._triton_api._cache``);
    a package by its ``__init__``'s name. ``from . import name`` where ``name``
    is a module is an import of that module, otherwise of the package.
    """
    files = {_module_name(package, root, p): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        here = name if is_package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join([*base, node.module] if node.module else base)
                else:
                    prefix = node.module or ""
                for alias in node.names:
                    full = f"{prefix}.{alias.name}"
                    targets.append(full if full in modules else prefix)
            elif isinstance(node, ast.Import):
                targets.extend(alias.name for alias in node.names)
            for target in targets:
                if (resolved := _resolve(modules, target)) is not None:
                    edges.add(resolved)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a closed path, or None (``graphlib`` finds it)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # graphlib lists it against the edges
    return None


def _inner_graph(package: str) -> dict[str, set[str]]:
    """The graph without the package's ``__init__``: it imports the modules that
    make up its ``__all__``, and they may import a sibling through it only if
    that is a cycle, which ``test_no_module_imports_the_package_back`` reports."""
    graph = import_graph(package, PACKAGES[package])
    return {m: e - {package} for m, e in graph.items() if m != package}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_plugin_import_graph_has_no_cycle(package):
    cycle = find_cycle(_inner_graph(package))
    assert cycle is None, f"import cycle in {package}: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_module_imports_the_package_back(package):
    graph = import_graph(package, PACKAGES[package])
    back = sorted(m for m, edges in graph.items() if package in edges and m != package)
    assert not back, (
        f"{back} import {package} itself (its __init__ imports them): import the module instead"
    )


def test_triton_api_is_a_leaf():
    """``_triton_api`` wraps Triton's internals and nothing of warmkit_triton above it."""
    layer = "warmkit_triton._triton_api"
    graph = import_graph("warmkit_triton", PACKAGES["warmkit_triton"])
    upward = {
        m: sorted(e for e in edges if not (e == layer or e.startswith(layer + ".")))
        for m, edges in graph.items()
        if m == layer or m.startswith(layer + ".")
    }
    assert not {m: e for m, e in upward.items() if e}, (
        f"_triton_api imports the plugin above it: {upward}"
    )


def test_the_graph_reader_sees_cycles_lazy_and_relative_imports(tmp_path):
    cycle = find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert cycle is not None and cycle[0] == cycle[-1] and sorted(cycle[1:]) == ["a", "b", "c"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("from ._a import f\n")
    (root / "_a.py").write_text("def f():\n    from .sub import _c\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "_c.py").write_text("from .. import _a\nfrom pkg.sub import helper\n")
    graph = import_graph("pkg", root)
    assert graph["pkg._a"] == {"pkg.sub._c"}  # imported inside a function
    assert graph["pkg.sub._c"] == {"pkg._a", "pkg.sub"}  # `from .. import _a`, then the package
    cycle = find_cycle({m: e - {"pkg"} for m, e in graph.items() if m != "pkg"})
    assert cycle is not None and set(cycle) == {"pkg._a", "pkg.sub._c"}


def test_every_plugin_package_is_read():
    for package, root in PACKAGES.items():
        assert (root / "__init__.py").is_file(), f"{package} moved: update PACKAGES in this test"
        assert len(import_graph(package, root)) > 1
