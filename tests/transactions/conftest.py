"""A broker with transactions on, shared by the tests of a module, and helpers."""

from __future__ import annotations

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
