"""The layers of python_engine: no two of its packages (or top-level modules) import each
other, directly or around a loop. Read from the sources with ast, nothing imported: every
import counts, at module level or inside a function, under TYPE_CHECKING or not, and so does
a module named by a string (importlib.import_module("python_engine.x.y")), because each one
is a dependency that a reader and a refactoring must respect."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from python_engine.project import PROJECT_ROOT

PACKAGE = "python_engine"
MODULE_STRING = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def unit_of(root: Path, module: str) -> str | None:
    """The package (or top-level module) of `root` that a dotted module name falls in: the first
    name below the root package; None outside it."""
    parts = module.split(".")
    if parts[0] != root.name or len(parts) < 2:
        return None
    return parts[1] if (root / parts[1]).is_dir() or (root / f"{parts[1]}.py").is_file() else None


def docstring_nodes(tree: ast.AST) -> set[int]:
    nodes = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                nodes.add(id(body[0].value))
    return nodes


def imported_modules(path: Path, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(dotted name, line) of everything `path` imports or names as a module string."""
    tree = ast.parse(path.read_text(), str(path))
    here = module.split(".") if is_package else module.split(".")[:-1]
    docs = docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
            found += [(base, node.lineno)] + [(f"{base}.{a.name}", node.lineno) for a in node.names]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
              and MODULE_STRING.fullmatch(node.value)):
            found.append((node.value, node.lineno))
    return found


def import_graph(root: Path) -> dict[str, dict[str, list[str]]]:
    """unit -> {unit it imports: ["file:line", ...]} over the packages and top-level modules of
    the package folder `root`."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        is_package = rel.name == "__init__.py"
        module = ".".join([root.name, *rel.with_suffix("").parts[:-1 if is_package else None]])
        source = unit_of(root, module)
        if source is None:
            continue
        for name, line in imported_modules(path, module, is_package):
            target = unit_of(root, name)
            if target is not None and target != source:
                places = graph.setdefault(source, {}).setdefault(target, [])
                place = f"{path.relative_to(root.parent)}:{line}"
                if place not in places:
                    places.append(place)
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Each group of units that reach one another (Tarjan's strongly connected components of
    more than one unit), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(set(graph) | {w for targets in graph.values() for w in targets}):
        if v not in index:
            visit(v)
    return sorted(groups)


def describe(graph: dict[str, dict[str, list[str]]], group: list[str]) -> str:
    return "; ".join(f"{a} -> {b} ({', '.join(graph[a][b][:3])})"
                     for a in group for b in group if b in graph.get(a, {}))


def test_python_engine_packages_import_one_another_in_one_direction():
    graph = import_graph(PROJECT_ROOT / PACKAGE)
    assert "native" in graph and "decode" in graph, "the graph must see the engine's packages"
    found = cycles(graph)
    assert found == [], "import cycles among python_engine's packages: " + " | ".join(
        describe(graph, group) for group in found)


def write_package(root: Path, imports: dict[str, list[str]], style: dict[str, str]) -> None:
    """A package `root` of one-module subpackages; unit u's module imports each unit in
    imports[u] in the way style[u] says."""
    root.mkdir()
    (root / "__init__.py").write_text("")
    for unit, targets in imports.items():
        (root / unit).mkdir()
        named = ", ".join(f"{root.name}.{u}.mod" for u in imports)  # a docstring names every unit: no import
        (root / unit / "__init__.py").write_text(f'"""a unit, beside {named}."""\n')
        lines = ['"""a module."""', "import importlib", "from typing import TYPE_CHECKING"]
        for t in targets:
            lines += {
                "top": [f"from {root.name}.{t}.mod import thing"],
                "relative": [f"from ..{t} import mod"],
                "lazy": ["def f():", f"    import {root.name}.{t}.mod"],
                "typing": ["if TYPE_CHECKING:", f"    from {root.name}.{t} import mod"],
                "string": [f"MOD = importlib.import_module({root.name + '.' + t + '.mod'!r})"],
            }[style[unit]]
        (root / unit / "mod.py").write_text("\n".join(lines) + "\n")


def test_the_cycle_finder_finds_every_loop_it_is_given(tmp_path, rng):
    """Random layered packages (each imports only lower ones: no cycle), then one import from
    a lower unit back to a higher one it reaches: exactly the units on that loop form a cycle,
    whatever form the imports take."""
    units = [f"u{i}" for i in range(int(rng.integers(4, 9)))]
    imports = {u: [v for v in units[:i] if rng.random() < 0.5] for i, u in enumerate(units)}
    imports[units[-1]] = imports[units[-1]] or [units[0]]
    styles = ["top", "relative", "lazy", "typing", "string"]
    style = {u: styles[int(rng.integers(len(styles)))] for u in units}
    write_package(tmp_path / "layered", imports, style)
    graph = import_graph(tmp_path / "layered")
    assert {u: sorted(graph.get(u, {})) for u in units} == {u: sorted(t) for u, t in imports.items()}
    assert cycles(graph) == []

    high = units[-1]
    reach, todo = set(), list(imports[high])
    while todo:
        v = todo.pop()
        if v not in reach:
            reach.add(v)
            todo += imports[v]
    low = sorted(reach)[int(rng.integers(len(reach)))]
    back = {u: list(t) for u, t in imports.items()}
    back[low].append(high)
    write_package(tmp_path / "looped", back, style)
    # the loop: every unit on a path high -> ... -> low, plus high
    on_loop = {u for u in units if u == high or (u in reach and _reaches(imports, u, low))}
    assert cycles(import_graph(tmp_path / "looped")) == [sorted(on_loop)]


def _reaches(imports: dict[str, list[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        if v not in seen:
            seen.add(v)
            todo += imports[v]
    return False
