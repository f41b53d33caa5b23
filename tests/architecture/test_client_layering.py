"""The layers of the client: each part of ``starquake.client`` imports only the parts below it.

A *part* is a subpackage of the client (``base``, ``wire``, ``consumer``...) or one of its
public modules (``asyncio``, ``exceptions``...); ``__init__`` is the blocking API's front door.
Every import counts, those under ``if TYPE_CHECKING:`` and in functions included: the parts
form no circle even for the type checker, and the modules inside a part neither (see
``test_import_cycles``). Two parts of one layer do not import each other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_import_cycles import PACKAGE, cycles, package_graph

CLIENT = "starquake.client"
INIT = "__init__"

LAYERS: list[set[str]] = [
    # enums, message ids, settings, argument checks, authentication, the client's logger;
    # schemas and topic names stand alone
    {"base", "schema", "topics"},
    {"exceptions"},
    # end-to-end encryption; connections, the pool and lookups, failover
    {"crypto", "wire"},
    # ClientCore, the reconnecting handler base, the receiver queue, chunks, partition watching
    {"core"},
    {"producer"},
    # consumers build on producers: dead letter and retry letter topics are produced to
    {"consumer"},
    # the arguments of the public API, the asyncio handles
    {"api"},
    {"asyncio"},
    # the blocking API runs the asyncio core; bulk readers ride on an asyncio client
    {"sync", "bulk"},
    {INIT},
]
"""The parts of the client, lowest first: a part may import itself and the layers below it."""


def part_of(module: str) -> str:
    """The part of the client that ``module`` (``starquake.client...``) belongs to."""
    rest = module.removeprefix(CLIENT).lstrip(".")
    return rest.split(".")[0] if rest else INIT


def layer_of(part: str) -> int:
    return next(i for i, parts in enumerate(LAYERS) if part in parts)


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a part from its own layer or one above."""
    found = []
    for module, targets in sorted(graph.items()):
        part = part_of(module)
        for target in sorted(targets):
            other = part_of(target)
            if other != part and layer_of(other) >= layer_of(part):
                found.append(f"{module} ({part}) -> {target} ({other})")
    return found


def test_every_part_of_the_client_has_a_layer() -> None:
    client_dir = Path(PACKAGE) / "client"
    parts = {p.stem for p in client_dir.glob("*.py")} | {
        p.name for p in client_dir.iterdir() if (p / "__init__.py").is_file()
    }
    assert parts == set().union(*LAYERS)


def test_parts_import_only_the_layers_below() -> None:
    graph = package_graph(CLIENT, type_checking=True)
    assert layering_violations(graph) == []


def test_no_circle_among_the_parts() -> None:
    graph = package_graph(CLIENT, type_checking=True)
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        parts.setdefault(part_of(module), set()).update(part_of(t) for t in targets)
    assert cycles({part: targets - {part} for part, targets in parts.items()}) == []


@pytest.mark.parametrize(
    ("importer", "imported", "allowed"),
    [
        ("starquake.client.sync._client", "starquake.client.asyncio", True),
        ("starquake.client.asyncio", "starquake.client.sync._client", False),
        ("starquake.client.consumer._dlq", "starquake.client.producer._producer", True),
        ("starquake.client.producer._producer", "starquake.client.consumer._consumer", False),
        ("starquake.client.wire._pool", "starquake.client.crypto._crypto", False),
        ("starquake.client", "starquake.client.sync._client", True),
        ("starquake.client.base._config", "starquake.client.base._auth", True),
    ],
)
def test_the_check_sees_an_upward_import(importer: str, imported: str, allowed: bool) -> None:
    assert (layering_violations({importer: {imported}}) == []) is allowed
