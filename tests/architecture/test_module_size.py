"""Small modules and functions: no module over 500 lines, no function over 60 lines.

Checked for every module under ``src`` (``starquake`` and ``pyspark_pulsar``) except generated
code (the packages of :data:`GENERATED`, paths relative to ``src``). A function's length runs
from its ``def`` (decorators excluded) to its last line, docstring and comments included; a
nested function counts within its enclosing one too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
GENERATED = ["starquake/protocol/_generated"]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(qualified name, lines)`` of every function of ``source`` longer than ``limit``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}."
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert child.end_lineno is not None
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found.append((name[:-1], lines))
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def _limited_modules() -> list[Path]:
    excluded = [SRC / package for package in GENERATED]
    return [
        path
        for path in sorted(SRC.rglob("*.py"))
        if not any(path.is_relative_to(package) for package in excluded)
    ]


SIZE_LIMITED_MODULES = _limited_modules()


def _rel(path: Path) -> str:
    return str(path.relative_to(SRC))


@pytest.mark.parametrize("path", SIZE_LIMITED_MODULES, ids=_rel)
def test_modules_are_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_rel(path)} has {lines} lines"


@pytest.mark.parametrize("path", SIZE_LIMITED_MODULES, ids=_rel)
def test_functions_are_short(path: Path) -> None:
    assert long_functions(path.read_text(encoding="utf-8")) == [], _rel(path)


def test_the_check_sees_a_long_method() -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(60))
    source = f"class C:\n    def short(self):\n        pass\n\n    def long(self):\n{body}"
    assert long_functions(source) == [("C.long", 61)]
    assert long_functions(source, limit=61) == []


def test_every_package_is_checked_but_generated_code() -> None:
    checked = {path.parent for path in SIZE_LIMITED_MODULES}
    assert SRC / "pyspark_pulsar" in checked
    assert SRC / "starquake" / "storage" in checked
    assert not any("_generated" in path.parts for path in SIZE_LIMITED_MODULES)
