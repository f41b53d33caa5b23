"""No import cycles between starquake modules, counting imports made inside functions.

A function-level import only hides a cycle: the two modules still need each other. Every
``import`` and ``from ... import`` of every module counts (absolute and relative, at module
level or in a function), except those under ``if TYPE_CHECKING:``, which never run. ``from
package import name`` depends on ``package.name`` when that is a module, else on ``package``.

Inside the packages of :data:`NO_TYPE_CHECKING_CYCLES` the imports under ``if TYPE_CHECKING:``
count too: a cycle that only the type checker sees still ties the modules together (none of
them can be understood, tested or replaced alone).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "starquake"

NO_TYPE_CHECKING_CYCLES = ["starquake.storage", "starquake.client"]
"""Packages whose modules form no cycle even counting the imports made for the type checker."""


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: Path) -> dict[str, Path]:
    src = package.parent
    return {
        _module_name(path, src): path
        for path in package.rglob("*.py")
        if "_generated" not in path.parts
    }


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the import nodes under ``if TYPE_CHECKING:``."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                hidden.update(id(inner) for inner in ast.walk(stmt))
    return hidden


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def import_graph(package: Path = PACKAGE, *, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (with ``type_checking``, counting those
    imported under ``if TYPE_CHECKING:`` too)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        hidden = set() if type_checking else _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, path, node)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.append(submodule if submodule in modules else source)
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    assert [sorted(c) for c in cycles(import_graph())] == []


def package_graph(
    package: str, root: Path = PACKAGE, *, type_checking: bool
) -> dict[str, set[str]]:
    """The import graph restricted to ``package`` (dotted) and its modules."""
    graph = import_graph(root, type_checking=type_checking)
    inside = {m for m in graph if _within(m, package)}
    return {m: {t for t in graph[m] if t in inside} for m in inside}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("package", NO_TYPE_CHECKING_CYCLES)
def test_no_import_cycles_even_for_the_type_checker(package: str) -> None:
    assert [sorted(c) for c in cycles(package_graph(package, type_checking=True))] == []


def test_the_check_sees_a_cycle_closed_for_the_type_checker(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "a.py").write_text("from .b import B\n")
    (root / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    )
    (root / "c.py").write_text("from .sub import a\n")
    assert cycles(package_graph("pkg.sub", root, type_checking=False)) == []
    assert cycles(package_graph("pkg.sub", root, type_checking=True)) == [
        frozenset({"pkg.sub.a", "pkg.sub.b"})
    ]


def test_the_check_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
