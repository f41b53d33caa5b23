"""Subscription types, readers, seek, regex and partitioned topics with the official client."""

from __future__ import annotations

import re
import time
import uuid

import pulsar
import pytest
from official_client import drain

from starquake.broker.embedded import EmbeddedBroker


def test_exclusive_refuses_second_consumer(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)


def test_conflicting_subscription_type_is_refused(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover)


def test_shared_splits_messages_each_once(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(
        topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
    )
    c2 = client.subscribe(
        topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
    )
    producer = client.create_producer(topic, batching_enabled=False)
    sent = {f"m{i}".encode() for i in range(100)}
    for payload in sorted(sent):
        producer.send_async(payload, None)
    producer.flush()
    got1: list[bytes] = []
    got2: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got1) + len(got2) < len(sent) and time.monotonic() < deadline:
        for consumer, got in ((c1, got1), (c2, got2)):
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            got.append(msg.data())
            consumer.acknowledge(msg)
    assert sorted(got1 + got2) == sorted(sent)
    assert got1 and got2


def test_failover_switches_to_standby(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    active = client.subscribe(
        topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a"
    )
    standby = client.subscribe(
        topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b"
    )
    for i in range(10):
        producer.send(f"m{i}".encode())
    first = []
    for _ in range(5):
        msg = active.receive(timeout_millis=5000)
        first.append(msg.data())
        active.acknowledge(msg)
    with pytest.raises(pulsar.Timeout):
        standby.receive(timeout_millis=300)
    active.close()
    rest = [standby.receive(timeout_millis=5000).data() for _ in range(5)]
    assert first + rest == [f"m{i}".encode() for i in range(10)]


def test_reader_from_earliest_and_from_message_id(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(6)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(6)] == [f"m{i}".encode() for i in range(6)]
    assert not reader.has_message_available()
    reader.close()
    reader = client.create_reader(topic, ids[2])
    assert reader.read_next(5000).data() == b"m3"
    reader.close()
    reader = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert reader.read_next(5000).data() == b"m2"
    reader.close()
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    producer.send(b"new")
    assert reader.read_next(5000).data() == b"new"


def test_reader_from_batched_message_id(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=50
    )
    ids: list[pulsar.MessageId] = []
    for i in range(5):
        producer.send_async(f"m{i}".encode(), lambda res, mid: ids.append(mid))
    producer.flush()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    msgs = [reader.read_next(5000) for _ in range(5)]
    reader.close()
    reader = client.create_reader(topic, msgs[1].message_id())
    assert reader.read_next(5000).data() == b"m2"


def test_has_message_available(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    producer.send(b"a")
    assert reader.has_message_available()
    reader.read_next(5000)
    assert not reader.has_message_available()


def test_seek_to_message_id_and_time(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(10):
        ids.append(producer.send(f"m{i}".encode()))
        if i == 4:
            # not synchronisation: publish times of m4 and m5 straddle ``middle`` by >= 50 ms
            time.sleep(0.05)
            middle = int(time.time() * 1000)
            time.sleep(0.05)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert drain(consumer, 500) == [f"m{i}".encode() for i in range(10)]
    # a seek makes the broker disconnect the consumer: the first message waits for the reconnect
    consumer.seek(pulsar.MessageId.earliest)
    assert drain(consumer, 500, first_within_ms=10_000) == [f"m{i}".encode() for i in range(10)]
    consumer.seek(middle)
    assert drain(consumer, 500, first_within_ms=10_000) == [f"m{i}".encode() for i in range(5, 10)]
    # the broker moves the cursor to the message id itself, but a consumer is not
    # ``startMessageIdInclusive`` by default, so the client skips that message: Pulsar's seek
    # by message id resumes after it
    consumer.seek(ids[7])
    assert drain(consumer, 500, first_within_ms=10_000) == [b"m8", b"m9"]


def test_regex_subscription_over_several_topics(client: pulsar.Client) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    producers = [client.create_producer(t) for t in topics]
    for p in producers:
        p.send(b"warm-up")
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "rx",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for i, p in enumerate(producers):
        p.send(f"from-{i}".encode())
    got = sorted(drain(consumer, 2000))
    assert got == sorted([b"warm-up"] * 3 + [f"from-{i}".encode() for i in range(3)])


def test_partitioned_topic(broker: EmbeddedBroker, client: pulsar.Client, topic: str) -> None:
    broker.create_partitioned_topic(topic, 4)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(4)]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    partitions_seen = set()
    for i in range(40):
        mid = producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
        partitions_seen.add(mid.partition())
    assert len(partitions_seen) > 1
    got = []
    for _ in range(40):
        msg = consumer.receive(timeout_millis=5000)
        got.append(msg.data())
        assert msg.topic_name().startswith(f"{topic}-partition-")
        consumer.acknowledge(msg)
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(40))


def test_unknown_namespace_is_topic_not_found(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.PulsarException):
        client.create_producer("persistent://no-such-tenant/ns/topic")


def test_unsubscribe_removes_subscription(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "gone")
    producer.send(b"a")
    consumer.unsubscribe()
    loaded = broker.service.topics[topic]
    assert "gone" not in loaded.subscriptions
    consumer = client.subscribe(topic, "gone")
    producer.send(b"b")
    assert consumer.receive(timeout_millis=5000).data() == b"b"
