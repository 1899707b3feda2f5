"""The core's modules import each other without cycles (read from their import statements)."""

from __future__ import annotations

import ast
from pathlib import Path

import warmkit

PACKAGE = Path(warmkit.__file__).parent


def import_graph() -> dict[str, set[str]]:
    """module -> the warmkit modules it imports, at module level or inside functions alike.

    ``from . import name`` where ``name`` is not a module is an import of the
    package (``__init__``), which imports every module: a cycle.
    """
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name in sorted(modules):
        edges: set[str] = set()
        for node in ast.walk(ast.parse((PACKAGE / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    edges.add(node.module.split(".")[0])
                else:
                    edges.update(a.name if a.name in modules else "__init__" for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] == "warmkit":
                    edges.add(parts[1] if len(parts) > 1 else "__init__")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "warmkit":
                        edges.add(parts[1] if len(parts) > 1 else "__init__")
        graph[name] = edges & modules - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_core_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_reader_sees_a_cycle_and_lazy_imports():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    graph = import_graph()
    assert "_coldpool" in graph["_warmup"]  # backend_group imports it inside the function
    assert "_workers" in graph["_coldpool"]  # and it, _workers inside a method
    assert "__init__" not in graph["_cli"]  # __version__ comes from _version


def test_no_module_imports_the_package_back():
    graph = import_graph()
    assert not [m for m, edges in graph.items() if "__init__" in edges and m != "__init__"]


def test_bundles_do_not_import_orchestration():
    assert not {"_warmup", "_build", "_cli"} & import_graph()["_bundle"]
