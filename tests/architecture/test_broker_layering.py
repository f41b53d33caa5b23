"""The broker's modules form no import circle, counting imports made only for type checking.

An import under ``if TYPE_CHECKING:`` never runs, but the two modules still know each other: a
change to one ripples into the other. So every ``import`` and ``from ... import`` in
``src/starquake/broker/`` counts here, wherever it stands (module level, in a function, under
``TYPE_CHECKING``). Parts that need the broker name a narrow Protocol
(:mod:`starquake.broker.contexts` and its siblings), and only the modules that assemble or serve
connections import ``service.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from test_import_cycles import cycles

SRC = Path(__file__).resolve().parents[2] / "src"
BROKER = SRC / "starquake" / "broker"

# The modules that may import starquake.broker.service: the server and the embedded broker
# build the service; connections (their handshake included) and the admin endpoints serve
# requests with it. Everything below them takes a context Protocol.
SERVICE_USERS = {
    "starquake.broker.server",
    "starquake.broker.embedded",
    "starquake.broker.connection",
    "starquake.broker.cnx_base",
    "starquake.broker.security.cnx_auth",
}
SERVICE_USER_PACKAGES = ("starquake.broker.admin",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imported_modules(module: str, is_package: bool, source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (the module ``module``) imports, counting every
    import statement, those under ``if TYPE_CHECKING:`` and in functions included.

    ``from package import name`` imports ``package.name`` when that is a known module, else
    ``package``.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return {name for name in found if name in known and name != module}


def broker_graph() -> dict[str, set[str]]:
    """Each broker module -> the broker modules it imports (type-only imports included)."""
    paths = {_module_name(path): path for path in BROKER.rglob("*.py")}
    known = set(paths)
    return {
        name: imported_modules(name, path.name == "__init__.py", path.read_text("utf-8"), known)
        for name, path in paths.items()
    }


def _describe(graph: dict[str, set[str]], circle: Iterable[str]) -> str:
    members = set(circle)
    lines = [f"  {name} -> {', '.join(sorted(graph[name] & members))}" for name in sorted(members)]
    return f"{len(members)} modules:\n" + "\n".join(lines)


def test_no_import_circle_in_the_broker() -> None:
    graph = broker_graph()
    found = cycles(graph)
    assert not found, "import circles in broker/ (type-only imports count):\n" + "\n".join(
        _describe(graph, circle) for circle in found
    )


def test_only_the_assembling_and_serving_modules_import_the_service() -> None:
    graph = broker_graph()
    users = {name for name, targets in graph.items() if "starquake.broker.service" in targets}
    unexpected = {
        name for name in users - SERVICE_USERS if not name.startswith(SERVICE_USER_PACKAGES)
    }
    assert not unexpected, (
        f"{sorted(unexpected)} import service.py: take a context Protocol "
        "(starquake.broker.contexts) instead"
    )
    assert set(graph) >= SERVICE_USERS, sorted(SERVICE_USERS - set(graph))


def test_type_only_imports_count() -> None:
    known = {"p.a", "p.b", "p.c"}
    source_a = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import B\n"
    source_b = "def f():\n    from . import c\n"
    source_c = "import p.a\n"
    graph = {
        "p.a": imported_modules("p.a", False, source_a, known),
        "p.b": imported_modules("p.b", False, source_b, known),
        "p.c": imported_modules("p.c", False, source_c, known),
    }
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}
    assert cycles(graph) == [{"p.a", "p.b", "p.c"}]


def test_a_circle_through_a_package_init_is_seen() -> None:
    known = {"p", "p.a"}
    graph = {
        "p": imported_modules("p", True, "from .a import x\n", known),
        "p.a": imported_modules("p.a", False, "from p import helper\n", known),
    }
    assert cycles(graph) == [{"p", "p.a"}]
    assert cycles({"p": {"p.a"}, "p.a": set()}) == []
