"""The layering of the packages, checked by reading every module's imports and attribute uses.

``common`` is the leaf; ``protocol`` is sans-IO; ``storage`` knows nothing of networking; the
broker builds on protocol and storage; the client never sees the broker or storage; only the
connection and server modules touch asyncio transports; selectors never ``await``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "starquake"
STDLIB = set(sys.stdlib_module_names)
ROOT = "__init__"
"""The package root (``starquake/__init__.py``): the version and the choice of build, importable
by everyone."""

# package or top-level module -> (starquake packages / top-level modules it may import,
# third-party top-level modules it may import)
RULES: dict[str, tuple[set[str], set[str]]] = {
    # top-level modules
    ROOT: ({"_native"}, set()),
    # which build runs: the compiled hot-path modules or their sources (chosen at import)
    "_native": (set(), set()),
    # the pytest plugin gives each test a real embedded broker
    "pytest_plugin": ({"broker"}, {"pytest"}),
    # packages
    "common": (set(), {"mmh3"}),
    "protocol": ({"common"}, {"google", "crc32c", "lz4", "zstandard", "cramjam"}),
    # crc32c checksums the records of the ledger files (the CPU's CRC32C instruction)
    "storage": ({"common"}, {"crc32c"}),
    # cluster mode: bundles, local JetStream nodes, the metadata store on JetStream (nats-py)
    "cluster": ({"common", "storage"}, {"nats"}),
    # aiohttp serves the web port (broker/web.py) and its endpoints (broker/admin/);
    # prometheus_client renders /metrics (broker/admin/metrics.py); avro parses schema
    # definitions and checks their compatibility, google.protobuf builds protobuf-native
    # descriptors (broker/schemas/); jwt, cryptography and passlib check tokens and passwords
    # (broker/security/); cluster keeps the configuration metadata brokers share
    # (configurationMetadataStoreUrl); client carries a coordinator's END_TXN_ON_PARTITION /
    # END_TXN_ON_SUBSCRIPTION to the broker of a topic (as Pulsar's broker uses its client)
    "broker": (
        {"common", "protocol", "storage", "cluster", "client", "_native"},
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
    "spark": ({"common", "client"}, {"pyspark", "pyarrow", "numpy"}),
    # the admin REST client: the standard library only, so that the command line starts fast
    "admin": ({"common", "protocol", "client"}, set()),
    # click parses the command line, rich draws tables, hdrh measures latencies (perf); jwt and
    # cryptography make keys and tokens (tokens, imported by its commands only); cluster runs
    # the JetStream nodes of ``starquake cluster start``
    "cli": (
        {"common", "client", "admin", "broker", "cluster"},
        {"uvloop", "click", "rich", "hdrh", "jwt", "cryptography"},
    ),
}

# Modules that must not import asyncio or sockets (sans-IO).
NO_IO = {"protocol"}

# The modules that may touch asyncio transports (paths relative to src/starquake).
TRANSPORT_MODULES = {
    "broker/connection.py",
    "broker/server.py",
    # the accept loop of the server's ports
    "broker/listener.py",
    # the protocol of a web connection in front of aiohttp's (refusals before aiohttp)
    "broker/web_door.py",
    # the TLS layer of the server's connections: SSL contexts, the peer's certificate
    "broker/security/tls.py",
    "client/wire/_connection.py",
}
# Parts of ServerCnx that still reach for the transport themselves; each should ask the
# connection instead. Remove an entry once its module is clean.
TRANSPORT_PENDING: set[str] = set()
_TRANSPORT_ATTRIBUTES = {
    "transport",
    "_transport",
    "get_extra_info",
    "get_write_buffer_size",
    "set_write_buffer_limits",
    "pause_reading",
    "resume_reading",
}
_TRANSPORT_TYPES = {"BaseTransport", "Transport", "ReadTransport", "WriteTransport"}


def module_name(rel: Path) -> str:
    """The dotted name of the module at ``rel`` (relative to ``src/starquake``)."""
    parts = ("starquake", *rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(importer: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name that ``from <level dots><module> import ...`` means in ``importer``.

    ``is_package``: the importer is a package's ``__init__`` (its dots count from itself).
    """
    if level == 0:
        if module is None:
            raise ValueError("an absolute import names its module")
        return module
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level - 1 >= len(base):
        raise ValueError(f"{'.' * level}{module or ''} goes above the top of {importer}")
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join([*base, module] if module else base)


