"""Key_Shared through the official client: key ownership, ordering, sticky ranges, stats."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.selectors import slot_of, sticky_key_hash

KEY_SHARED = pulsar.ConsumerType.KeyShared
EARLIEST = pulsar.InitialPosition.Earliest


def _key_shared(client: pulsar.Client, topic: str, name: str, **kwargs: object) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "ks",
        consumer_type=KEY_SHARED,
        consumer_name=name,
        initial_position=EARLIEST,
        receiver_queue_size=kwargs.pop("receiver_queue_size", 50),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def test_each_key_goes_to_one_consumer_in_order(client: pulsar.Client, topic: str) -> None:
    consumers = [_key_shared(client, topic, f"c{i}") for i in range(3)]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(30)]
    for i in range(300):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % len(keys)])
    producer.flush()
    owner: dict[str, int] = {}
    seen: dict[str, list[int]] = defaultdict(list)
    total = 0
    deadline = time.monotonic() + 20
    while total < 300 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=20)
            except pulsar.Timeout:
                continue
            key = msg.partition_key()
            assert owner.setdefault(key, index) == index, f"{key} went to two consumers"
            seen[key].append(int(msg.data()))
            consumer.acknowledge(msg)
            total += 1
    assert total == 300
    for key, values in seen.items():
        assert values == sorted(values), key
    assert len(set(owner.values())) > 1


def test_keys_stay_ordered_while_consumers_join_and_leave(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"k{k}" for k in range(16)]
    count = 1200
    lock = threading.Lock()
    processed: dict[str, list[int]] = defaultdict(list)
    stop = threading.Event()

    def run(consumer: pulsar.Consumer, until: threading.Event) -> None:
        while not until.is_set():
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            with lock:
                processed[msg.partition_key()].append(int(msg.data()))
            consumer.acknowledge(msg)
        consumer.close()

    workers: list[tuple[threading.Thread, threading.Event]] = []

    def start(name: str) -> None:
        until = threading.Event()
        consumer = _key_shared(client, topic, name, receiver_queue_size=20)
        thread = threading.Thread(target=run, args=(consumer, until))
        thread.start()
        workers.append((thread, until))

    start("a")
    start("b")
    for i in range(count):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % len(keys)])
        if i == 300:
            start("c")
        if i == 600:
            thread, until = workers[0]
            until.set()
            thread.join()
        if i == 900:
            start("d")
    producer.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            done = sum(len(v) for v in processed.values())
        if done >= count:
            break
        time.sleep(0.05)
    stop.set()
    for thread, until in workers:
        until.set()
        thread.join()
    for key, values in processed.items():
        distinct = list(dict.fromkeys(values))
        assert distinct == sorted(distinct), f"{key} out of order: {values}"
    assert sorted({v for vs in processed.values() for v in vs}) == list(range(count))


def test_sticky_ranges(client: pulsar.Client, topic: str) -> None:
    low = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]
    )
    high = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(32768, 65535)]
    )
    c_low = _key_shared(client, topic, "low", key_shared_policy=low)
    c_high = _key_shared(client, topic, "high", key_shared_policy=high)
    overlapping = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(100, 200)]
    )
    with pytest.raises(pulsar.PulsarException):
        _key_shared(client, topic, "bad", key_shared_policy=overlapping)
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(40)]
    for key in keys:
        producer.send(key.encode(), partition_key=key)
    for consumer, in_range in ((c_low, range(0, 32768)), (c_high, range(32768, 65536))):
        while True:
            try:
                msg = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                break
            assert slot_of(sticky_key_hash(msg.partition_key().encode())) in in_range
            keys.remove(msg.partition_key())
            consumer.acknowledge(msg)
    assert keys == []


def test_mode_mismatch_is_refused(client: pulsar.Client, topic: str) -> None:
    _key_shared(client, topic, "auto")
    sticky = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 10)]
    )
    with pytest.raises(pulsar.PulsarException):
        _key_shared(client, topic, "sticky", key_shared_policy=sticky)


def test_stats_show_hash_ranges_and_joining_position(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    first = _key_shared(client, topic, "first")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"{i}".encode(), partition_key=f"k{i}")
    msg = first.receive(timeout_millis=5000)
    assert msg is not None
    late = _key_shared(client, topic, "late")
    stats = broker.call(_stats(broker, topic))
    consumers = {c["consumerName"]: c for c in stats["subscriptions"]["ks"]["consumers"]}
    assert len(consumers["first"]["keyHashRanges"]) >= 100
    assert consumers["first"]["keyHashRanges"][0].startswith("[")
    assert "readPositionWhenJoining" in consumers["late"]
    assert "readPositionWhenJoining" not in consumers["first"]
    late.close()


async def _stats(broker: EmbeddedBroker, topic: str) -> dict[str, object]:
    return broker.service.topics[topic].stats()


def test_cumulative_ack_is_refused(client: pulsar.Client, topic: str) -> None:
    consumer = _key_shared(client, topic, "c")
    producer = client.create_producer(topic)
    producer.send(b"x", partition_key="k")
    msg = consumer.receive(timeout_millis=5000)
    with pytest.raises(pulsar.PulsarException):
        consumer.acknowledge_cumulative(msg)


def test_batches_follow_their_key(client: pulsar.Client, topic: str) -> None:
    consumers = [_key_shared(client, topic, f"c{i}") for i in range(2)]
    producer = client.create_producer(
        topic, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased
    )
    for i in range(200):
        producer.send_async(f"{i}".encode(), None, partition_key=f"key-{i % 10}")
    producer.flush()
    owner: dict[str, int] = {}
    total = 0
    deadline = time.monotonic() + 20
    while total < 200 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=20)
            except pulsar.Timeout:
                continue
            assert owner.setdefault(msg.partition_key(), index) == index
            consumer.acknowledge(msg)
            total += 1
    assert total == 200


def test_auto_split_hash_ranges_selector(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(
        tmp_path / "data", subscriptionKeySharedUseConsistentHashing=False
    ) as broker:
        client = pulsar.Client(broker.service_url)
        try:
            first = _key_shared(client, topic, "c1")
            second = _key_shared(client, topic, "c2")
            stats = broker.call(_stats(broker, topic))
            ranges = {
                c["consumerName"]: c["keyHashRanges"]
                for c in stats["subscriptions"]["ks"]["consumers"]
            }
            # auto-split (Pulsar's default): a newcomer takes the lower half of the largest range
            assert ranges == {"c1": ["[32768, 65535]"], "c2": ["[0, 32767]"]}
            producer = client.create_producer(topic, batching_enabled=False)
            keys = [f"key-{i}" for i in range(30)]
            for key in keys:
                producer.send(key.encode(), partition_key=key)
            for consumer, low in ((second, True), (first, False)):
                while True:
                    try:
                        msg = consumer.receive(timeout_millis=500)
                    except pulsar.Timeout:
                        break
                    slot = slot_of(sticky_key_hash(msg.partition_key().encode()))
                    assert (slot < 32768) == low
                    keys.remove(msg.partition_key())
            assert keys == []
        finally:
            client.close()
