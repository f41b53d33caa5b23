"""Non-persistent topics through the official client."""

from __future__ import annotations

import uuid

import pulsar
import pytest
from official_client import drain

from starquake.broker.embedded import EmbeddedBroker


def _topic() -> str:
    return f"non-persistent://public/default/np-{uuid.uuid4().hex[:10]}"


def test_fan_out_to_every_subscription(client: pulsar.Client) -> None:
    topic = _topic()
    subs = [client.subscribe(topic, f"s{i}") for i in range(3)]
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]
    assert all((m.ledger_id(), m.entry_id()) == (-1, -1) for m in ids)  # nothing is stored
    for sub in subs:
        assert drain(sub) == [f"m{i}".encode() for i in range(10)]


@pytest.mark.parametrize(
    "sub_type",
    [
        pulsar.ConsumerType.Exclusive,
        pulsar.ConsumerType.Failover,
        pulsar.ConsumerType.Shared,
        pulsar.ConsumerType.KeyShared,
    ],
    ids=lambda t: str(t).split(".")[-1],
)
def test_all_subscription_types(client: pulsar.Client, sub_type: pulsar.ConsumerType) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=20
    )
    for i in range(20):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 4}")
    producer.flush()
    assert sorted(drain(consumer)) == sorted(f"m{i}".encode() for i in range(20))


def test_shared_splits(client: pulsar.Client) -> None:
    topic = _topic()
    a = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    b = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"m{i}".encode())
    got_a, got_b = drain(a), drain(b)
    assert sorted(got_a + got_b) == sorted(f"m{i}".encode() for i in range(40))
    assert got_a and got_b


def test_messages_without_consumers_are_dropped_and_counted(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"nobody listens")
    consumer = client.subscribe(topic, "late", receiver_queue_size=5)
    for i in range(30):
        producer.send(f"m{i}".encode())
    # The broker delivers or drops each message before it sends the receipt: nothing to wait for.
    got = drain(consumer)
    assert b"nobody listens" not in got
    assert 0 < len(got) < 30
    stats = broker.call(_stats(broker, topic))
    assert stats["subscriptions"]["late"]["msgDropCounter"] > 0


async def _stats(broker: EmbeddedBroker, topic: str) -> dict[str, object]:
    return broker.service.nonpersistent_topics[topic].stats()
