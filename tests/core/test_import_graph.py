"""The core's layers, read from its import statements: folders in order, no cycles.

Each top-level module or folder of ``warmkit/`` has a layer; a module imports
only modules of its own layer or lower ones, and the registry and the cache
(same layer) never import each other. ``docs/architecture.md`` says why.
"""

from __future__ import annotations

import ast
from pathlib import Path

import warmkit

PACKAGE = Path(warmkit.__file__).parent


def core_modules() -> dict[str, Path]:
    """Every module of the core by its dotted name under ``warmkit``.

    ``warmkit/__init__.py`` is ``__init__``; a sub-package's ``__init__.py`` is
    the package's name (``_plugin``), a module in it ``_plugin.contract``.
    """
    modules: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _package_of(name: str, path: Path) -> list[str]:
    """The package a relative import of module ``name`` starts from (``[]`` is ``warmkit``)."""
    parts = [] if name == "__init__" else name.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The core modules ``name`` imports, at module level or inside functions alike.

    ``from pkg import x`` is an import of the module ``pkg.x`` when there is one,
    else of ``pkg`` itself; ``pkg`` = ``warmkit`` is ``__init__``, which imports
    every module: a cycle.
    """

    def target(parts: list[str]) -> str:
        return ".".join(parts) or "__init__"

    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name, path)
                base = base[: len(base) - (node.level - 1)]
            elif (node.module or "").split(".")[0] == "warmkit":
                base = []
            else:
                continue
            module = (node.module or "").split(".")
            if node.level == 0:
                module = module[1:]
            base = base + [m for m in module if m]
            for alias in node.names:
                sub = target([*base, alias.name])
                edges.add(sub if sub in modules else target(base))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "warmkit":
                    edges.add(target(parts[1:]))
    return edges & modules.keys() - {name}


def import_graph() -> dict[str, set[str]]:
    """module -> the core modules it imports."""
    modules = core_modules()
    return {name: imports_of(name, path, modules) for name, path in sorted(modules.items())}


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


#: Lowest first. A new top-level module or folder must be placed here (a test says so).
LAYERS: list[set[str]] = [
    {"_version", "_exceptions", "_envs", "_compat", "metrics"},  # leaves: import no warmkit module
    {"_plugin"},  # the contract with backends, discovery
    {"_registry", "_cache", "monitor"},  # what to compile / where compiled code lives
    {"_kernel"},  # JitKernel: registers, records, compiles through a backend, reads the cache
    {"_warmup"},  # orchestration over all of the above
    {"_cli", "__main__"},  # the warmkit command
    {"__init__", "testing"},  # the public facade and test seams
]
#: Pairs of one layer that must not import each other either.
APART = [("_registry", "_cache")]
#: At most this many top-level modules and folders (issue 28: the layers are folders).
MAX_TOP_LEVEL = 15


def top(module: str) -> str:
    return module.split(".")[0]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer, or across an ``APART`` pair."""
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    apart = {frozenset(pair) for pair in APART}
    out = []
    for module, edges in sorted(graph.items()):
        for edge in sorted(edges):
            a, b = top(module), top(edge)
            if layer[b] > layer[a]:
                out.append(f"{module} (layer {layer[a]}) imports {edge} (layer {layer[b]})")
            elif frozenset((a, b)) in apart:
                out.append(f"{module} imports {edge}: {a} and {b} never import each other")
    return out


def test_every_top_level_module_and_folder_has_a_layer():
    tops = {top(m) for m in core_modules()}
    placed = set().union(*LAYERS)
    assert tops <= placed, (
        f"put {sorted(tops - placed)} in LAYERS (tests/core/test_import_graph.py)"
    )
    assert len(tops) <= MAX_TOP_LEVEL, f"{len(tops)} top-level modules and folders: {sorted(tops)}"


def test_no_module_imports_a_higher_layer():
    bad = layer_violations(import_graph())
    assert not bad, "imports against the layer order (docs/architecture.md):\n" + "\n".join(bad)


def test_the_layer_check_sees_an_import_up_and_across():
    graph = {
        "_plugin.contract": {"_warmup.config", "_exceptions"},
        "_cache.fleet": {"_registry.recorded", "_plugin.contract", "metrics"},
        "_warmup.orchestrate": {"_cache.fleet", "_registry.recorded", "monitor"},
    }
    assert layer_violations(graph) == [
        "_cache.fleet imports _registry.recorded: _cache and _registry never import each other",
        "_plugin.contract (layer 1) imports _warmup.config (layer 4)",
    ]


def test_package_inits_import_nothing():
    """A folder's ``__init__`` is only its docstring: importing one module never imports its siblings."""
    inits = {m: e for m, e in import_graph().items() if core_modules()[m].name == "__init__.py"}
    assert not {m: e for m, e in inits.items() if m != "__init__" and e}


def test_the_core_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_reader_sees_a_cycle_and_lazy_imports():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    graph = import_graph()
    assert (
        "_warmup.coldpool" in graph["_warmup.orchestrate"]
    )  # backend_group imports it inside the function
    assert "_warmup.workers" in graph["_warmup.coldpool"]  # and it, _workers inside a method
    assert "__init__" not in graph["_cli.commands"]  # __version__ comes from _version
    assert "_plugin.discovery" in graph["monitor"]  # from ._plugin.discovery import ...
    assert "_plugin.contract" in graph["_plugin.discovery"]  # from .contract import ...


def test_no_module_imports_the_package_back():
    graph = import_graph()
    assert not [m for m, edges in graph.items() if "__init__" in edges and m != "__init__"]


def test_bundles_do_not_import_orchestration():
    edges = import_graph()["_cache.bundle"]
    assert not [e for e in edges if e.split(".")[0] in {"_warmup", "_build", "_cli"}]
