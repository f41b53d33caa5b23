"""A stored backlog whose entries change size (large batches, then single messages, then batches
again) reaches the consumers whole, whatever the subscription type. The Shared dispatcher (and,
with ``preciseDispatcherFlowControl``, the Exclusive and Failover ones) reads as many entries as
the permits can take at the last read's messages per entry, so these tests cover the estimate
going wrong both ways (too few entries after batches, too many after single messages); Key_Shared
and, by default, Exclusive and Failover read an entry per permit.
The backlog is produced while no consumer is connected, so it is read from the ledger files."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker

BATCH = 150


def _receive_acknowledged(consumer: pulsar.Consumer, count: int, seconds: float) -> list[bytes]:
    """The payloads of up to ``count`` messages received (each acknowledged) within
    ``seconds``: fewer when the broker holds some back, for the caller's assertion to show."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        got.append(msg.data())
        consumer.acknowledge(msg)
    return got


def _produce_backlog(client: pulsar.Client, topic: str) -> list[bytes]:
    """Batches of ``BATCH`` messages and runs of single messages, alternating; returns the
    payloads in log order."""
    batched = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=BATCH,
        batching_max_publish_delay_ms=60_000,
    )
    single = client.create_producer(topic, batching_enabled=False)
    payloads: list[bytes] = []
    for run in range(3):
        for i in range(2 * BATCH):  # two full batches
            payload = f"b{run}-{i}".encode()
            batched.send_async(payload, None)
            payloads.append(payload)
        batched.flush()
        for i in range(40):
            payload = f"s{run}-{i}".encode()
            single.send(payload)
            payloads.append(payload)
    batched.close()
    single.close()
    return payloads


def _consume_backlog(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> tuple[list[bytes], list[bytes]]:
    """Produce the backlog with no consumer connected, then receive it: (sent, received)."""

    def subscribe() -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "backlog",
            consumer_type=sub_type,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=7,
        )

    subscribe().close()
    payloads = _produce_backlog(client, topic)
    consumer = subscribe()
    got = _receive_acknowledged(consumer, len(payloads), 30)
    consumer.close()
    return payloads, got


ALL_TYPES = [
    pulsar.ConsumerType.Exclusive,
    pulsar.ConsumerType.Failover,
    pulsar.ConsumerType.Shared,
    pulsar.ConsumerType.KeyShared,
]
ORDERED = (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover)


@pytest.mark.parametrize("sub_type", ALL_TYPES)
def test_backlog_of_changing_entry_sizes_is_delivered_whole(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    sent, got = _consume_backlog(client, topic, sub_type)
    assert (got if sub_type in ORDERED else sorted(got)) == (
        sent if sub_type in ORDERED else sorted(sent)
    )


@pytest.mark.parametrize("sub_type", ORDERED)
def test_backlog_of_changing_entry_sizes_is_delivered_whole_with_precise_flow_control(
    tmp_path: Path, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    # preciseDispatcherFlowControl=true: the Exclusive and Failover dispatchers too read the
    # entries the permits take at the last read's messages per entry (Pulsar's default,
    # false, reads an entry per permit)
    with EmbeddedBroker(tmp_path / "data", preciseDispatcherFlowControl=True) as broker:
        client = official_client(broker, pulsar.LoggerLevel.Warn)
        try:
            sent, got = _consume_backlog(client, topic, sub_type)
        finally:
            client.close()
    assert got == sent


@pytest.mark.parametrize("sub_type", ALL_TYPES)
def test_one_entry_per_read_under_a_one_byte_read_size(
    tmp_path: Path, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    # dispatcherMaxReadSizeBytes=1: every read returns its first entry only
    with EmbeddedBroker(tmp_path / "data", dispatcherMaxReadSizeBytes=1) as broker:
        client = official_client(broker, pulsar.LoggerLevel.Warn)
        try:
            sent, got = _consume_backlog(client, topic, sub_type)
        finally:
            client.close()
    assert (got if sub_type in ORDERED else sorted(got)) == (
        sent if sub_type in ORDERED else sorted(sent)
    )


def test_a_long_run_of_delayed_messages_after_batches_does_not_hold_back_the_rest(
    client: pulsar.Client, topic: str
) -> None:
    # after a batch the dispatcher reads one entry per few permits; a run of delayed messages
    # (none of them dispatchable) must not use up its passes before the messages after it
    def subscribe() -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "delayed",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=10,
        )

    subscribe().close()
    batched = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=BATCH,
        batching_max_publish_delay_ms=60_000,
    )
    sent = [f"b{i}".encode() for i in range(BATCH)]
    for payload in sent:
        batched.send_async(payload, None)
    batched.flush()
    single = client.create_producer(topic, batching_enabled=False)
    for i in range(200):
        single.send(f"later{i}".encode(), deliver_after=timedelta(hours=1))
    tail = [f"t{i}".encode() for i in range(5)]
    for payload in tail:
        single.send(payload)
    consumer = subscribe()
    got = _receive_acknowledged(consumer, len(sent) + len(tail), 20)
    consumer.close()
    assert sorted(got) == sorted(sent + tail)
