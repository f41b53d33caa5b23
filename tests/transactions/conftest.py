"""A broker with transactions on, shared by the tests of a module, and helpers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from starquake import client as pulsar
from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = Path(tmp_path_factory.mktemp("txn")) / "data"
    with EmbeddedBroker(data, transactionCoordinatorEnabled=True) as running:
        yield running


@pytest.fixture
def txn_client(txn_broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    client = pulsar.Client(
        txn_broker.service_url, enable_transaction=True, operation_timeout_seconds=10
    )
    try:
        yield client
    finally:
        client.close()


def new_topic() -> str:
    return f"persistent://public/default/txn-{uuid.uuid4().hex[:12]}"


def received(consumer: pulsar.Consumer, wait_ms: int = 300) -> list[bytes]:
    """Every message the consumer gets until none comes for ``wait_ms`` (acknowledged)."""
    got = []
    while True:
        try:
            msg = consumer.receive(wait_ms)
        except pulsar.Timeout:
            return got
        consumer.acknowledge(msg)
        got.append(msg.data())
