"""Ack timeout, negative-ack backoff, retry letter topic, dead letters (our client only).

The official Python client has no backoff, tick duration or ``reconsume_later``, and refuses ack
timeouts under 10 s; to keep these tests fast the 10 s floor is lowered here through
``_timeouts.MIN_UNACKED_MESSAGES_TIMEOUT_MS`` (the shared scenarios check the floor itself).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from admin_http import admin_json
from official_client import subscribe_earliest
from polling import wait_for

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.client.consumer import _timeouts


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[sq.Client]:
    c = sq.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def fast_ack_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_timeouts, "MIN_UNACKED_MESSAGES_TIMEOUT_MS", 0)


def test_multiplier_backoff_values() -> None:
    backoff = sq.MultiplierRedeliveryBackoff(1000, 60_000, 2)
    assert [backoff.next(n) for n in range(9)] == [
        1000,
        2000,
        4000,
        8000,
        16000,
        32000,
        60000,
        60000,
        60000,
    ]
    assert backoff.next(-1) == 1000
    with pytest.raises(ValueError):
        sq.MultiplierRedeliveryBackoff(1000, 500, 2)
    with pytest.raises(ValueError):
        sq.MultiplierRedeliveryBackoff(1000, 5000, 1)


def test_negative_ack_backoff(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        consumer_type=sq.ConsumerType.Shared,
        negative_ack_redelivery_backoff=sq.MultiplierRedeliveryBackoff(100, 400, 2),
    )
    client.create_producer(topic).send(b"again")
    arrivals = []
    counts = []
    for _ in range(5):
        msg = consumer.receive(5000)
        arrivals.append(time.monotonic())
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2, 3, 4]
    waits = [b - a for a, b in itertools.pairwise(arrivals)]
    # next(count): 100, 200, 400, 400 ms
    for waited, expected in zip(waits, [0.1, 0.2, 0.4, 0.4], strict=True):
        assert expected * 0.8 <= waited < expected + 0.5, waits


@pytest.mark.usefixtures("fast_ack_timeout")
def test_ack_timeout_shared_redelivers_only_unacked(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        consumer_type=sq.ConsumerType.Shared,
        unacked_messages_timeout_ms=300,
        tick_duration_ms=50,
    )
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    msgs = [consumer.receive(5000) for _ in range(3)]
    start = time.monotonic()
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    again = consumer.receive(5000)
    assert 0.25 <= time.monotonic() - start < 2
    assert again.data() == b"m1"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)
    with pytest.raises(sq.Timeout):
        consumer.receive(700)


@pytest.mark.usefixtures("fast_ack_timeout")
def test_ack_timeout_exclusive_redelivers_all(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq, client, topic, unacked_messages_timeout_ms=300, tick_duration_ms=50
    )
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    first = [consumer.receive(5000).data() for _ in range(3)]
    again = [consumer.receive(5000).data() for _ in range(3)]
    assert first == again == [b"m0", b"m1", b"m2"]


@pytest.mark.usefixtures("fast_ack_timeout")
def test_ack_timeout_backoff(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        consumer_type=sq.ConsumerType.Shared,
        unacked_messages_timeout_ms=100,
        tick_duration_ms=20,
        ack_timeout_redelivery_backoff=sq.MultiplierRedeliveryBackoff(100, 800, 4),
    )
    client.create_producer(topic).send(b"slow")
    arrivals = []
    for _ in range(3):
        consumer.receive(5000)
        arrivals.append(time.monotonic())
    waits = [b - a for a, b in itertools.pairwise(arrivals)]
    # timeout + backoff(count): 100 + 100, then 100 + 400 ms
    assert 0.15 <= waits[0] < 0.7, waits
    assert 0.4 <= waits[1] < 1.2, waits


@pytest.mark.usefixtures("fast_ack_timeout")
def test_ack_timeout_feeds_dead_letter(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        consumer_type=sq.ConsumerType.Shared,
        unacked_messages_timeout_ms=200,
        tick_duration_ms=50,
        dead_letter_policy=sq.ConsumerDeadLetterPolicy(1),
    )
    dlq = subscribe_earliest(sq, client, f"{topic}-sub-DLQ", "dlq")
    client.create_producer(topic).send(b"ignored")
    assert [consumer.receive(5000).redelivery_count() for _ in range(2)] == [0, 1]
    assert dlq.receive(5000).data() == b"ignored"
    with pytest.raises(sq.Timeout):
        consumer.receive(600)


def test_dead_letter_initial_subscription(
    broker: EmbeddedBroker, client: sq.Client, topic: str
) -> None:
    # Our broker ignores CommandProducer.initial_subscription_name; the client then creates
    # the subscription itself before publishing, so it sees the dead letter.
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        consumer_type=sq.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=sq.ConsumerDeadLetterPolicy(
            1, dead_letter_topic=f"{topic}-dead", initial_subscription_name="init"
        ),
    )
    client.create_producer(topic).send(b"x")
    for _ in range(2):
        consumer.negative_acknowledge(consumer.receive(5000))
    dead_subscriptions = "/admin/v2/" + f"{topic}-dead".replace("://", "/") + "/subscriptions"
    wait_for(
        lambda: admin_json(broker, "GET", dead_subscriptions) == (200, ["init"]),
        "the dead letter topic's initial subscription",
    )
    late = client.subscribe(f"{topic}-dead", "init")  # Latest: only works if it existed
    assert late.receive(5000).data() == b"x"


def test_dead_letter_not_used_on_exclusive(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=sq.ConsumerDeadLetterPolicy(1),
    )
    client.create_producer(topic).send(b"x")
    for _ in range(3):  # Exclusive: the broker does not count redeliveries; no dead letters
        msg = consumer.receive(5000)
        consumer.negative_acknowledge(msg)
    assert consumer.receive(5000).data() == b"x"


def test_reconsume_later_properties_and_dead_letter(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq,
        client,
        topic,
        consumer_type=sq.ConsumerType.Shared,
        enable_retry=True,
        dead_letter_policy=sq.ConsumerDeadLetterPolicy(2),
    )
    dlq = subscribe_earliest(sq, client, f"{topic}-sub-DLQ", "dlq")
    producer = client.create_producer(topic)
    original = producer.send(b"work", properties={"a": "1"}, partition_key="pk")
    msg = consumer.receive(5000)
    consumer.reconsume_later(msg, 100, {"why": "busy"})
    for times in (1, 2):
        msg = consumer.receive(5000)
        props = msg.properties()
        assert msg.data() == b"work"
        assert msg.partition_key() == "pk"
        assert msg.topic_name() == f"{topic}-sub-RETRY"
        assert props["RECONSUMETIMES"] == str(times)
        assert props["REAL_TOPIC"] == topic
        assert props["ORIGIN_MESSAGE_ID"] == str(original)
        assert props["a"] == "1"
        assert props["why"] == "busy"
        assert props["DELAY_TIME"] == ("100" if times == 1 else "50")
        consumer.reconsume_later(msg, timedelta(milliseconds=50))
    dead = dlq.receive(5000)  # RECONSUMETIMES 3 > max_redeliver_count 2
    assert dead.data() == b"work"
    assert dead.properties()["RECONSUMETIMES"] == "3"
    assert dead.properties()["REAL_TOPIC"] == topic
    with pytest.raises(sq.Timeout):
        consumer.receive(500)
    consumer.close()
    again = subscribe_earliest(
        sq, client, topic, consumer_type=sq.ConsumerType.Shared, enable_retry=True
    )
    with pytest.raises(sq.Timeout):  # the originals (topic and retry topic) were acknowledged
        again.receive(500)


def test_reconsume_later_needs_retry(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(sq, client, topic)
    client.create_producer(topic).send(b"x")
    msg = consumer.receive(5000)
    with pytest.raises(sq.InvalidConfiguration):
        consumer.reconsume_later(msg, 100)


def test_reconsume_later_waits_for_the_delay(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq, client, topic, consumer_type=sq.ConsumerType.Shared, enable_retry=True
    )
    client.create_producer(topic).send(b"later")
    msg = consumer.receive(5000)
    start = time.monotonic()
    consumer.reconsume_later(msg, 2500)
    again = consumer.receive(8000)
    waited = time.monotonic() - start
    assert again.properties()["DELAY_TIME"] == "2500"
    # Pulsar's non-strict delayed delivery may deliver up to one tick (1 s by default) early.
    assert 1.4 <= waited < 5, waited


def test_batch_receive_byte_limit(client: sq.Client, topic: str) -> None:
    consumer = subscribe_earliest(
        sq, client, topic, batch_receive_policy=sq.ConsumerBatchReceivePolicy(-1, 25, 10_000)
    )
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(b"x" * 10 + bytes([i]))  # 11 bytes each
    # handed over once 25 bytes are queued (3 messages), holding no more than 25 (2 messages)
    batches = [consumer.batch_receive() for _ in range(2)]
    big = b"y" * 100  # larger than the limit alone: still handed over, in a batch of its own
    producer.send(big)
    batches += [consumer.batch_receive(), consumer.batch_receive()]
    assert [[m.data() for m in batch] for batch in batches] == [
        [b"x" * 10 + bytes([0]), b"x" * 10 + bytes([1])],
        [b"x" * 10 + bytes([2]), b"x" * 10 + bytes([3])],
        [b"x" * 10 + bytes([4]), b"x" * 10 + bytes([5])],
        [big],
    ]
