"""The wait after a Failover subscription's active consumer changes
(``activeConsumerFailoverDelayTimeMillis``, Pulsar's default 1 s).

As in Pulsar, the dispatcher then waits before it rewinds to the first unacknowledged message,
tells the consumers which one is active and sends to it: the consumer that was active has that
time to acknowledge what it received, which the new one would otherwise get again. The first
consumer of a subscription waits too; Exclusive subscriptions never do.
"""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest
from official_client import drain
from raw_connection import RawConnection, T
from txn_raw import connected

from starquake.broker.config import BrokerConfig
from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import client_commands
from starquake.protocol.enums import SubType


def _produce(broker: EmbeddedBroker, topic: str, first: int, count: int) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(first, first + count):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()


def _subscribe_and_flow(cnx: RawConnection, topic: str, sub_type: SubType) -> list[T]:
    """Subscribe consumer 1, grant it 100 permits; what the broker sent once it settled."""
    cnx.subscribe(topic, "sub", sub_type, 1)
    cnx.send_command(client_commands.flow(1, 100))
    return cnx.settled()


def _types(frames: list[T]) -> list[int]:
    return [frame.type for frame in frames]


def test_the_default_is_pulsars() -> None:
    assert BrokerConfig().activeConsumerFailoverDelayTimeMillis == 1000


def test_a_failover_consumer_is_told_and_served_only_when_the_wait_ends(
    tmp_path: Path, topic: str
) -> None:
    with EmbeddedBroker(tmp_path / "data", activeConsumerFailoverDelayTimeMillis=500) as broker:
        _produce(broker, topic, 0, 3)
        with connected(broker.broker_port) as cnx:
            assert _subscribe_and_flow(cnx, topic, SubType.Failover) == []
            # then, within the wait's end and a margin: the notice first, then the messages
            change = cnx.next(timeout=30)
            assert (
                change.type == T.ACTIVE_CONSUMER_CHANGE and change.active_consumer_change.is_active
            )
            assert _types([cnx.next(timeout=30) for _ in range(3)]) == [T.MESSAGE] * 3


@pytest.mark.parametrize(
    ("sub_type", "delay_ms", "served"),
    [
        (SubType.Failover, 60_000, False),  # within the wait: nothing
        (SubType.Failover, 0, True),  # no wait: at once
        (SubType.Exclusive, 60_000, True),  # Exclusive never waits
    ],
    ids=["failover-waits", "failover-no-wait", "exclusive"],
)
def test_who_waits(
    tmp_path: Path, topic: str, sub_type: SubType, delay_ms: int, served: bool
) -> None:
    with EmbeddedBroker(
        tmp_path / "data", activeConsumerFailoverDelayTimeMillis=delay_ms
    ) as broker:
        _produce(broker, topic, 0, 3)
        with connected(broker.broker_port) as cnx:
            frames = _subscribe_and_flow(cnx, topic, sub_type)
    assert _types(frames).count(T.MESSAGE) == (3 if served else 0)


def test_what_the_previous_active_consumer_acknowledges_during_the_wait_is_not_sent_again(
    tmp_path: Path, topic: str
) -> None:
    """One partition; consumer "b" subscribes first and receives ten messages without
    acknowledging them; consumer "a" subscribes and, sorting first, becomes the partition's
    active consumer; "b" acknowledges the ten during the wait. "a" then gets only what came
    after them. With no wait, "a" is sent the ten at once, before "b" acknowledges them."""
    for delay_ms in (3000, 0):
        name = f"{topic}-{delay_ms}"
        with EmbeddedBroker(
            tmp_path / f"data-{delay_ms}", activeConsumerFailoverDelayTimeMillis=delay_ms
        ) as broker:
            broker.create_partitioned_topic(name, 1)
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
            try:
                _produce(broker, name, 0, 10)
                subscribe = {
                    "subscription_name": "fo",
                    "consumer_type": pulsar.ConsumerType.Failover,
                    "initial_position": pulsar.InitialPosition.Earliest,
                }
                b = client.subscribe(name, consumer_name="b", **subscribe)
                first = [b.receive(timeout_millis=30_000) for _ in range(10)]
                assert [m.data() for m in first] == [f"m{i}".encode() for i in range(10)]
                a = client.subscribe(name, consumer_name="a", **subscribe)
                if delay_ms:
                    for msg in first:
                        b.acknowledge(msg)
                    _produce(broker, name, 10, 5)
                    got = drain(a, 1000, first_within_ms=30_000)
                    assert got == [f"m{i}".encode() for i in range(10, 15)]
                else:
                    # sent again at once: "a" gets the first of them while "b" holds them all
                    assert a.receive(timeout_millis=30_000).data() == b"m0"
            finally:
                client.close()


def test_a_consumer_that_joins_without_changing_the_active_one_alone_is_told(
    tmp_path: Path, topic: str
) -> None:
    """As in Pulsar: the second consumer of a non-partitioned topic's Failover subscription
    does not change the active consumer (the first that subscribed); it is told that it is not
    active, and the first is told nothing again."""
    with (
        EmbeddedBroker(tmp_path / "data", activeConsumerFailoverDelayTimeMillis=0) as broker,
        connected(broker.broker_port) as first,
        connected(broker.broker_port) as second,
    ):
        first.subscribe(topic, "sub", SubType.Failover, 1)
        assert first.settled() == []
        told = second.subscribe(topic, "sub", SubType.Failover, 2) + second.settled()
        assert [(f.type, f.active_consumer_change.is_active) for f in told] == [
            (T.ACTIVE_CONSUMER_CHANGE, False)
        ]
        assert first.settled() == []
