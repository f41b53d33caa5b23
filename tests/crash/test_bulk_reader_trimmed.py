"""A range planned before a broker's kill -9, read after its restart, of topics read only
through non-durable readers (as the Spark source reads). As in Pulsar, such readers hold no
data back: with no durable subscription and no retention, every ledger but the current one
is deleted at the next trim, and the restart starts a new ledger. With a retention policy the
range reads whole; without one its messages are gone, and the BulkReader says so at once
(DataLossError, or nothing to read with ``fail_on_data_loss=False``) instead of waiting for
entries that never come."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, process_client

from starquake.client.asyncio import Client
from starquake.client.bulk import BulkReader, DataLossError, Position

KEPT = "persistent://public/default/bulk-trim-kept"
LOST = "persistent://public/default/bulk-trim-lost"


def _ledgers(proc: BrokerProcess, topic: str) -> list[int]:
    status, stats = admin_json(proc, "GET", f"/admin/v2/{topic.replace('://', '/')}/internalStats")
    assert status == 200, stats
    return [int(info["ledgerId"]) for info in stats["ledgers"]]


async def _read(
    proc: BrokerProcess, topic: str, start: Position, end: Position, fail: bool
) -> list[bytes]:
    client = Client(proc.url, operation_timeout_seconds=10)
    try:
        reader = await BulkReader.create(
            client, topic, start, end, wait_timeout=60, fail_on_data_loss=fail
        )
        values: list[bytes] = []
        while not reader.done:
            values.extend(v or b"" for v in (await reader.read(100)).values)
        await reader.close()
        return values
    finally:
        await client.close()


def test_a_range_planned_before_a_restart_reads_whole_with_retention_and_fails_without(
    tmp_path: Path,
) -> None:
    proc = BrokerProcess(tmp_path / "data", "managedLedgerTrimIntervalSeconds=0.5")
    proc.start()
    try:
        client = process_client(proc.url)
        ranges: dict[str, tuple[Position, Position]] = {}
        for topic in (KEPT, LOST):
            producer = client.create_producer(topic, batching_enabled=False)
            ids = [producer.send(f"m{i}".encode()) for i in range(10)]
            first, last = ids[3], ids[7]
            ranges[topic] = (
                (first.ledger_id(), first.entry_id(), 0),
                (last.ledger_id(), last.entry_id(), 0),
            )
        status, body = admin_json(
            proc,
            "POST",
            f"/admin/v2/{KEPT.replace('://', '/')}/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        assert status == 204, body
        client.close()
        proc.kill()
        proc.start()

        # the stats load the topics, KEPT first: the trim pass that takes LOST's old ledger
        # (each pass covers every loaded topic) passed KEPT too
        _ledgers(proc, KEPT)
        old = ranges[LOST][0][0]
        deadline = time.monotonic() + 60
        while old in _ledgers(proc, LOST):
            assert time.monotonic() < deadline, "the ledger of LOST was never trimmed"
            time.sleep(0.2)
        assert ranges[KEPT][0][0] in _ledgers(proc, KEPT)  # kept by its retention

        assert asyncio.run(_read(proc, KEPT, *ranges[KEPT], True)) == [
            f"m{i}".encode() for i in range(3, 7)
        ]
        with pytest.raises(DataLossError, match="are gone; the topic now holds no message"):
            asyncio.run(_read(proc, LOST, *ranges[LOST], True))
        assert asyncio.run(_read(proc, LOST, *ranges[LOST], False)) == []

        # new messages after the trim: the range's entries are still gone, and the first
        # entry the broker sends is past them
        new = process_client(proc.url)
        new.create_producer(LOST, batching_enabled=False).send(b"after")
        new.close()
        with pytest.raises(DataLossError, match="are gone; the first available one is"):
            asyncio.run(_read(proc, LOST, *ranges[LOST], True))
    finally:
        proc.cleanup()
