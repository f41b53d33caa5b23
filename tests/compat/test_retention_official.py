"""Retention with the official client: acknowledged data leaves the disk once the retention
policy no longer keeps it, stays while it does, and policy changes apply to live topics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from disk_usage import disk_bytes
from official_client import official_client
from polling import eventually

from starquake.broker.embedded import EmbeddedBroker

PAYLOAD = b"r" * 1024
COUNT = 3000  # about 3 MB of entries


@pytest.fixture
def small_ledgers(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """Ledgers of 100 entries that roll over at once, trimmed every 0.2 s."""
    with EmbeddedBroker(
        tmp_path / "data",
        managedLedgerMaxEntriesPerLedger=100,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        managedLedgerTrimIntervalSeconds=0.2,
        managedLedgerCursorPositionFlushSeconds=0.1,
    ) as broker:
        yield broker


def produce_and_ack(client: pulsar.Client, topic: str) -> list[pulsar.MessageId]:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    ids = []
    for _ in range(COUNT):
        producer.send_async(PAYLOAD, lambda res, msg_id: ids.append(msg_id))
    producer.flush()
    for _ in range(COUNT):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    producer.close()
    return ids


def set_retention(broker: EmbeddedBroker, minutes: int, size_mb: int) -> None:
    status, _ = admin_json(
        broker,
        "POST",
        "/admin/v2/namespaces/public/default/retention",
        {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb},
    )
    assert status == 204


def test_without_retention_acked_data_leaves_the_disk(
    small_ledgers: EmbeddedBroker, topic: str
) -> None:
    data = Path(small_ledgers.config.dataDir)
    client = official_client(small_ledgers)
    try:
        empty = disk_bytes(data)
        ids = produce_and_ack(client, topic)
        # everything acked: every full ledger goes (3000 entries fill 30 ledgers exactly)
        assert eventually(lambda: disk_bytes(data) < empty + 400 * 1024)
        stats_path = "/admin/v2/" + topic.replace("://", "/") + "/internalStats"
        assert eventually(
            lambda: admin_json(small_ledgers, "GET", stats_path)[1]["numberOfEntries"] == 0
        )
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"after")
        # a reader positioned in deleted data starts at the first entry still stored
        reader = client.create_reader(topic, ids[0])
        first = reader.read_next(timeout_millis=5000)
        assert first.data() == b"after"
        assert (first.message_id().ledger_id(), first.message_id().entry_id()) > (
            ids[0].ledger_id(),
            ids[0].entry_id(),
        )
        earliest = client.create_reader(topic, pulsar.MessageId.earliest)
        assert earliest.read_next(timeout_millis=5000).message_id() == first.message_id()
        earliest.close()
        reader.close()
    finally:
        client.close()


def test_time_retention_keeps_acked_data_until_the_policy_changes(
    small_ledgers: EmbeddedBroker, topic: str
) -> None:
    data = Path(small_ledgers.config.dataDir)
    set_retention(small_ledgers, 10, -1)
    client = official_client(small_ledgers)
    try:
        produce_and_ack(client, topic)
        kept = disk_bytes(data)
        assert kept > COUNT * len(PAYLOAD)
        time.sleep(1.5)  # several trim passes
        # all the entries are still there (the size read before may also count the zeros a
        # ledger file is filled with ahead of its writes, cut when the ledger closes)
        assert disk_bytes(data) > COUNT * len(PAYLOAD)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=5000).data() == PAYLOAD
        seen = 1
        while reader.has_message_available():
            reader.read_next(timeout_millis=5000)
            seen += 1
        assert seen == COUNT
        reader.close()
        # the live topic follows a policy change at the next trim
        set_retention(small_ledgers, 0, 0)
        assert eventually(lambda: disk_bytes(data) < kept - COUNT * len(PAYLOAD) * 3 // 4)
    finally:
        client.close()


def test_size_retention_bounds_what_is_kept(small_ledgers: EmbeddedBroker, topic: str) -> None:
    data = Path(small_ledgers.config.dataDir)
    set_retention(small_ledgers, -1, 1)  # 1 MB, forever
    client = official_client(small_ledgers)
    try:
        empty = disk_bytes(data)
        produce_and_ack(client, topic)
        mb = 1024 * 1024
        # about 1 MB kept (whole ledgers: up to one more ledger of 100 KB), the rest freed
        assert eventually(lambda: disk_bytes(data) < empty + mb + 300 * 1024)
        time.sleep(1)
        assert disk_bytes(data) > empty + mb - 200 * 1024
    finally:
        client.close()
