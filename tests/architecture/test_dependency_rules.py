"""The dependency rules of ARCHITECTURE.md, checked by reading every module's imports."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "starquake"
STDLIB = set(sys.stdlib_module_names)

# package -> (starquake packages it may import, third-party top-level modules it may import)
RULES: dict[str, tuple[set[str], set[str]]] = {
    "common": (set(), {"mmh3"}),
    "protocol": ({"common"}, {"google", "crc32c", "lz4", "zstandard", "cramjam"}),
    "storage": ({"common"}, set()),
    # aiohttp serves the web port (broker/web.py) and its endpoints (broker/admin/);
    # prometheus_client renders /metrics (broker/admin/metrics.py); avro parses schema
    # definitions and checks their compatibility, google.protobuf builds protobuf-native
    # descriptors (broker/schemas/); jwt, cryptography and passlib check tokens and passwords
    # (broker/security/)
    "broker": (
        {"common", "protocol", "storage"},
        {
            "uvloop",
            "aiohttp",
            "prometheus_client",
            "avro",
            "google",
            "jwt",
            "cryptography",
            "passlib",
        },
    ),
    # fastavro encodes and decodes Avro and JSON records, google.protobuf protobuf-native ones
    # (client/schema/)
    "client": ({"common", "protocol"}, {"fastavro", "google", "cryptography"}),
    "spark": ({"common", "client"}, {"pyspark", "pyarrow"}),
    # the admin REST client: the standard library only, so that the command line starts fast
    "admin": ({"common", "protocol", "client"}, set()),
    # click parses the command line, rich draws tables, hdrh measures latencies (perf); jwt and
    # cryptography make keys and tokens (tokens, imported by its commands only)
    "cli": (
        {"common", "client", "admin", "broker"},
        {"uvloop", "click", "rich", "hdrh", "jwt", "cryptography"},
    ),
}

# Modules that must not import asyncio or sockets (sans-IO).
NO_IO = {"protocol"}


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, at module level) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[str, int, bool]] = []
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, id(node) in top_level) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno, id(node) in top_level))
    return found


def _modules() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "_generated" not in p.parts]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_rules(path: Path) -> None:
    rel = path.relative_to(SRC)
    package = rel.parts[0] if len(rel.parts) > 1 else ""
    if package not in RULES:
        return
    allowed_internal, allowed_external = RULES[package]
    for module, line, top in _imports(path):
        root = module.split(".")[0]
        where = f"{rel}:{line} imports {module}"
        if root == "starquake":
            parts = module.split(".")
            if len(parts) < 2 or parts[1] == package:
                continue
            target = parts[1]
            if package == "cli" and target == "broker":
                assert not top or rel.name == "standalone.py", (
                    f"{where}: cli imports broker only inside standalone, lazily"
                )
                continue
            assert target in allowed_internal, f"{where}: {package} may not depend on {target}"
        elif root in STDLIB or root == "__future__":
            if package in NO_IO:
                assert root not in {"asyncio", "socket", "selectors", "time"}, (
                    f"{where}: {package} is sans-IO"
                )
        else:
            assert root in allowed_external, f"{where}: {package} may not use {root}"


def test_rules_cover_every_package() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert packages <= set(RULES) | {"__pycache__"}
