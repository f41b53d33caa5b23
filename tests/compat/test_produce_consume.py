"""Produce and consume through the official client: batching, compression, ids, acks."""

from __future__ import annotations

import pulsar
import pytest
from admin_http import http_call

from starquake.broker.embedded import EmbeddedBroker

COMPRESSIONS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: str(c).split(".")[-1])
def test_round_trip(
    client: pulsar.Client, topic: str, batching: bool, compression: pulsar.CompressionType
) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=batching, compression_type=compression
    )
    sent = [f"message-{i}-".encode() * (i % 7 + 1) for i in range(200)]
    for i, payload in enumerate(sent):
        producer.send_async(payload, None, properties={"i": str(i)}, partition_key=f"k{i % 3}")
    producer.flush()
    received = []
    for _ in sent:
        msg = consumer.receive(timeout_millis=10000)
        received.append(msg.data())
        assert msg.properties()["i"] == str(len(received) - 1)
        assert msg.partition_key() == f"k{(len(received) - 1) % 3}"
        consumer.acknowledge(msg)
    assert received == sent
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=200)


def test_sync_send_returns_durable_ids_starting_at_zero(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    assert [m.entry_id() for m in ids] == [0, 1, 2, 3, 4]
    assert len({m.ledger_id() for m in ids}) == 1
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    for expected in ids:
        msg = consumer.receive(timeout_millis=5000)
        assert (msg.message_id().ledger_id(), msg.message_id().entry_id()) == (
            expected.ledger_id(),
            expected.entry_id(),
        )
        consumer.acknowledge(msg)


def test_batched_messages_carry_batch_indexes(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=100
    )
    for i in range(10):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    indexes = []
    for _ in range(10):
        msg = consumer.receive(timeout_millis=5000)
        indexes.append(msg.message_id().batch_index())
        consumer.acknowledge(msg)
    assert indexes == list(range(10))


def test_latest_subscription_skips_earlier_messages(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"before")
    consumer = client.subscribe(topic, "late")
    producer.send(b"after")
    assert consumer.receive(timeout_millis=5000).data() == b"after"


def test_acked_messages_are_not_redelivered(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(10):
        msg = consumer.receive(timeout_millis=5000)
        if i % 2 == 0:
            consumer.acknowledge(msg)
    consumer.close()
    consumer = client.subscribe(topic, "s")
    again = [consumer.receive(timeout_millis=5000).data() for _ in range(5)]
    assert again == [f"m{i}".encode() for i in range(1, 10, 2)]


def test_cumulative_ack(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    msgs = [consumer.receive(timeout_millis=5000) for _ in range(10)]
    consumer.acknowledge_cumulative(msgs[6])
    consumer.close()
    consumer = client.subscribe(topic, "s")
    again = [consumer.receive(timeout_millis=5000).data() for _ in range(3)]
    assert again == [b"m7", b"m8", b"m9"]


def test_redeliver_unacknowledged(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    for i in range(3):
        producer.send(f"m{i}".encode())
    first = [consumer.receive(timeout_millis=5000).data() for _ in range(3)]
    consumer.redeliver_unacknowledged_messages()
    second = sorted(consumer.receive(timeout_millis=5000).data() for _ in range(3))
    assert sorted(first) == second == [b"m0", b"m1", b"m2"]


def test_redelivery_count_after_consumer_leaves(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    c1 = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer.send(b"x")
    assert c1.receive(timeout_millis=5000).redelivery_count() == 0
    c2 = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    c1.close()
    msg = c2.receive(timeout_millis=5000)
    assert msg.data() == b"x"
    assert msg.redelivery_count() == 1


def test_producer_names_are_unique_per_topic(client: pulsar.Client, topic: str) -> None:
    p1 = client.create_producer(topic, producer_name="named")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="named")
    p1.close()
    client.create_producer(topic, producer_name="named").close()


def test_generated_producer_names_stay_unique_when_the_topic_is_loaded_again(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    first = client.create_producer(topic)
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/unload"
    status, _ = http_call(broker.web_service_url, "PUT", path)
    assert status == 204
    first.send(b"after the reload")  # it comes back with the name it was given
    second = client.create_producer(topic)  # and a new one gets another (not ProducerBusy)
    assert second.producer_name() != first.producer_name()
    second.send(b"second")