def _imports(rel: Path, source: str) -> list[tuple[str, int, bool]]:
    """(absolute module, line, at module level) for every import in ``source`` (module ``rel``).

    ``from <package> import name`` also yields ``<package>.name`` when that is a module of
    ours, so that ``from . import ledger`` counts as an import of the ledger module.
    """
    tree = ast.parse(source, str(rel))
    importer = module_name(rel)
    is_package = rel.name == "__init__.py"
    found: list[tuple[str, int, bool]] = []
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        top = id(node) in top_level
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = resolve(importer, is_package, node.module, node.level)
            found.append((module, node.lineno, top))
            for alias in node.names:
                if _is_our_module(f"{module}.{alias.name}"):
                    found.append((f"{module}.{alias.name}", node.lineno, top))
    return found


def _is_our_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "starquake":
        return False
    path = SRC.parent.joinpath(*parts)
    return path.is_dir() or path.with_suffix(".py").is_file()


def _modules() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "_generated" not in p.parts]


def _owner(rel: Path) -> str:
    """The package (or top-level module) that the rules of ``rel`` come from."""
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _target(module: str) -> str:
    """The package or top-level module of ours that ``module`` (``starquake...``) is in."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def import_violations(rel: Path, source: str) -> list[str]:
    """What breaks the rules among the imports of ``source`` (the module at ``rel``)."""
    package = _owner(rel)
    if package not in RULES:
        return [f"{rel}: no dependency rule for {package}"]
    allowed_internal, allowed_external = RULES[package]
    problems: list[str] = []
    for module, line, top in _imports(rel, source):
        root = module.split(".")[0]
        where = f"{rel}:{line} imports {module}"
        if root == "starquake":
            target = _target(module)
            if target in (package, ROOT):
                continue
            if package == "cli" and target == "broker":
                if top and rel.name != "standalone.py":
                    problems.append(f"{where}: cli imports broker only inside standalone, lazily")
            elif target not in allowed_internal:
                problems.append(f"{where}: {package} may not depend on {target}")
        elif root in STDLIB or root == "__future__":
            if package in NO_IO and root in {"asyncio", "socket", "selectors", "time"}:
                problems.append(f"{where}: {package} is sans-IO")
        elif root == "mypy_extensions" and line in _type_checking_lines(source):
            continue  # native integer types for mypyc: read by the compiler, never imported
        elif root not in allowed_external:
            problems.append(f"{where}: {package} may not use {root}")
    return problems


def _type_checking_lines(source: str) -> set[int]:
    """The lines of the imports made under ``if TYPE_CHECKING:`` (never at run time)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, ast.Import | ast.ImportFrom):
                        lines.add(sub.lineno)
    return lines


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_rules(path: Path) -> None:
    problems = import_violations(path.relative_to(SRC), path.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def transport_uses(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for every place in ``source`` that reaches for an asyncio transport."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if node.attr in _TRANSPORT_ATTRIBUTES:
                yield node.lineno, f".{node.attr}"
            elif node.attr in _TRANSPORT_TYPES:
                yield node.lineno, node.attr
        elif isinstance(node, ast.alias) and node.name in _TRANSPORT_TYPES:
            yield node.lineno, node.name
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr", "setattr"}
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in _TRANSPORT_ATTRIBUTES
        ):
            yield node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_only_connection_and_server_modules_touch_transports(path: Path) -> None:
    rel = path.relative_to(SRC).as_posix()
    if rel in TRANSPORT_MODULES or rel in TRANSPORT_PENDING:
        return
    uses = [f"{rel}:{line}: {what}" for line, what in transport_uses(path.read_text("utf-8"))]
    assert not uses, "only the connection and server modules touch transports:\n" + "\n".join(uses)


def test_the_allowed_transport_modules_exist() -> None:
    for rel in TRANSPORT_MODULES | TRANSPORT_PENDING:
        assert (SRC / rel).is_file(), rel


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if p.relative_to(SRC).parts[:2] == ("broker", "selectors")],
    ids=lambda p: p.name,
)
def test_selectors_never_await(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    asynchronous = (ast.Await, ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith)
    lines = [node.lineno for node in ast.walk(tree) if isinstance(node, asynchronous)]
    assert not lines, f"{path.name}: selectors are synchronous, yet lines {lines} are not"


def test_rules_cover_every_package_and_top_level_module() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("_")}
    modules = {p.stem for p in SRC.glob("*.py")}
    assert packages - {"__pycache__"} | modules <= set(RULES)


