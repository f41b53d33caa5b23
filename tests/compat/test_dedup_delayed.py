"""Deduplication and delayed delivery through the official client."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker

EARLIEST = pulsar.InitialPosition.Earliest


def _read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data())
    reader.close()
    return out


@pytest.fixture
def dedup_broker(tmp_path: Path) -> EmbeddedBroker:
    with EmbeddedBroker(tmp_path / "data", brokerDeduplicationEnabled=True) as broker:
        yield broker  # type: ignore[misc]


def test_dedup_across_producer_restart(dedup_broker: EmbeddedBroker, topic: str) -> None:
    client = official_client(dedup_broker)
    try:
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        assert producer.last_sequence_id() == 4
        producer.close()
        producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
        assert producer.last_sequence_id() == 4
        duplicate = producer.send(b"m3-again", sequence_id=3)
        assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)  # Pulsar's receipt
        fresh = producer.send(b"m5")
        assert fresh.entry_id() == 5  # one ledger: m0..m4 are entries 0..4
        assert _read_all(client, topic) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]
    finally:
        client.close()


def test_dedup_state_survives_restart(tmp_path: Path, topic: str) -> None:
    """The official client sends a batch under its first sequence id without
    ``highest_sequence_id``: as Pulsar's broker does, ours counts the batch as that id alone
    (the ids inside a batch need not be consecutive), and knows it after a restart."""
    ids = range(1, 21)  # explicit ids from 1: the official client takes 0 for "none given"
    with EmbeddedBroker(tmp_path / "data", brokerDeduplicationEnabled=True) as broker:
        client = official_client(broker)
        producer = client.create_producer(topic, producer_name="p", batching_enabled=True)
        for i in ids:
            producer.send_async(f"m{i}".encode(), None, sequence_id=i)
        producer.flush()
        client.close()
    with EmbeddedBroker(tmp_path / "data", brokerDeduplicationEnabled=True) as broker:
        client = official_client(broker)
        try:
            producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
            assert producer.last_sequence_id() == 1  # the batch's first id, as in Pulsar
            duplicate = producer.send(b"dup", sequence_id=1)
            assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
            later = producer.send(b"m10-again", sequence_id=10)  # above 1: stored, as in Pulsar
            assert (later.ledger_id(), later.entry_id()) != (-1, -1)
            stored = [f"m{i}".encode() for i in ids] + [b"m10-again"]
            assert _read_all(client, topic) == stored
        finally:
            client.close()


def test_without_dedup_resends_are_stored(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
    producer.send(b"a", sequence_id=1)
    producer.send(b"a", sequence_id=1)
    assert producer.last_sequence_id() >= 1
    assert len(_read_all(client, topic)) == 2


def test_delayed_messages_wait_on_shared(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", delayedDeliveryTickTimeMillis=100) as broker:
        client = official_client(broker)
        try:
            shared = client.subscribe(
                topic,
                "shared",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=EARLIEST,
            )
            exclusive = client.subscribe(topic, "excl", initial_position=EARLIEST)
            producer = client.create_producer(topic, batching_enabled=False)
            sent_at = time.monotonic()
            producer.send(b"later", deliver_after=timedelta(milliseconds=1500))
            producer.send(b"now")
            assert shared.receive(timeout_millis=5000).data() == b"now"
            assert exclusive.receive(timeout_millis=5000).data() == b"later"
            msg = shared.receive(timeout_millis=5000)
            waited = time.monotonic() - sent_at
            assert msg.data() == b"later"
            assert waited >= 1.3, waited
        finally:
            client.close()


def test_delayed_delivery_disabled(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", delayedDeliveryEnabled=False) as broker:
        client = official_client(broker)
        try:
            shared = client.subscribe(
                topic,
                "shared",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=EARLIEST,
            )
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"later", deliver_after=timedelta(seconds=30))
            assert shared.receive(timeout_millis=3000).data() == b"later"
        finally:
            client.close()


def test_delayed_messages_survive_restart(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", delayedDeliveryTickTimeMillis=100) as broker:
        client = official_client(broker)
        shared = client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST
        )
        producer = client.create_producer(topic, batching_enabled=False)
        sent_at = time.monotonic()
        producer.send(b"later", deliver_after=timedelta(milliseconds=2500))
        with pytest.raises(pulsar.Timeout):
            shared.receive(timeout_millis=300)
        client.close()
    with EmbeddedBroker(tmp_path / "data", delayedDeliveryTickTimeMillis=100) as broker:
        client = official_client(broker)
        try:
            shared = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
            msg = shared.receive(timeout_millis=8000)
            assert msg.data() == b"later"
            # Not before its time (non-strict delivery may be one 100 ms tick early).
            assert time.monotonic() - sent_at >= 2.3
        finally:
            client.close()
