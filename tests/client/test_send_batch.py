"""Producer.send_batch (asyncio extension): one batch entry, explicit sequence ids, dedup."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker
from starquake.client.asyncio import Client, OutgoingMessage
from starquake.client.exceptions import ProducerQueueIsFull


def _msgs(first: int, count: int) -> list[OutgoingMessage]:
    return [
        OutgoingMessage(f"m{i}".encode(), partition_key=f"k{i}", sequence_id=i)
        for i in range(first, first + count)
    ]


def test_a_batch_is_one_entry_and_a_resent_batch_is_stored_once(tmp_path: Path) -> None:
    topic = "persistent://public/default/send-batch"

    async def run(url: str) -> None:
        client = Client(url)
        try:
            producer = await client.create_producer(topic, producer_name="bulk")
            first = await producer.send_batch(_msgs(0, 5))
            assert (first.batch_index(), first.batch_size) == (0, 5)
            await producer.send_batch(_msgs(0, 5))  # the same ids again: a duplicate
            await producer.send_batch(_msgs(5, 2))
            assert producer.last_sequence_id() == 6
            with pytest.raises(ValueError, match="increasing"):
                producer.send_batch([*_msgs(9, 1), *_msgs(8, 1)])
            small = await client.create_producer(topic + "-small", max_pending_messages=3)
            small.send_batch(_msgs(0, 3))
            with pytest.raises(ProducerQueueIsFull):
                small.send_batch(_msgs(3, 1))
        finally:
            await client.close()

    with EmbeddedBroker(tmp_path / "data", brokerDeduplicationEnabled=True) as broker:
        asyncio.run(run(broker.service_url))
        official = pulsar.Client(broker.service_url)
        try:
            reader = official.create_reader(topic, pulsar.MessageId.earliest)
            got = []
            while reader.has_message_available():
                msg = reader.read_next(5000)
                got.append((msg.data(), msg.partition_key(), msg.message_id().entry_id()))
        finally:
            official.close()
    assert [g[0] for g in got] == [f"m{i}".encode() for i in range(7)]
    assert [g[1] for g in got] == [f"k{i}" for i in range(7)]
    assert len({g[2] for g in got}) == 2  # two entries: the batch of 5, the batch of 2
