"""Regression tests, each through a real broker process, for defects that lost or skipped data."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from broker_process import BrokerProcess, process_client

TOPIC = "persistent://public/default/defects"
EARLIEST = pulsar.InitialPosition.Earliest


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    yield proc
    proc.cleanup()


def _drain(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[bytes]:
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(msg.data())
        consumer.acknowledge(msg)


def test_ack_of_an_unwritten_position_skips_nothing(broker: BrokerProcess) -> None:
    client = process_client(broker.url)
    consumer = client.subscribe(
        TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST
    )
    producer = client.create_producer(TOPIC, batching_enabled=False)
    first = producer.send(b"m0")
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    # acknowledge entries 3..5 of the current ledger before they exist
    for entry_id in (3, 4, 5):
        consumer.acknowledge(pulsar.MessageId(-1, first.ledger_id(), entry_id, -1))
    time.sleep(0.3)
    for i in range(1, 8):
        producer.send(f"m{i}".encode())
    assert sorted(_drain(consumer)) == [f"m{i}".encode() for i in range(1, 8)]
    time.sleep(1.8)  # the acknowledgments are stored
    client.close()
    broker.stop()
    broker.start()
    client = process_client(broker.url)
    consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(consumer) == []
    client.close()
