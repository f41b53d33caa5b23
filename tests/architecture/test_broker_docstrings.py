"""Every public class, function and method of the broker says in a docstring what it is for."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "starquake"
BROKER = SRC / "broker"

_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _is_accessor(node: _Definition) -> bool:
    """A property's setter or deleter, or an ``@overload``: the main definition documents it."""
    for decorator in getattr(node, "decorator_list", []):
        if isinstance(decorator, ast.Attribute) and decorator.attr in {"setter", "deleter"}:
            return True
        if isinstance(decorator, ast.Name) and decorator.id == "overload":
            return True
    return False


def undocumented(source: str) -> Iterator[tuple[int, str]]:
    """(line, qualified name) of each public definition in ``source`` without a docstring.

    Public: a module-level class or function, or a method of a public class, whose name does
    not start with an underscore. Functions nested in functions are private to them.
    """

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[int, str]]:
        for node in body:
            if not isinstance(node, _Definition) or node.name.startswith("_"):
                continue
            name = f"{prefix}{node.name}"
            if ast.get_docstring(node) is None and not _is_accessor(node):
                yield node.lineno, name
            if isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{name}.")

    yield from walk(ast.parse(source).body, "")


def test_undocumented_finds_public_definitions_only() -> None:
    source = (
        "class A:\n"
        "    def f(self): pass\n"
        "    def _g(self): pass\n"
        "    @property\n"
        "    def p(self):\n"
        "        '''P.'''\n"
        "    @p.setter\n"
        "    def p(self, v): pass\n"
        "class _B:\n"
        "    def h(self): pass\n"
        "def k():\n"
        "    '''K.'''\n"
        "    def inner(): pass\n"
        "async def m(): pass\n"
    )
    assert list(undocumented(source)) == [(1, "A"), (2, "A.f"), (14, "m")]


def test_public_broker_definitions_have_docstrings() -> None:
    missing = [
        f"{rel}:{line} {name}"
        for path in sorted(BROKER.rglob("*.py"))
        for rel in [path.relative_to(SRC).as_posix()]
        for line, name in undocumented(path.read_text(encoding="utf-8"))
    ]
    assert not missing, f"{len(missing)} public definitions without a docstring:\n" + "\n".join(
        missing
    )
