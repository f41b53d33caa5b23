"""Compacted topics in cluster mode, through real broker processes over a real nats-server:
the compacted ledger is in JetStream and named in the topic's stored ledger list, so the broker
that owns the topic next (after an unload, after a kill -9 of the owner) serves the same
compacted view without compacting again, also once the original ledgers are trimmed; a second
compaction replaces it and its records are purged; deleting the topic deletes it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
from admin_http import admin_json
from broker_process import (
    BrokerProcess,
    close_after_kill,
    multi_host_url,
    owner_of,
    process_client,
    running,
)
from compaction_helpers import admin_path, compact, keyed_data, pairs, read_count, send_all
from polling import wait_for

from starquake.cluster.js_ledgers import JetStreamLedgers
from starquake.cluster.nodes import JetStreamNode
from starquake.storage import StorageError

CLUSTER = f"c{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def _brokers(base: Path, node: JetStreamNode) -> Iterator[list[BrokerProcess]]:
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={node.url}",
            f"clusterName={CLUSTER}",
            "starquakeOwnershipLeaseSeconds=3",
            "managedLedgerTrimIntervalSeconds=0.5",
            log_level="INFO",
        )
        for i in range(2)
    ]
    with running(brokers):
        yield brokers


def _internal(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    status, stats = admin_json(broker, "GET", admin_path(topic, "internalStats"))
    assert status == 200, stats
    assert isinstance(stats, dict)
    return stats


def _ledgers(broker: BrokerProcess, topic: str) -> set[int]:
    """The ids of the topic's ledgers holding entries."""
    return {
        int(info["ledgerId"]) for info in _internal(broker, topic)["ledgers"] if info["entries"]
    }


def _compacted_read(url: str, topic: str, count: int) -> list[tuple[str, bytes]]:
    client = process_client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        return pairs(read_count(reader, count, timeout_ms=30_000))
    finally:
        client.close()


def _records(node: JetStreamNode, ledger_id: int) -> int:
    """How many records of ``ledger_id`` JetStream holds (-1: the scan failed)."""

    async def count() -> int:
        ledgers = await JetStreamLedgers.connect([node.url], streams=4)
        try:
            index, _ = await ledgers.scan(ledger_id)
            return len(index.sequences)
        except StorageError:  # a scan that began before a purge: not known
            return -1
        finally:
            await ledgers.close()

    return asyncio.run(count())


def test_the_compacted_view_moves_with_its_topic_and_outlives_the_trimmed_log(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    topic = f"persistent://public/default/compacted-{uuid.uuid4().hex[:6]}"
    messages, expected = keyed_data(300, 25, 4)
    with _brokers(tmp_path, jetstream_node) as brokers:
        service_url = multi_host_url(brokers)
        client = process_client(service_url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer(
                topic,
                batching_enabled=True,
                batching_max_messages=20,
                batching_max_publish_delay_ms=5,
            )
            send_all(producer, messages)
        finally:
            client.close()
        owner = owner_of(brokers, topic)
        compact(owner, topic)
        originals = _ledgers(owner, topic)
        first_view = _internal(owner, topic)["compactedLedger"]["ledgerId"]
        assert first_view > 0

        # an unload (cursors stored, lease given up): the next owner opens the same view
        assert admin_json(owner, "PUT", admin_path(topic, "unload"))[0] == 204
        assert _compacted_read(service_url, topic, len(expected)) == expected
        owner = owner_of(brokers, topic)
        assert _internal(owner, topic)["compactedLedger"]["ledgerId"] == first_view

        # kill -9 of the owner: the survivor trims the original ledgers (retention none, all
        # of them compacted) and still serves the compacted view
        owner.kill()
        survivor = next(b for b in brokers if b is not owner)
        assert _compacted_read(survivor.url, topic, len(expected)) == expected
        stats = _internal(survivor, topic)
        assert stats["compactedLedger"]["ledgerId"] == first_view
        wait_for(
            lambda: not originals & _ledgers(survivor, topic), "the original ledgers trimmed", 15
        )
        assert _compacted_read(survivor.url, topic, len(expected)) == expected

        # messages after the horizon follow the view; a second compaction replaces it
        after = [("k1", b"k1:after"), ("fresh", b"fresh:1")]
        client = process_client(survivor.url, operation_timeout_seconds=30)
        try:
            send_all(client.create_producer(topic, batching_enabled=False), after)
        finally:
            close_after_kill(client)
        assert _compacted_read(survivor.url, topic, len(expected) + 2) == expected + after
        assert _records(jetstream_node, first_view) > 0
        compact(survivor, topic)
        second_view = _internal(survivor, topic)["compactedLedger"]["ledgerId"]
        assert second_view != first_view
        merged = [(k, v) for k, v in expected if k != "k1"] + after
        assert _compacted_read(survivor.url, topic, len(merged)) == merged
        wait_for(lambda: _records(jetstream_node, first_view) == 0, "the old view purged", 10)

        status, body = admin_json(survivor, "DELETE", admin_path(topic, "")[:-1] + "?force=true")
        assert status == 204, (status, body)
        assert _records(jetstream_node, second_view) == 0