@pytest.mark.parametrize(
    ("importer", "is_package", "module", "level", "expected"),
    [
        ("starquake.storage.ledger", False, None, 0, None),
        ("starquake.storage.ledger", False, "cursor", 1, "starquake.storage.cursor"),
        ("starquake.storage.ledger", False, None, 1, "starquake.storage"),
        ("starquake.storage", True, "ledger", 1, "starquake.storage.ledger"),
        ("starquake.storage", True, None, 2, "starquake"),
        ("starquake.storage.ledger", False, "common.clock", 2, "starquake.common.clock"),
        ("starquake.broker.admin.topics", False, "topic", 2, "starquake.broker.topic"),
        ("starquake.broker.admin.topics", False, "protocol", 3, "starquake.protocol"),
        ("starquake.storage.ledger", False, "os", 0, "os"),
    ],
)
def test_resolve_relative_imports(
    importer: str, is_package: bool, module: str | None, level: int, expected: str | None
) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            resolve(importer, is_package, module, level)
    else:
        assert resolve(importer, is_package, module, level) == expected


def test_resolve_refuses_to_climb_above_the_top() -> None:
    with pytest.raises(ValueError):
        resolve("starquake.storage.ledger", False, "x", 4)


def test_relative_imports_are_checked() -> None:
    """A relative import that crosses a rule is reported like an absolute one would be."""
    source = "from ..broker import topic\nfrom . import ledger\nfrom .cursor import Cursor\n"
    rel = Path("storage/probe.py")
    found = {module for module, _, _ in _imports(rel, source)}
    assert found == {
        "starquake.broker",
        "starquake.broker.topic",
        "starquake.storage",
        "starquake.storage.ledger",
        "starquake.storage.cursor",
    }
    assert import_violations(rel, source) == [
        "storage/probe.py:1 imports starquake.broker: storage may not depend on broker",
        "storage/probe.py:1 imports starquake.broker.topic: storage may not depend on broker",
    ]


def test_top_level_modules_are_checked() -> None:
    assert import_violations(Path("__init__.py"), "from starquake.client import Client\n") == [
        "__init__.py:1 imports starquake.client: __init__ may not depend on client"
    ]
    assert import_violations(Path("pytest_plugin.py"), "from starquake import __version__\n") == []


def test_transport_uses_are_found() -> None:
    source = (
        "import asyncio\n"
        "from asyncio import Transport\n"
        "def f(cnx, t: asyncio.BaseTransport):\n"
        "    getattr(cnx, 'transport', None)\n"
        "    cnx.transport.get_write_buffer_size()\n"
        "    return cnx.is_open\n"
    )
    assert sorted(transport_uses(source)) == [
        (2, "Transport"),
        (3, "BaseTransport"),
        (4, "getattr(..., 'transport')"),
        (5, ".get_write_buffer_size"),
        (5, ".transport"),
    ]
