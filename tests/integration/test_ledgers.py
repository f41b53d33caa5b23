"""Ledger rollover and trimming in a running broker, observed through the official client."""

from __future__ import annotations

import time
from pathlib import Path

import pulsar

from starquake.broker.embedded import EmbeddedBroker

EARLIEST = pulsar.InitialPosition.Earliest


def test_rollover_by_entries_and_trim_after_acks(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(
        tmp_path / "data",
        managedLedgerMaxEntriesPerLedger=10,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
    ) as broker:
        client = pulsar.Client(broker.service_url)
        try:
            consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
            producer = client.create_producer(topic, batching_enabled=False)
            ids = [producer.send(f"m{i}".encode()) for i in range(35)]
            ledgers = sorted({m.ledger_id() for m in ids})
            assert len(ledgers) == 4
            assert [m.entry_id() for m in ids[:12]] == [*range(10), 0, 1]
            loaded = broker.service.topics[topic]
            assert broker.call(_trim(broker)) == 0  # nothing consumed yet
            for _ in range(25):
                consumer.acknowledge(consumer.receive(timeout_millis=5000))
            consumer.acknowledge_cumulative(consumer.receive(timeout_millis=5000))
            deadline = time.monotonic() + 5
            deleted = 0
            while deleted < 2 and time.monotonic() < deadline:
                deleted += broker.call(_trim(broker))
                time.sleep(0.1)
            assert deleted == 2
            assert len(loaded.ledger.ledgers()) == 2
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(5000).data() == b"m20"
        finally:
            client.close()


async def _trim(broker: EmbeddedBroker) -> int:
    return broker.service.trim_ledgers()


def test_idle_ledger_rolls_over_by_age(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(
        tmp_path / "data",
        managedLedgerMaxLedgerRolloverTimeMinutes=0.001,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
    ) as broker:
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            first = producer.send(b"a")
            time.sleep(0.2)
            assert broker.call(_roll(broker)) == 1
            second = producer.send(b"b")
            assert second.ledger_id() > first.ledger_id()
            assert second.entry_id() == 0
        finally:
            client.close()


async def _roll(broker: EmbeddedBroker) -> int:
    return broker.service.roll_over_ledgers()
