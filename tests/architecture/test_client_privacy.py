"""Privacy inside the client: a ``_name`` belongs to the module that defines it.

Every ``x._name`` in ``src/starquake/client/`` (``x`` not ``self``/``cls``) must name a private
attribute, method or class member defined in the same module: the blocking client, the schema
helpers and the message types talk to each other through public names only. Private names of
*other modules* are private too: ``module._name`` and ``from module import _name`` are refused
for every module (a private *module* such as ``starquake.client.consumer._multi`` is fine; its
public names are the internal interface of the package).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "src" / "starquake" / "client"
OWNERS = {"self", "cls"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Private names the module defines: ``self._x = ...``, class members, ``__slots__``, defs."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in OWNERS:
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if isinstance(target, ast.Name):
                names.add(target.id)
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets
            ):
                names.update(
                    elt.value
                    for elt in ast.walk(stmt.value)
                    if isinstance(elt, ast.Constant) and isinstance(elt.value, str)
                )
    return {name for name in names if _is_private(name)}


def _is_module(package: str | None, name: str) -> bool:
    """Whether ``from package import name`` imports a starquake module (by the source layout)."""
    candidate = CLIENT.parents[1].joinpath(*(package or "").split("."), name)
    return candidate.with_suffix(".py").exists() or candidate.is_dir()


def _imported_modules(tree: ast.Module) -> set[str]:
    """Local names bound to modules by ``import x``, ``import x as y`` or ``from p import mod``."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            bound.update(
                alias.asname or alias.name
                for alias in node.names
                if _is_module(node.module, alias.name)
            )
    return bound


def violations(path: Path) -> list[str]:
    """Every cross-object or cross-module private access in ``path``, as ``line: text``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    defined = _defined_private_names(tree)
    modules = _imported_modules(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.extend(
                f"{node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names
                if _is_private(alias.name) and not _is_module(node.module, alias.name)
            )
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in OWNERS:
            continue
        text = f"{node.lineno}: {ast.unparse(node)}"
        if isinstance(owner, ast.Name) and owner.id in modules:
            found.append(text)  # a private name of another module
        elif node.attr not in defined:
            found.append(text)
    return found


def _client_modules() -> list[Path]:
    return sorted(CLIENT.rglob("*.py"))


@pytest.mark.parametrize("path", _client_modules(), ids=lambda p: str(p.relative_to(CLIENT)))
def test_private_names_stay_in_their_module(path: Path) -> None:
    assert violations(path) == []


def test_the_check_sees_a_cross_object_access(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "from starquake.client.consumer import _multi\n"
        "from starquake.client.sync._loop import _Hidden\n"
        "class A:\n"
        "    def __init__(self) -> None:\n"
        "        self._mine = 1\n"
        "    def read(self, other: A, peer: object) -> object:\n"
        "        return other._mine, peer._theirs, _multi._private, _multi.Public\n",
        encoding="utf-8",
    )
    assert violations(module) == [
        "2: from starquake.client.sync._loop import _Hidden",
        "7: peer._theirs",
        "7: _multi._private",
    ]
