"""Batches whose sequence ids have gaps (a Spark sink task spreads its rows over the partitions
of a topic), kill -9 of the broker before any deduplication snapshot, then the same batches
again: the restarted broker recovers each producer's highest id from the stored entries and
stores nothing twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

from admin_http import admin_json
from broker_process import BrokerProcess, read_all

from starquake.client import MessageId
from starquake.client.asyncio import Client, OutgoingMessage
from starquake.client.bulk import pack_rows

TOPIC = "persistent://public/default/gapped"
NS = "/admin/v2/namespaces/public/default/deduplication"
# three batches of 4 rows, every third id (as one of three partitions gets them)
BATCHES = [[base + 3 * i for i in range(4)] for base in (0, 12, 24)]


async def _send_packed(url: str, batches: list[list[int]]) -> tuple[int, list[MessageId]]:
    """(The producer's last sequence id as the broker told it, the receipts of ``batches``.)"""
    client = Client(url)
    try:
        producer = await client.create_producer(TOPIC, producer_name="task-0")
        last = producer.last_sequence_id()
        receipts = []
        for ids in batches:
            batch = pack_rows([f"v{i}".encode() for i in ids], ids)
            receipts.append(await producer.send_packed(batch))
        await producer.close()
        return last, receipts
    finally:
        await client.close()


async def _send_batched(url: str, topic: str, ids: list[int]) -> int:
    """Send ``ids`` through the producer's batch container; return the last id it knew."""
    client = Client(url)
    try:
        producer = await client.create_producer(
            topic, producer_name="batcher", batching_max_messages=4
        )
        last = producer.last_sequence_id()
        futures = [
            producer.send_nowait(OutgoingMessage(f"v{i}".encode(), sequence_id=i)) for i in ids
        ]
        await asyncio.gather(*futures)
        await producer.close()
        return last
    finally:
        await client.close()


def _is_duplicate(mid: MessageId) -> bool:
    return (mid.ledger_id(), mid.entry_id()) == (-1, -1)


def test_packed_batches_with_gaps_are_not_stored_again_after_kill9(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        assert admin_json(proc, "POST", NS, True)[0] == 204
        _, first = asyncio.run(_send_packed(proc.url, BATCHES))
        assert not any(_is_duplicate(r) for r in first)
        proc.kill()  # no snapshot yet (one every 1000 entries): the restart replays the log
        proc.start()
        # a resend that skips what the broker says it holds sends only the rows above it
        last, again = asyncio.run(_send_packed(proc.url, [[30, 33]]))
        assert last == 33
        assert all(_is_duplicate(r) for r in again)
        stored = [data for data, _ in read_all(proc.url, TOPIC)]
        assert stored == [f"v{i}".encode() for ids in BATCHES for i in ids]
    finally:
        proc.cleanup()


def test_batch_container_with_gapped_ids_is_recovered_after_kill9(tmp_path: Path) -> None:
    topic = TOPIC + "-batched"
    ids = [ident for batch in BATCHES for ident in batch]
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        assert admin_json(proc, "POST", NS, True)[0] == 204
        asyncio.run(_send_batched(proc.url, topic, ids))
        proc.kill()
        proc.start()
        assert asyncio.run(_send_batched(proc.url, topic, [30, 33])) == 33
        stored = [data for data, _ in read_all(proc.url, topic)]
        assert stored == [f"v{i}".encode() for i in ids]
    finally:
        proc.cleanup()
