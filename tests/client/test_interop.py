"""Ours and the official client on the same topics: wire formats, ids and routing agree."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from official_client import receive_count

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker

COMPRESSIONS = ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"]
KEYS = ["k1", "k2", "key1", "key2", "key01", "key02", "keykeykeykeykey1", "keykeykey2", "a"]
KEYS += ["hello", "user-42", "ключ", "日本", "", "x" * 40]


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_ours_produces_official_consumes(
    ours: Any, official: Any, broker: EmbeddedBroker, topic: str, batching: bool, compression: str
) -> None:
    broker.create_partitioned_topic(topic, 3)
    consumer = official.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = ours.create_producer(
        topic, batching_enabled=batching, compression_type=getattr(sq.CompressionType, compression)
    )
    sent = {}
    for i in range(45):
        payload = f"payload-{i}".encode() * (i % 5 + 1)
        sent[payload] = f"key-{i % 9}"
        producer.send_async(payload, None, partition_key=f"key-{i % 9}", properties={"i": str(i)})
    producer.flush()
    received = receive_count(consumer, len(sent))
    assert sorted(m.data() for m in received) == sorted(sent)
    for msg in received:
        assert msg.partition_key() == sent[msg.data()]
        consumer.acknowledge(msg)


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_official_produces_ours_consumes(
    ours: Any, official: Any, broker: EmbeddedBroker, topic: str, batching: bool, compression: str
) -> None:
    broker.create_partitioned_topic(topic, 3)
    consumer = ours.subscribe(topic, "s", initial_position=sq.InitialPosition.Earliest)
    producer = official.create_producer(
        topic,
        batching_enabled=batching,
        compression_type=getattr(pulsar.CompressionType, compression),
    )
    sent = {}
    for i in range(45):
        payload = f"payload-{i}".encode() * (i % 5 + 1)
        sent[payload] = f"key-{i % 9}"
        producer.send_async(payload, None, partition_key=f"key-{i % 9}", properties={"i": str(i)})
    producer.flush()
    received = receive_count(consumer, len(sent))
    assert sorted(m.data() for m in received) == sorted(sent)
    for msg in received:
        assert msg.partition_key() == sent[msg.data()]
        assert msg.message_id().partition() >= 0
        consumer.acknowledge(msg)


def test_partition_routing_matches_official(
    ours: Any, official: Any, broker: EmbeddedBroker, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 7)
    theirs = official.create_producer(topic, batching_enabled=False)
    mine = ours.create_producer(topic, batching_enabled=False)
    for key in KEYS:
        if not key:
            continue  # an empty key counts as "no key" in both clients
        a = theirs.send(b"x", partition_key=key).partition()
        b = mine.send(b"x", partition_key=key).partition()
        assert a == b, key


def test_message_id_bytes_interop(ours: Any, official: Any, topic: str) -> None:
    samples = [(2, 10, 20, 3), (-1, 1, 2, -1), (5, 1, 2, -1), (-1, -1, -1, -1)]
    for partition, ledger, entry, batch in samples:
        theirs = pulsar.MessageId(partition, ledger, entry, batch)
        mine = sq.MessageId(partition, ledger, entry, batch)
        assert mine.serialize() == theirs.serialize()
        back = sq.MessageId.deserialize(theirs.serialize())
        assert str(back) == str(theirs)
    assert sq.MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert sq.MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()

    # Ids of received batched messages carry the batch size too.
    producer = official.create_producer(topic, batching_enabled=True)
    for i in range(3):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    c1 = official.subscribe(topic, "a", initial_position=pulsar.InitialPosition.Earliest)
    c2 = ours.subscribe(topic, "b", initial_position=sq.InitialPosition.Earliest)
    for _ in range(3):
        m1, m2 = c1.receive(5000), c2.receive(5000)
        assert m1.message_id().serialize() == m2.message_id().serialize()
        # An id stored by one client positions a reader of the other.
        assert str(pulsar.MessageId.deserialize(m2.message_id().serialize())) == str(
            m1.message_id()
        )
    sent_theirs = producer.send(b"one")
    mine_producer = ours.create_producer(topic, batching_enabled=True)
    sent_mine = mine_producer.send(b"two")
    assert len(sent_theirs.serialize()) == len(sent_mine.serialize())


def test_reader_from_official_id(ours: Any, official: Any, topic: str) -> None:
    producer = official.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(4)]
    start = sq.MessageId.deserialize(ids[1].serialize())
    reader = ours.create_reader(topic, start)
    assert reader.read_next(5000).data() == b"m2"


@pytest.mark.parametrize("partitions", [0, 2], ids=["plain", "partitioned"])
@pytest.mark.parametrize("direction", ["ours-to-official", "official-to-ours"])
def test_chunked_interop(
    ours: Any, official: Any, broker: EmbeddedBroker, topic: str, direction: str, partitions: int
) -> None:
    import os

    if partitions:
        broker.create_partitioned_topic(topic, partitions)
    payload = os.urandom(6 * 1024 * 1024)  # above the broker's 5 MB maxMessageSize
    if direction == "ours-to-official":
        sender, receiver, mod = ours, official, pulsar
    else:
        sender, receiver, mod = official, ours, sq
    consumer = receiver.subscribe(topic, "s", initial_position=mod.InitialPosition.Earliest)
    producer = sender.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    sent = producer.send(payload, properties={"x": "y"}, partition_key="k")
    producer.send(b"after", partition_key="k")  # same partition: arrives after
    msg = consumer.receive(timeout_millis=20000)
    assert msg.data() == payload
    assert msg.properties() == {"x": "y"}
    assert msg.message_id().serialize() == sent.serialize()
    assert str(msg.message_id()) == str(sent)
    assert msg.message_id().partition() == sent.partition()
    assert (sent.partition() >= 0) == bool(partitions)
    assert consumer.receive(timeout_millis=5000).data() == b"after"
    # An id serialized by one client reads back identically in the other.
    assert str(
        pulsar.MessageId.deserialize(sq.MessageId.deserialize(sent.serialize()).serialize())
    ) == str(sent)
    consumer.acknowledge(msg)
