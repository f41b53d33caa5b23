"""Negative acks, ack timeout and the dead letter policy of the official client on our broker."""

from __future__ import annotations

import time

import pulsar
import pytest

SHARED = pulsar.ConsumerType.Shared
EARLIEST = pulsar.InitialPosition.Earliest


def test_nack_redelivers_with_growing_count(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=SHARED,
        negative_ack_redelivery_delay_ms=100,
        initial_position=EARLIEST,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"x")
    counts = []
    for _ in range(3):
        msg = consumer.receive(timeout_millis=5000)
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    msg = consumer.receive(timeout_millis=5000)
    counts.append(msg.redelivery_count())
    consumer.acknowledge(msg)
    assert counts == [0, 1, 2, 3]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)


def test_dead_letter_after_max_redeliveries(client: pulsar.Client, topic: str) -> None:
    dlq_topic = f"{topic}-s-DLQ"
    dlq = client.subscribe(dlq_topic, "dlq-reader", initial_position=EARLIEST)
    policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=3)
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=SHARED,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=policy,
        initial_position=EARLIEST,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"poison", properties={"k": "v"})
    producer.send(b"fine")
    seen = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            break
        seen.append((msg.data(), msg.redelivery_count()))
        if msg.data() == b"poison":
            consumer.negative_acknowledge(msg)
        else:
            consumer.acknowledge(msg)
    assert [c for d, c in seen if d == b"poison"] == [0, 1, 2, 3]
    dead = dlq.receive(timeout_millis=5000)
    assert dead.data() == b"poison"
    assert dead.properties()["k"] == "v"


def test_ack_timeout_redelivers(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "s",
        consumer_type=SHARED,
        unacked_messages_timeout_ms=10_000,
        initial_position=EARLIEST,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"slow")
    first = consumer.receive(timeout_millis=5000)
    assert first.redelivery_count() == 0
    again = consumer.receive(timeout_millis=20_000)
    assert again.data() == b"slow"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_nack_respects_key_shared_ownership(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(
            topic,
            "ks",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{i}",
            negative_ack_redelivery_delay_ms=100,
            initial_position=EARLIEST,
        )
        for i in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"{i}".encode(), partition_key=f"key-{i % 5}")
    owner: dict[str, int] = {}
    nacked: set[bytes] = set()
    done = 0
    deadline = time.monotonic() + 15
    while done < 20 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            assert owner.setdefault(msg.partition_key(), index) == index
            if msg.data() not in nacked and int(msg.data()) % 3 == 0:
                nacked.add(msg.data())
                consumer.negative_acknowledge(msg)
            else:
                consumer.acknowledge(msg)
                done += 1
    assert done == 20
