"""Dispatch over a managed ledger whose reads wait, as a remote backend's do.

The broker runs with real file-backed ledgers whose reads are made to suspend (``sleep(0)`` or
a random delay of up to 2 ms before and after each read, see ``tests/suspending_reads.py``), so
every dispatch pass goes on in a task while acks, flow permits, seeks, consumers leaving and
topic unloads happen. Each subscription type must still deliver every message, in the order its type
promises, through the official client; a compacted view's reads wait too, and a reader with
``read_compacted`` gets the view then the live log, also when it seeks back while reads wait.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from compaction_helpers import compact, pairs, read_count
from official_client import official_client
from suspending_reads import SuspendingReads

from starquake.broker.embedded import EmbeddedBroker

EARLIEST = pulsar.InitialPosition.Earliest
N = 200


@pytest.fixture(scope="module")
def reads() -> SuspendingReads:
    return SuspendingReads(seed=20261128)


@pytest.fixture(scope="module")
def slow_broker(
    tmp_path_factory: pytest.TempPathFactory, reads: SuspendingReads
) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("suspending") / "data"
    with EmbeddedBroker(data) as running:
        reads.install_on_broker(running.service.storage)
        reads.install_on_compacted(running.service.storage)
        yield running


@pytest.fixture(scope="module")
def client(slow_broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    c = official_client(slow_broker)
    try:
        yield c
    finally:
        c.close()


def _topic(name: str) -> str:
    return f"persistent://public/default/suspending-{name}-{time.monotonic_ns()}"


def _produce(client: pulsar.Client, topic: str, keys: int = 0) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(N):
        key = f"k{i % keys}" if keys else None
        if key is None:
            producer.send_async(str(i).encode(), None)
        else:
            producer.send_async(str(i).encode(), None, partition_key=key)
    producer.flush()
    producer.close()


def _consumers(
    client: pulsar.Client, topic: str, kind: pulsar.ConsumerType, count: int, queue: int
) -> list[pulsar.Consumer]:
    """``count`` consumers of subscription "s" of ``kind``, from the earliest message."""
    return [
        client.subscribe(
            topic, "s", consumer_type=kind, initial_position=EARLIEST, receiver_queue_size=queue
        )
        for _ in range(count)
    ]


def _drain(consumers: list[pulsar.Consumer], want: int, ack: bool = True) -> list[list[int]]:
    """What each consumer receives until ``want`` messages came in total (20 s at most)."""
    got: list[list[int]] = [[] for _ in consumers]
    deadline = time.monotonic() + 20
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=10)
            except pulsar.Timeout:
                continue
            got[index].append(int(msg.data()))
            if ack:
                consumer.acknowledge(msg)
    return got


def test_exclusive_gets_everything_in_order(client: pulsar.Client, reads: SuspendingReads) -> None:
    topic = _topic("exclusive")
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST, receiver_queue_size=7)
    before = reads.suspended
    _produce(client, topic)
    assert _drain([consumer], N) == [list(range(N))]
    assert reads.suspended > before  # the reads did wait


def test_shared_delivers_each_message_once(client: pulsar.Client) -> None:
    topic = _topic("shared")
    consumers = _consumers(client, topic, pulsar.ConsumerType.Shared, 3, 5)
    _produce(client, topic)
    got = _drain(consumers, N)
    assert sorted(v for part in got for v in part) == list(range(N))
    assert all(part == sorted(part) for part in got)


def test_key_shared_keeps_each_key_in_order_on_one_consumer(client: pulsar.Client) -> None:
    topic = _topic("key-shared")
    consumers = _consumers(client, topic, pulsar.ConsumerType.KeyShared, 3, 4)
    _produce(client, topic, keys=13)
    got = _drain(consumers, N)
    assert sorted(v for part in got for v in part) == list(range(N))
    owner: dict[int, int] = {}
    by_key: dict[int, list[int]] = defaultdict(list)
    for index, part in enumerate(got):
        for value in part:
            assert owner.setdefault(value % 13, index) == index
            by_key[value % 13].append(value)
    assert all(values == sorted(values) for values in by_key.values())


def test_failover_hands_the_unacked_rest_to_the_next_consumer(client: pulsar.Client) -> None:
    topic = _topic("failover")

    def subscribe(name: str) -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Failover,
            consumer_name=name,
            initial_position=EARLIEST,
            receiver_queue_size=6,
        )

    first, second = subscribe("a"), subscribe("b")
    _produce(client, topic)
    active, standby = (first, second) if _receives(first) else (second, first)
    taken = _drain([active], 40)[0]  # acknowledged
    active.close()  # its reads may be in flight
    expected = sorted(set(range(N)) - set(taken))
    assert _drain([standby], len(expected))[0] == expected


def _receives(consumer: pulsar.Consumer) -> bool:
    try:
        msg = consumer.receive(timeout_millis=2000)
    except pulsar.Timeout:
        return False
    consumer.negative_acknowledge(msg)
    return True


def test_seek_while_reads_are_in_flight_restarts_in_order(client: pulsar.Client) -> None:
    topic = _topic("seek")
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST, receiver_queue_size=9)
    _produce(client, topic)
    first = consumer.receive(timeout_millis=10_000)
    consumer.acknowledge(first)
    assert _drain([consumer], 60) == [list(range(1, 61))]
    consumer.seek(0)  # by publish time: a search of awaited reads, while others are pending
    assert _drain([consumer], N) == [list(range(N))]


def test_a_consumer_closing_during_reads_loses_nothing(client: pulsar.Client) -> None:
    topic = _topic("close")

    leaving, staying = _consumers(client, topic, pulsar.ConsumerType.Shared, 2, 8)
    _produce(client, topic)
    unacked = _drain([leaving], 20, ack=False)[0]
    leaving.close()
    got = _drain([staying], N)[0]
    assert set(got) == set(range(N)) and set(unacked) <= set(got)


def test_unloading_the_topic_during_reads_loses_nothing(
    client: pulsar.Client, slow_broker: EmbeddedBroker
) -> None:
    topic = _topic("unload")
    consumers = _consumers(client, topic, pulsar.ConsumerType.Shared, 2, 6)
    _produce(client, topic)
    first = _drain(consumers, 50)
    path = "/admin/v2/" + topic.replace("://", "/") + "/unload"
    assert admin_json(slow_broker, "PUT", path)[0] == 204  # dispatch passes are in flight
    got = {v for part in first for v in part}
    deadline = time.monotonic() + 20
    while len(got) < N and time.monotonic() < deadline:  # redeliveries may come too
        got.update(v for part in _drain(consumers, 1) for v in part)
    assert got == set(range(N))


def test_reader_reads_to_the_end(client: pulsar.Client) -> None:
    topic = _topic("reader")
    _produce(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=10)
    values = []
    while reader.has_message_available():  # GET_LAST_MESSAGE_ID: an awaited read
        values.append(int(reader.read_next(timeout_millis=10_000).data()))
    assert values == list(range(N))
    reader.close()


def test_read_compacted_over_waiting_reads_gets_the_view_then_the_log(
    client: pulsar.Client, slow_broker: EmbeddedBroker, reads: SuspendingReads
) -> None:
    topic = _topic("compacted")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(120):
        producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 15}")
    producer.flush()
    compact(slow_broker, topic)
    for i in range(3):
        producer.send(f"after{i}".encode(), partition_key=f"k{i}")
    expected = [(f"k{i % 15}", f"v{i}".encode()) for i in range(105, 120)]
    expected += [(f"k{i}", f"after{i}".encode()) for i in range(3)]
    before = reads.compacted_reads
    reader = client.create_reader(
        topic, pulsar.MessageId.earliest, is_read_compacted=True, receiver_queue_size=2
    )
    assert pairs([reader.read_next(10_000) for _ in range(7)]) == expected[:7]
    reader.seek(pulsar.MessageId.earliest)  # while its next reads are in flight
    assert pairs(read_count(reader, len(expected))) == expected
    assert reads.compacted_reads > before + 5  # the view's reads waited
    reader.close()


def test_read_compacted_failover_hands_the_rest_of_the_view_over(
    client: pulsar.Client, slow_broker: EmbeddedBroker
) -> None:
    topic = _topic("compacted-failover")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(160):
        producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 40}")
    producer.flush()
    compact(slow_broker, topic)
    expected = [(f"k{i % 40}", f"v{i}".encode()) for i in range(120, 160)]

    def subscribe(name: str) -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Failover,
            consumer_name=name,
            initial_position=EARLIEST,
            receiver_queue_size=3,
            is_read_compacted=True,
        )

    first, second = subscribe("a"), subscribe("b")
    try:
        msg = first.receive(2000)
        active, standby = first, second
    except pulsar.Timeout:
        msg = second.receive(10_000)
        active, standby = second, first
    taken = []
    for _ in range(10):
        taken.append((msg.partition_key(), msg.data()))
        active.acknowledge(msg)
        msg = active.receive(10_000)
    assert taken == expected[:10]
    active.close()  # the standby becomes active while the view's reads are in flight
    got = pairs(read_count(standby, len(expected) - 10))
    assert got == expected[10:]
