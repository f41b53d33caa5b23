"""The admin package's shape: the list of endpoints in the docs is the route table's, and the
modules and functions of ``broker/admin`` stay small."""

from __future__ import annotations

import ast
from pathlib import Path

from starquake.broker.admin import ROUTES
from starquake.broker.admin.endpoint_list import render

ROOT = Path(__file__).resolve().parents[2]
ADMIN = ROOT / "src" / "starquake" / "broker" / "admin"
DOC = ROOT / "docs" / "admin-endpoints.md"


def test_the_list_of_endpoints_in_the_docs_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), "run scripts/gen-endpoints"


def test_the_list_names_every_route() -> None:
    text = DOC.read_text(encoding="utf-8")
    for route in ROUTES:
        assert f"| {route.method} | `{route.template}` |" in text, route.name


def test_admin_modules_and_functions_are_small() -> None:
    too_long = []
    for path in sorted(ADMIN.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > 500:
            too_long.append(f"{path.name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    too_long.append(f"{path.name}: {node.name} {length} lines")
    assert not too_long, too_long
