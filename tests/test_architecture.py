"""One-way architecture (issue 10): imports only run down the layers and never in a circle.

Every ``fedemstats/**/*.py`` is parsed with ``ast``; every ``import`` / ``from ... import``
counts, wherever it stands (inside functions too) and relative or absolute. Importing a
sub-module ``from pkg import mod`` is an edge to ``pkg/mod.py``; importing a name from a
package is an edge to its ``__init__.py``. Python's implicit import of the parent
packages is not an edge (every file would otherwise depend on its whole package).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedemstats"

#: bottom to top; a file may import its own layer (without a circle) and the layers below
LAYERS = (
    ("layout", "_validation", "_threads", "_ranges", "_grouping", "_linalg", "ledger", "datasets", "_io"),
    ("federation", "participation", "compression", "privacy"),
    ("models", "algorithms", "neural"),
    ("estimators", "flower", "diagnostics"),
    ("cli", "_cli_checks", "_demo", "__init__"),
)
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    """``fedemstats/models/gmm.py`` -> ``fedemstats.models.gmm`` (packages without ``__init__``)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_files() -> dict:
    """Module name -> path of every file of the package."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    """Layer of a module: its top-level name under ``fedemstats`` (the package itself is the top)."""
    parts = module.split(".")
    return LAYER_OF["__init__" if len(parts) == 1 else parts[1]]


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(module: str, source: str, known, is_package=False) -> set:
    """The package modules that ``module`` (whose file holds ``source``) imports anywhere."""
    targets = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # ``import fedemstats.models.gmm.X``-style prefixes
                name = name.rpartition(".")[0]
            if name.startswith("fedemstats") and name != module:
                targets.add(name)
    return targets


def import_graph() -> dict:
    """Module -> set of package modules it imports."""
    files = package_files()
    return {module: imports_of(module, path.read_text(encoding="utf-8"), files, path.name == "__init__.py")
            for module, path in files.items()}


def back_edges(graph) -> list:
    """``(importer, imported)`` pairs where the import runs to a higher layer."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def find_cycles(graph) -> list:
    """Each strongly connected component of more than one module, as one closed path through it."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:  # v is the root of a component: pop it off the stack
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_closed_path(graph, c) for c in components]


def _closed_path(graph, component) -> list:
    """A circle through the component, from its smallest name back to it (breadth-first)."""
    start = min(component)
    parents, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while parents[path[-1]] is not None:
                        path.append(parents[path[-1]])
                    return path[::-1] + [start]  # path runs from v back to start
                if w in component and w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


# ---------------------------------------------------------------------- the package
def test_every_file_has_a_layer():
    unknown = sorted(m for m in package_files() if m.split(".")[1:2] and m.split(".")[1] not in LAYER_OF)
    assert not unknown, f"files outside the layer table: {unknown}"


def test_no_import_runs_up_a_layer():
    edges = back_edges(import_graph())
    assert not edges, "imports that run to a higher layer:\n" + "\n".join(
        f"  {a} (layer {layer(a)}) -> {b} (layer {layer(b)})" for a, b in edges)


def test_no_import_circle():
    cycles = find_cycles(import_graph())
    assert not cycles, "import circles:\n" + "\n".join("  " + " -> ".join(c) for c in cycles)


# ---------------------------------------------------------------------- the checker itself
def test_the_checker_catches_a_back_edge_and_a_circle():
    graph = {"fedemstats.layout": {"fedemstats.models.gmm"},
             "fedemstats.models.gmm": {"fedemstats.models.gmm_init"},
             "fedemstats.models.gmm_init": {"fedemstats.models.base"},
             "fedemstats.models.base": {"fedemstats.models.gmm"}}
    assert back_edges(graph) == [("fedemstats.layout", "fedemstats.models.gmm")]
    assert find_cycles(graph) == [["fedemstats.models.base", "fedemstats.models.gmm",
                                   "fedemstats.models.gmm_init", "fedemstats.models.base"]]


@pytest.mark.parametrize("source, expected", [
    ("from ..models import gmm", {"fedemstats.models.gmm"}),
    ("from ..models import Model", {"fedemstats.models"}),
    ("def f():\n    from .gmm_params import GMMParams", {"fedemstats.models.gmm_params"}),
    ("import fedemstats.estimators.mixture", {"fedemstats.estimators.mixture"}),
    ("from . import _gmm_kernels as _k", {"fedemstats.models._gmm_kernels"}),
])
def test_imports_are_resolved_wherever_they_stand(source, expected):
    assert imports_of("fedemstats.models.probe", source, package_files()) == expected
