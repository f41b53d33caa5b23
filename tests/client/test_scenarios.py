"""Scenarios run twice: with the official ``pulsar`` module and with ``starquake.client``.

Only the module differs between the two runs, so any failure on ours is an incompatibility.
"""

from __future__ import annotations

import re
import time
import types
import uuid
from typing import Any

import pytest
from official_client import receive_count, receive_until_quiet, subscribe_earliest

from starquake.broker.embedded import EmbeddedBroker

COMPRESSIONS = ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"]
EARLIEST = "Earliest"


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_round_trip(
    mod: types.ModuleType, client: Any, topic: str, batching: bool, compression: str
) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        compression_type=getattr(mod.CompressionType, compression),
    )
    sent = [f"message-{i}-".encode() * (i % 7 + 1) for i in range(60)]
    for i, payload in enumerate(sent):
        producer.send_async(payload, None, properties={"i": str(i)}, partition_key=f"k{i % 3}")
    producer.flush()
    received = receive_count(consumer, len(sent))
    assert [m.data() for m in received] == sent
    for i, msg in enumerate(received):
        assert msg.properties() == {"i": str(i)}
        assert msg.partition_key() == f"k{i % 3}"
        consumer.acknowledge(msg)
    if batching:
        assert any(m.message_id().batch_index() > 0 for m in received)
    else:
        assert all(m.message_id().batch_index() == -1 for m in received)
    with pytest.raises(mod.Timeout):
        consumer.receive(timeout_millis=200)


def test_sync_send_ids(mod: types.ModuleType, client: Any, topic: str) -> None:
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(3)]
    assert [m.entry_id() for m in ids] == [0, 1, 2]
    assert producer.last_sequence_id() == 2
    assert producer.topic() == topic
    assert producer.producer_name()


def test_metadata_round_trip(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    for batching in (False, True):
        producer = client.create_producer(topic, batching_enabled=batching)
        producer.send(
            b"payload",
            properties={"a": "1", "b": "two"},
            partition_key="pk",
            ordering_key="ok",
            event_timestamp=1_700_000_000_123,
        )
        before = int(time.time() * 1000)
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"payload"
        assert msg.value() == b"payload"
        assert msg.properties() == {"a": "1", "b": "two"}
        assert msg.partition_key() == "pk"
        assert msg.ordering_key() == "ok"
        assert msg.event_timestamp() == 1_700_000_000_123
        assert abs(msg.publish_timestamp() - before) < 10_000
        assert msg.topic_name() == topic
        assert msg.redelivery_count() == 0
        consumer.acknowledge(msg)
        producer.close()


def test_exclusive_refuses_second_consumer(mod: types.ModuleType, client: Any, topic: str) -> None:
    subscribe_earliest(mod, client, topic)
    with pytest.raises(mod.ConsumerBusy):
        subscribe_earliest(mod, client, topic)


def test_shared_splits_and_refuses_cumulative(
    mod: types.ModuleType, client: Any, topic: str
) -> None:
    kw = {"consumer_type": mod.ConsumerType.Shared, "receiver_queue_size": 5}
    c1 = subscribe_earliest(mod, client, topic, **kw)
    c2 = subscribe_earliest(mod, client, topic, **kw)
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got: dict[str, list[bytes]] = {"c1": [], "c2": []}
    deadline = time.time() + 10
    while len(got["c1"]) + len(got["c2"]) < 20 and time.time() < deadline:
        for name, consumer in (("c1", c1), ("c2", c2)):
            try:
                msg = consumer.receive(timeout_millis=50)
            except mod.Timeout:
                continue
            got[name].append(msg.data())
            consumer.acknowledge(msg)
    assert sorted(got["c1"] + got["c2"]) == sorted(f"m{i}".encode() for i in range(20))
    assert got["c1"] and got["c2"]
    with pytest.raises(mod.CumulativeAcknowledgementNotAllowedError):
        c1.acknowledge_cumulative(msg)


def test_failover_one_active(mod: types.ModuleType, client: Any, topic: str) -> None:
    kw = {"consumer_type": mod.ConsumerType.Failover}
    c1 = subscribe_earliest(mod, client, topic, consumer_name="a", **kw)
    c2 = subscribe_earliest(mod, client, topic, consumer_name="b", **kw)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    # the active consumer is served 1 s after it became active: the first consumer may wait
    # that long for its first message (the other's, if it is the active one, arrive meanwhile)
    counts = [
        len(receive_until_quiet(c, 500, first_within_ms=first, acknowledge=True, module=mod))
        for c, first in ((c1, 10_000), (c2, None))
    ]
    assert sorted(counts) == [0, 10]


def test_individual_ack_and_redelivery_after_reconnect(
    mod: types.ModuleType, client: Any, topic: str
) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}".encode())
    msgs = receive_count(consumer, 6)
    for msg in msgs[::2]:
        consumer.acknowledge(msg)
    consumer.close()
    consumer = subscribe_earliest(mod, client, topic)
    again = receive_count(consumer, 3)
    assert [m.data() for m in again] == [b"m1", b"m3", b"m5"]
    # an Exclusive subscription rewinds its cursor when its consumer leaves; Pulsar counts
    # redeliveries only for Shared and Key_Shared subscriptions, so the count stays 0
    assert [m.redelivery_count() for m in again] == [0, 0, 0]


