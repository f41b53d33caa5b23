"""A bulk reader's queue with a byte budget: permits count messages, so for small messages
the queue grows to what the budget holds (the broker then sees that many permits), and for
large ones it stays at the ``receiver_queue_size`` asked for; without a budget it is fixed."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker
from starquake.client.asyncio import Client
from starquake.client.bulk import EARLIEST, BulkReader

SMALL = "persistent://public/default/bulk-budget-small"
LARGE = "persistent://public/default/bulk-budget-large"
BATCHES = 20
PER_BATCH = 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("budget") / "data"
    with EmbeddedBroker(data) as broker:
        client = pulsar.Client(broker.service_url)
        producer = client.create_producer(
            SMALL,
            batching_enabled=True,
            batching_max_messages=PER_BATCH,
            batching_max_publish_delay_ms=60_000,
            block_if_queue_full=True,
        )
        for i in range(BATCHES * PER_BATCH):
            producer.send_async(i.to_bytes(8, "big"), None)
        producer.flush()
        large = client.create_producer(LARGE, batching_enabled=False)
        for i in range(30):
            large.send(bytes([i]) * 100_000)
        client.close()
        yield broker


def _permits(broker: EmbeddedBroker, topic: str) -> int:
    """The broker's available permits of the topic's one (bulk reader) consumer."""
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{broker.web_service_url}/admin/v2/persistent/{path}/stats") as r:
        stats = json.load(r)
    (sub,) = [s for name, s in stats["subscriptions"].items() if name.startswith("bulk-reader")]
    (consumer,) = sub["consumers"]
    return int(consumer["availablePermits"])


async def _read_all(broker: EmbeddedBroker, topic: str, budget: int) -> tuple[int, int]:
    """(rows read, permits the broker shows afterwards) for a reader of queue 1000."""
    client = Client(broker.service_url)
    try:
        probe = await BulkReader.create(client, topic, EARLIEST, receiver_queue_size=0)
        last = await probe.get_last_position()
        await probe.close()
        assert last is not None
        reader = await BulkReader.create(
            client,
            topic,
            EARLIEST,
            (last[0], last[1] + 1, 0),
            receiver_queue_size=1000,
            max_queue_bytes=budget,
        )
        rows = 0
        while not reader.done:
            rows += len(await reader.read(4096))
        await asyncio.sleep(0.2)  # the last FLOW reaches the broker
        permits = await asyncio.to_thread(_permits, broker, topic)
        await reader.close()
        return rows, permits
    finally:
        await client.close()


def test_small_messages_grow_the_queue_to_the_byte_budget(broker: EmbeddedBroker) -> None:
    rows, permits = asyncio.run(_read_all(broker, SMALL, 1 << 20))
    assert rows == BATCHES * PER_BATCH
    # about 20 bytes a message: 1 MiB holds some 50,000 of them, 20,000 were delivered
    assert permits > 10 * 1000, permits


def test_without_a_budget_the_queue_stays_as_asked(broker: EmbeddedBroker) -> None:
    rows, permits = asyncio.run(_read_all(broker, SMALL, 0))
    assert rows == BATCHES * PER_BATCH
    assert 0 <= permits <= 1000, permits


def test_large_messages_keep_the_queue_at_its_floor(broker: EmbeddedBroker) -> None:
    rows, permits = asyncio.run(_read_all(broker, LARGE, 1 << 20))
    assert rows == 30
    assert 0 <= permits <= 1000, permits
