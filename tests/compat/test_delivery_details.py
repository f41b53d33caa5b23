"""Failover spreading, unacked limits, batch-index acks, chunking, subscription creation rules."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pulsar
import pytest
from official_client import official_client, receive_until_quiet

from starquake.broker.embedded import EmbeddedBroker

EARLIEST = pulsar.InitialPosition.Earliest


def test_failover_spreads_partitions_over_consumers(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 4)
    a = client.subscribe(
        topic,
        "fo",
        consumer_type=pulsar.ConsumerType.Failover,
        consumer_name="a",
        initial_position=EARLIEST,
    )
    b = client.subscribe(
        topic,
        "fo",
        consumer_type=pulsar.ConsumerType.Failover,
        consumer_name="b",
        initial_position=EARLIEST,
    )
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(40):
        producer.send(f"{i}".encode())
    by_consumer: dict[str, set[str]] = {"a": set(), "b": set()}
    for name, consumer in (("a", a), ("b", b)):
        # the first may take a while: each partition's active consumer is served after 1 s
        received = receive_until_quiet(consumer, 500, first_within_ms=10_000, acknowledge=True)
        by_consumer[name].update(msg.topic_name() for msg in received)
    assert by_consumer["a"] == {f"{topic}-partition-{i}" for i in (0, 2)}
    assert by_consumer["b"] == {f"{topic}-partition-{i}" for i in (1, 3)}


def test_max_unacked_messages_per_consumer_stops_dispatch(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", maxUnackedMessagesPerConsumer=10) as broker:
        client = official_client(broker)
        try:
            consumer = client.subscribe(
                topic, "s", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST
            )
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(30):
                producer.send(f"{i}".encode())
            held = []
            while True:
                try:
                    held.append(consumer.receive(timeout_millis=500))
                except pulsar.Timeout:
                    break
            assert len(held) == 10
            for msg in held:
                consumer.acknowledge(msg)
            rest = []
            deadline = time.monotonic() + 10
            while len(rest) < 20 and time.monotonic() < deadline:
                try:
                    msg = consumer.receive(timeout_millis=500)
                except pulsar.Timeout:
                    continue
                rest.append(msg)
                consumer.acknowledge(msg)
            assert len(rest) == 20
        finally:
            client.close()


def test_batch_index_ack_redelivers_only_unacked(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", acknowledgmentAtBatchIndexLevelEnabled=True) as broker:
        client = official_client(broker)
        try:
            consumer = client.subscribe(
                topic,
                "s",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=EARLIEST,
                batch_index_ack_enabled=True,
            )
            producer = client.create_producer(
                topic, batching_enabled=True, batching_max_publish_delay_ms=100
            )
            for i in range(6):
                producer.send_async(f"{i}".encode(), None)
            producer.flush()
            msgs = [consumer.receive(timeout_millis=5000) for _ in range(6)]
            assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1
            for m in msgs:
                if int(m.data()) % 2 == 0:
                    consumer.acknowledge(m)
            consumer.close()  # sends the pending (grouped) acknowledgments first
            consumer = client.subscribe(
                topic, "s", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
            )
            again = []
            while True:
                try:
                    again.append(consumer.receive(timeout_millis=1000).data())
                except pulsar.Timeout:
                    break
            assert sorted(again) == [b"1", b"3", b"5"]
        finally:
            client.close()


def test_without_batch_index_ack_the_whole_batch_comes_back(
    client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(
        topic, "s", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=100
    )
    for i in range(4):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    msgs = [consumer.receive(timeout_millis=5000) for _ in range(4)]
    consumer.acknowledge(msgs[0])
    consumer.close()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    again = []
    while True:
        try:
            again.append(consumer.receive(timeout_millis=1000).data())
        except pulsar.Timeout:
            break
    # without batch index acks the client tells the broker nothing until every message of the
    # batch is acked, so the broker redelivers the whole entry, the acked message included
    assert sorted(again) == [b"0", b"1", b"2", b"3"]


def test_chunked_6mb_message(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    payload = os.urandom(6 * 1024 * 1024)
    producer.send(payload)
    msg = consumer.receive(timeout_millis=20000)
    assert msg.data() == payload
    consumer.acknowledge(msg)


def test_interleaved_chunked_messages_from_two_producers(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    p1 = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    p2 = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    a = os.urandom(6 * 1024 * 1024)
    b = os.urandom(6 * 1024 * 1024)
    p1.send_async(a, None)
    p2.send_async(b, None)
    p1.flush()
    p2.flush()
    got = sorted([consumer.receive(timeout_millis=20000).data() for _ in range(2)])
    assert got == sorted([a, b])


def test_oversize_unchunked_message_is_refused(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):  # refused by the client, above maxMessageSize
        producer.send(b"x" * (6 * 1024 * 1024))
    assert producer.send(b"small").entry_id() >= 0


def test_auto_subscription_creation_disabled(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", allowAutoSubscriptionCreation=False) as broker:
        client = official_client(broker)
        try:
            with pytest.raises(pulsar.PulsarException):
                client.subscribe(topic, "new-sub")
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            reader.close()
        finally:
            client.close()


def test_force_topic_creation_false_on_missing_topic(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", allowAutoTopicCreation=False) as broker:
        client = official_client(broker)
        try:
            with pytest.raises(pulsar.PulsarException):
                client.create_producer("persistent://public/default/never-created")
        finally:
            client.close()


def test_max_unacked_messages_per_subscription(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(
        tmp_path / "data", maxUnackedMessagesPerSubscription=8, maxUnackedMessagesPerConsumer=0
    ) as broker:
        client = official_client(broker)
        try:
            consumers = [
                client.subscribe(
                    topic,
                    "s",
                    consumer_type=pulsar.ConsumerType.Shared,
                    initial_position=EARLIEST,
                    receiver_queue_size=100,
                )
                for _ in range(2)
            ]
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(30):
                producer.send(f"{i}".encode())
            held = []
            for consumer in consumers:
                while True:
                    try:
                        held.append((consumer, consumer.receive(timeout_millis=400)))
                    except pulsar.Timeout:
                        break
            assert len(held) == 8
            for consumer, msg in held:
                consumer.acknowledge(msg)
            rest = 0
            deadline = time.monotonic() + 10
            while rest < 22 and time.monotonic() < deadline:
                for consumer in consumers:
                    try:
                        msg = consumer.receive(timeout_millis=100)
                    except pulsar.Timeout:
                        continue
                    consumer.acknowledge(msg)
                    rest += 1
            assert rest == 22
        finally:
            client.close()


def test_chunked_messages_on_a_shared_subscription(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=EARLIEST,
            receiver_queue_size=2,
        )
        for _ in range(2)
    ]
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    payloads = [os.urandom(6 * 1024 * 1024) for _ in range(3)]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        for consumer in consumers:
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            got.append(msg.data())
            consumer.acknowledge(msg)
    assert sorted(got) == sorted(payloads)


def test_unacked_limits_do_not_hold_back_exclusive_consumers(tmp_path: Path, topic: str) -> None:
    # Pulsar tracks unacknowledged messages for Shared and Key_Shared consumers only; readers
    # and Exclusive consumers that never acknowledge are bounded by their permits alone
    with EmbeddedBroker(
        tmp_path / "data", maxUnackedMessagesPerConsumer=10, maxUnackedMessagesPerSubscription=12
    ) as broker:
        client = official_client(broker)
        try:
            consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(30):
                producer.send(f"{i}".encode())
            got = [consumer.receive(timeout_millis=5000).data() for _ in range(30)]
            assert got == [f"{i}".encode() for i in range(30)]
        finally:
            client.close()