def test_cumulative_ack(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    msgs = receive_count(consumer, 10)
    consumer.acknowledge_cumulative(msgs[5])
    consumer.close()
    consumer = subscribe_earliest(mod, client, topic)
    assert [m.data() for m in receive_count(consumer, 4)] == [
        f"m{i}".encode() for i in range(6, 10)
    ]


def test_negative_ack_redelivers(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(
        mod,
        client,
        topic,
        consumer_type=mod.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic)
    producer.send(b"retry-me")
    msg = consumer.receive(timeout_millis=5000)
    consumer.negative_acknowledge(msg)
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == b"retry-me"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_redeliver_unacknowledged(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    first = receive_count(consumer, 3)
    consumer.redeliver_unacknowledged_messages()
    again = receive_count(consumer, 3)
    assert [m.data() for m in again] == [m.data() for m in first]


def test_reader_positions(mod: types.ModuleType, client: Any, topic: str) -> None:
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]

    reader = client.create_reader(topic, mod.MessageId.earliest)
    assert reader.has_message_available()
    assert [reader.read_next(5000).data() for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    assert not reader.has_message_available()
    reader.close()

    start = mod.MessageId.deserialize(ids[1].serialize())
    reader = client.create_reader(topic, start)
    assert reader.read_next(5000).data() == b"m2"
    reader.close()

    reader = client.create_reader(topic, start, start_message_id_inclusive=True)
    assert reader.read_next(5000).data() == b"m1"
    reader.close()

    reader = client.create_reader(topic, mod.MessageId.latest)
    assert not reader.has_message_available()
    producer.send(b"new")
    assert reader.read_next(5000).data() == b"new"
    reader.close()


def test_reader_batched_start_id(mod: types.ModuleType, client: Any, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4)
    for i in range(8):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    reader = client.create_reader(topic, mod.MessageId.earliest)
    msgs = [reader.read_next(5000) for _ in range(8)]
    reader.close()
    reader = client.create_reader(topic, msgs[5].message_id())
    assert reader.read_next(5000).data() == b"m6"


def test_seek(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    for msg in receive_count(consumer, 5):
        consumer.acknowledge(msg)
    consumer.seek(mod.MessageId.earliest)
    assert consumer.receive(timeout_millis=10000).data() == b"m0"
    consumer.seek(ids[2])  # exclusive by default: the next message is the one after
    assert consumer.receive(timeout_millis=10000).data() == b"m3"


def test_seek_inclusive_and_by_time(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic, start_message_id_inclusive=True)
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    for msg in receive_count(consumer, 5):
        consumer.acknowledge(msg)
    consumer.seek(ids[2])
    assert consumer.receive(timeout_millis=10000).data() == b"m2"
    consumer.seek(0)
    assert consumer.receive(timeout_millis=10000).data() == b"m0"


def test_regex_subscription(mod: types.ModuleType, client: Any, topic_factory: Any) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    other = topic_factory("other")
    producers = [client.create_producer(t) for t in [*topics, other]]
    pattern = re.compile(f"persistent://public/default/{prefix}-.*")
    consumer = subscribe_earliest(mod, client, pattern)
    for i, producer in enumerate(producers):
        producer.send(f"from-{i}".encode())
    got = sorted(m.data() for m in receive_count(consumer, 3))
    assert got == [b"from-0", b"from-1", b"from-2"]
    with pytest.raises(mod.Timeout):
        consumer.receive(timeout_millis=300)


def test_topic_list(mod: types.ModuleType, client: Any, topic_factory: Any) -> None:
    topics = [topic_factory("list") for _ in range(2)]
    consumer = subscribe_earliest(mod, client, topics)
    for t in topics:
        client.create_producer(t).send(t.encode())
    msgs = receive_count(consumer, 2)
    assert sorted(m.data().decode() for m in msgs) == sorted(topics)
    for msg in msgs:
        assert msg.topic_name() == msg.data().decode()
        consumer.acknowledge(msg)


def test_partitioned_topic(
    mod: types.ModuleType, client: Any, broker: EmbeddedBroker, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 3)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic, batching_enabled=True)
    for i in range(30):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"key-{i % 5}")
    producer.flush()
    msgs = receive_count(consumer, 30)
    assert sorted(m.data() for m in msgs) == sorted(f"m{i}".encode() for i in range(30))
    partition_of: dict[str, set[int]] = {}
    for msg in msgs:
        partition_of.setdefault(msg.partition_key(), set()).add(msg.message_id().partition())
        consumer.acknowledge(msg)
    assert all(len(parts) == 1 for parts in partition_of.values())
    producer.close()
    unkeyed = client.create_producer(topic, batching_enabled=False)
    parts = {unkeyed.send(b"x").partition() for _ in range(6)}
    assert len(parts) > 1


def test_unsubscribe(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    producer.send(b"a")
    consumer.unsubscribe()
    consumer = client.subscribe(topic, "sub")  # new subscription at latest
    producer.send(b"b")
    assert consumer.receive(timeout_millis=5000).data() == b"b"


def test_message_listener(mod: types.ModuleType, client: Any, topic: str) -> None:
    import threading

    seen: list[bytes] = []
    done = threading.Event()

    def listener(consumer: Any, msg: Any) -> None:
        seen.append(msg.data())
        consumer.acknowledge(msg)
        if len(seen) == 5:
            done.set()

    subscribe_earliest(mod, client, topic, message_listener=listener)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    assert done.wait(10)
    assert seen == [f"m{i}".encode() for i in range(5)]


def test_get_last_message_id(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    last = [producer.send(f"m{i}".encode()) for i in range(3)][-1]
    got = consumer.get_last_message_id()
    assert (got.ledger_id(), got.entry_id()) == (last.ledger_id(), last.entry_id())


def test_message_id_api(mod: types.ModuleType) -> None:
    mid = mod.MessageId(2, 10, 20, 3)
    assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (2, 10, 20, 3)
    assert str(mid) == "(10,20,2,3)"
    back = mod.MessageId.deserialize(mid.serialize())
    assert (back.ledger_id(), back.entry_id(), back.partition(), back.batch_index()) == (
        10,
        20,
        2,
        3,
    )
    assert mod.MessageId.earliest.ledger_id() == -1
    assert mod.MessageId.latest.entry_id() == (1 << 63) - 1
    assert mod.MessageId(0, 1, 2, 3) < mod.MessageId(0, 1, 3, -1)
