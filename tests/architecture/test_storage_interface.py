"""The broker programs against the storage interfaces, not the file backend.

``starquake.storage.ManagedLedger`` and ``ManagedCursor`` are protocols (their contract is in
``storage/api.py``); the file-backed classes implement every member of them, and no broker
module names the file-backed classes or imports their modules, so a second backend can take
their place.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from starquake import storage
from starquake.storage import api

SRC = Path(__file__).resolve().parents[2] / "src" / "starquake"
BACKEND_NAMES = {"FileManagedLedger", "ManagedCursorImpl"}
BACKEND_MODULES = {
    "starquake.storage.ledger",
    "starquake.storage.ledger_reads",
    "starquake.storage.ledger_trim",
    "starquake.storage.cursor",
}


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_exported_names_are_the_protocols() -> None:
    assert storage.ManagedLedger is api.ManagedLedger
    assert storage.ManagedCursor is api.ManagedCursor
    for protocol in (api.ManagedLedger, api.ManagedCursor):
        assert getattr(protocol, "_is_protocol", False), protocol


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [
        (api.ManagedLedger, storage.FileManagedLedger),
        (api.ManagedCursor, storage.ManagedCursorImpl),
    ],
    ids=["ledger", "cursor"],
)
def test_the_file_backend_implements_every_member(protocol: type, implementation: type) -> None:
    members = _members(protocol)
    assert members
    # attributes set in __init__ (name, durable) are not class members: the protocol's
    # properties for them are checked by the type checker where the broker uses them
    missing = {m for m in members if not hasattr(implementation, m)} - {"name", "durable"}
    assert missing == set()


def _broker_imports(path: Path) -> list[tuple[int, str, str]]:
    """``(line, module, imported name)`` of every ``from ... import`` of a broker module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "") for a in node.names]
    return found


def test_the_broker_names_no_file_backend_class() -> None:
    wrong = [
        f"{path.relative_to(SRC)}:{line} imports {module} {name}".rstrip()
        for path in sorted((SRC / "broker").rglob("*.py"))
        for line, module, name in _broker_imports(path)
        if module in BACKEND_MODULES or name in BACKEND_NAMES
    ]
    assert wrong == []
