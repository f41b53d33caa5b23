"""Topic-level policies take effect on live topics, without a restart, seen through the official
client: message TTL (over the namespace's), unacknowledged-message limits, deduplication,
delayed delivery, and producer/consumer limits."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json as _call
from official_client import official_client, receive_until_quiet
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/namespaces/public/default"
EARLIEST = pulsar.InitialPosition.Earliest
SHARED = pulsar.ConsumerType.Shared


def _local() -> str:
    return f"live-{uuid.uuid4().hex[:8]}"


def _admin(local: str) -> str:
    return f"/admin/v2/persistent/public/default/{local}"


def _backlog(broker: EmbeddedBroker, local: str, subscription: str) -> int:
    status, stats = _call(broker, "GET", f"{_admin(local)}/stats")
    assert status == 200
    return int(stats["subscriptions"][subscription]["msgBacklog"])


@pytest.fixture
def live_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    # expiry checked every 0.3 s; one entry per read, so the unacked limits stop dispatch exactly
    with EmbeddedBroker(
        tmp_path / "data",
        messageExpiryCheckIntervalInMinutes=0.005,
        dispatcherMaxReadBatchSize=1,
        delayedDeliveryTickTimeMillis=100,
    ) as broker:
        yield broker


@pytest.fixture
def client(live_broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    c = official_client(live_broker)
    try:
        yield c
    finally:
        c.close()


def test_topic_ttl_overrides_the_namespace_ttl(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    assert _call(live_broker, "POST", f"{NS}/messageTTL", 3600)[0] == 204
    short, other, probe = _local(), _local(), _local()
    producers = {}
    for local in (other, short, probe):  # other's messages are the oldest
        client.subscribe(f"public/default/{local}", "s", initial_position=EARLIEST).close()
        producers[local] = client.create_producer(f"public/default/{local}", batching_enabled=False)
    for local in (other, short):
        for i in range(5):
            producers[local].send(f"m{i}".encode())

    assert _call(live_broker, "POST", f"{_admin(short)}/messageTTL?messageTTL=1")[0] == 204
    wait_for(lambda: _backlog(live_broker, short, "s") == 0, "the topic's 1 s TTL")
    # Older than a second now, as other's are: the namespace's hour still applies there.
    assert _backlog(live_broker, other, "s") == 5
    status, stats = _call(live_broker, "GET", f"{_admin(short)}/stats")
    assert status == 200 and stats["subscriptions"]["s"]["msgBacklog"] == 0

    # without the topic's TTL, the namespace's hour applies again
    assert _call(live_broker, "DELETE", f"{_admin(short)}/messageTTL")[0] == 204
    producers[short].send(b"late")
    # A probe with a 1 s TTL, sent after "late": once it expires, "late" is older than a second
    # and the expiry check that moved the probe (one check covers every topic) kept it.
    assert _call(live_broker, "POST", f"{_admin(probe)}/messageTTL?messageTTL=1")[0] == 204
    producers[probe].send(b"probe")
    wait_for(lambda: _backlog(live_broker, probe, "s") == 0, "the probe's 1 s TTL")
    assert _backlog(live_broker, short, "s") == 1


def test_topic_max_unacked_on_a_live_consumer(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = _local()
    topic = f"public/default/{local}"
    consumer = client.subscribe(topic, "s", consumer_type=SHARED, receiver_queue_size=100)
    producer = client.create_producer(topic, batching_enabled=False)
    # the consumer's dispatcher exists (broker limit 50000): the policy reaches it live
    assert _call(live_broker, "POST", f"{_admin(local)}/maxUnackedMessagesOnConsumer", 5)[0] == 204
    for i in range(20):
        producer.send(f"m{i}".encode())
    first = receive_until_quiet(consumer, 700)
    assert len(first) == 5
    for message in first[:4]:
        consumer.acknowledge(message)
    # 1 left unacknowledged: under half of the limit, so dispatch resumes up to 5 again
    second = receive_until_quiet(consumer, 700)
    assert len(second) == 4

    # removing it restores the broker's limit: the blocked consumer gets the rest at once
    assert _call(live_broker, "DELETE", f"{_admin(local)}/maxUnackedMessagesOnConsumer")[0] == 204
    rest = receive_until_quiet(consumer, 700)
    assert len(rest) == 11
    got = [m.data() for m in first + second + rest]
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))


def test_namespace_max_unacked_per_subscription_is_live(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = f"public/default/{_local()}"
    consumers = [
        client.subscribe(topic, "s", consumer_type=SHARED, receiver_queue_size=100)
        for _ in range(2)
    ]
    assert _call(live_broker, "POST", f"{NS}/maxUnackedMessagesPerSubscription", 6)[0] == 204
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    received = sum(len(receive_until_quiet(c, 500)) for c in consumers)
    assert received == 6


def test_topic_dedup_on_a_live_producer(live_broker: EmbeddedBroker, client: pulsar.Client) -> None:
    local = _local()
    topic = f"public/default/{local}"
    producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
    producer.send(b"a", sequence_id=1)
    producer.send(b"a-again", sequence_id=1)  # no deduplication yet: stored

    assert _call(live_broker, "POST", f"{_admin(local)}/deduplicationEnabled", True)[0] == 204
    status, applied = _call(live_broker, "GET", f"{_admin(local)}/deduplicationEnabled?applied=1")
    assert status == 200 and applied is True
    # switched in place: the topic replayed its log, so sequence id 2 is new and then known
    producer.send(b"b", sequence_id=2)
    duplicate = producer.send(b"b-again", sequence_id=2)
    assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)  # Pulsar's receipt
    producer.send(b"c", sequence_id=3)

    assert _call(live_broker, "DELETE", f"{_admin(local)}/deduplicationEnabled")[0] == 204
    producer.send(b"c-again", sequence_id=3)  # off again: stored

    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(5000).data())
    assert seen == [b"a", b"a-again", b"b", b"c", b"c-again"]


def _loaded(broker: EmbeddedBroker, local: str) -> dict[str, Any]:
    async def snapshot() -> dict[str, Any]:
        return {n: t for n, t in broker.service.topics.items() if local in n}

    return broker.call(snapshot())


def _consumer_ids(broker: EmbeddedBroker, local: str) -> set[tuple[str, int, int]]:
    """(topic, consumer id, object identity) of every consumer the broker has on the topic's
    partitions: a client that reconnects keeps its consumer id but gets a new broker object."""
    return {
        (name, consumer.consumer_id, id(consumer))
        for name, topic in _loaded(broker, local).items()
        for subscription in topic.subscriptions.values()
        for consumer in subscription.consumers
    }


def test_partitioned_topic_dedup_switches_every_partition_in_place(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = _local()
    assert _call(live_broker, "PUT", f"{_admin(local)}/partitions", 2)[0] == 204
    consumer = client.subscribe(f"public/default/{local}", "s", initial_position=EARLIEST)
    producer = client.create_producer(
        f"public/default/{local}", producer_name="pp", batching_enabled=False
    )
    for i in range(4):
        producer.send(f"m{i}".encode(), partition_key=str(i))

    before = _loaded(live_broker, local)
    consumers = _consumer_ids(live_broker, local)
    assert len(before) == 2 and len(consumers) == 2
    assert not any(t.dedup.enabled for t in before.values())
    assert _call(live_broker, "POST", f"{_admin(local)}/deduplicationEnabled", True)[0] == 204
    # the same topics, with the same consumers: nothing was unloaded or disconnected
    after = _loaded(live_broker, local)
    assert set(after) == set(before) and all(t is before[n] for n, t in after.items())
    assert all(t.dedup.ready for t in after.values())
    assert _consumer_ids(live_broker, local) == consumers
    for i in range(4, 8):
        producer.send(f"m{i}".encode(), partition_key=str(i))
    received = sorted(consumer.receive(5000).data() for _ in range(8))
    assert received == sorted(f"m{i}".encode() for i in range(8))
    assert _consumer_ids(live_broker, local) == consumers


def test_namespace_dedup_switch_keeps_readers_connected(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    """A reader in the middle of has_message_available() while deduplication is switched on and
    off for the namespace keeps working: the broker does not unload the topic."""
    local = _local()
    topic = f"public/default/{local}"
    producer = client.create_producer(topic, producer_name="w", batching_enabled=False)
    producer.send(b"first", sequence_id=5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    consumers = _consumer_ids(live_broker, local)
    try:
        for enabled in (True, False, True):
            assert _call(live_broker, "POST", f"{NS}/deduplication", enabled)[0] == 204
            assert reader.has_message_available()
            assert _consumer_ids(live_broker, local) == consumers
        # the replayed log knows the producer's last sequence id: an old one is a duplicate
        receipt = producer.send(b"again", sequence_id=5)
        assert (receipt.ledger_id(), receipt.entry_id()) == (-1, -1)
        producer.send(b"second", sequence_id=6)
        seen = []
        while reader.has_message_available():
            seen.append(reader.read_next(5000).data())
        assert seen == [b"first", b"second"]
        assert _consumer_ids(live_broker, local) == consumers
    finally:
        assert _call(live_broker, "DELETE", f"{NS}/deduplication")[0] == 204


def test_dedup_switched_off_drops_the_stored_snapshot(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = _local()
    topic = f"public/default/{local}"
    producer = client.create_producer(topic, producer_name="s", batching_enabled=False)
    assert _call(live_broker, "POST", f"{_admin(local)}/deduplicationEnabled", True)[0] == 204
    producer.send(b"x", sequence_id=1)

    async def stored_snapshot() -> bytes | None:
        service = live_broker.service
        loaded = service.topics[f"persistent://{topic}"]
        key = loaded.dedup.metadata_key(loaded.full_name)
        await asyncio.to_thread(service.metadata.put, key, loaded.dedup.take_snapshot()[1])
        return service.metadata.get(key)

    assert live_broker.call(stored_snapshot()) is not None
    assert _call(live_broker, "POST", f"{_admin(local)}/deduplicationEnabled", False)[0] == 204

    async def snapshot_gone() -> bool:
        service = live_broker.service
        loaded = service.topics[f"persistent://{topic}"]
        return service.metadata.get(loaded.dedup.metadata_key(loaded.full_name)) is None

    wait_for(lambda: live_broker.call(snapshot_gone()), "the snapshot deleted")  # written later
    # off: the same sequence id is stored again
    receipt = producer.send(b"x-again", sequence_id=1)
    assert receipt.entry_id() >= 0


def test_delayed_delivery_turned_off_and_on_live(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = _local()
    topic = f"public/default/{local}"
    consumer = client.subscribe(topic, "s", consumer_type=SHARED)
    producer = client.create_producer(topic, batching_enabled=False)
    later = timedelta(seconds=60)

    producer.send(b"held", deliver_after=later)
    assert receive_until_quiet(consumer, 800) == []  # delayed delivery on: it waits
    off = {"active": False, "tickTime": 100}
    assert _call(live_broker, "POST", f"{_admin(local)}/delayedDelivery", off)[0] == 204
    released = receive_until_quiet(consumer, 1500)
    assert [m.data() for m in released] == [b"held"]  # handed back when turned off
    producer.send(b"at-once", deliver_after=later)
    assert [m.data() for m in receive_until_quiet(consumer, 1500)] == [b"at-once"]

    assert _call(live_broker, "DELETE", f"{_admin(local)}/delayedDelivery")[0] == 204
    producer.send(b"waits-again", deliver_after=later)
    producer.send(b"now")
    assert [m.data() for m in receive_until_quiet(consumer, 1000)] == [b"now"]


def test_topic_producer_and_consumer_limits_override_the_namespace(
    live_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = _local()
    topic = f"public/default/{local}"
    assert _call(live_broker, "POST", f"{NS}/maxProducersPerTopic", 5)[0] == 204
    assert _call(live_broker, "POST", f"{NS}/maxConsumersPerTopic", 5)[0] == 204
    client.create_producer(topic)
    assert _call(live_broker, "POST", f"{_admin(local)}/maxProducers", 1)[0] == 204
    assert _call(live_broker, "POST", f"{_admin(local)}/maxConsumers", 1)[0] == 204
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    client.subscribe(topic, "a")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "b")
    # 0 on the topic: no limit there, whatever the namespace says
    assert _call(live_broker, "POST", f"{_admin(local)}/maxProducers", 0)[0] == 204
    for _ in range(6):
        client.create_producer(topic)


def test_max_delivery_delay_refuses_longer_delays(
    live_broker: EmbeddedBroker, client: pulsar.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="starquake.broker")
    local = _local()
    topic = f"public/default/{local}"
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"far", deliver_after=timedelta(hours=1))  # no limit yet
    limit = {"active": True, "tickTime": 100, "maxDeliveryDelayInMillis": 10_000}
    assert _call(live_broker, "POST", f"{_admin(local)}/delayedDelivery", limit)[0] == 204
    # Refused with NotAllowed, as Pulsar refuses it. The C++ client has no handler for that
    # send error: it reconnects and resends, refused each time, until it is closed (its own
    # client: the reconnections would disturb the other producer's connection).
    other = official_client(live_broker)
    results: list[pulsar.Result] = []
    refused = other.create_producer(topic, batching_enabled=False)
    refused.send_async(
        b"too-far", lambda result, _id: results.append(result), deliver_after=timedelta(minutes=1)
    )
    created = f"producer {refused.producer_name()} created on"
    # created again: the send was refused and the client reconnected to resend it
    wait_for(
        lambda: sum(created in r.getMessage() for r in caplog.records) >= 2,
        "the refused producer to reconnect",
    )
    other.close()
    assert pulsar.Result.Ok not in results
    producer.send(b"near", deliver_after=timedelta(seconds=5))
    producer.send(b"now")
    assert _call(live_broker, "DELETE", f"{_admin(local)}/delayedDelivery")[0] == 204
    producer.send(b"far-again", deliver_after=timedelta(hours=1))

    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(5000).data())
    assert seen == [b"far", b"near", b"now", b"far-again"]
