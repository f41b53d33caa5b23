"""Compactions that cannot complete: the previous view stays whole, no file is left behind,
and the next compaction succeeds."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pulsar
from admin_http import admin_json
from compaction_helpers import (
    admin_path,
    compact,
    compaction_status,
    keyed_data,
    pairs,
    read_quiet,
    send_all,
    wait_compaction,
)
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker
from starquake.storage import StorageFaults


class FailCompactionCommits(StorageFaults):
    """Fails the metadata write that commits a compaction, while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = threading.Event()

    def before_metadata_commit(self, items: list[tuple[str, bytes | None]]) -> None:
        if self.failing.is_set() and any(key.startswith("/compaction/") for key, _ in items):
            raise OSError("injected: the metadata store is unavailable")


def _name() -> str:
    return f"persistent://public/default/f-{uuid.uuid4().hex[:10]}"


def _view(messages: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    last = {key: i for i, (key, _) in enumerate(messages)}
    return [(k, v) for i, (k, v) in enumerate(messages) if last[k] == i and v]


def _compacted(client: pulsar.Client, topic: str) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    return pairs(read_quiet(reader, 1000))


def test_a_failed_commit_keeps_the_previous_view(tmp_path: Path) -> None:
    faults = FailCompactionCommits()
    topic = _name()
    with EmbeddedBroker(tmp_path / "data", faults=faults) as broker:
        client = official_client(broker)
        producer = client.create_producer(topic, batching_enabled=False)
        first, _ = keyed_data(200, keys=10, deleted=2, seed=1)
        send_all(producer, first)
        compact(broker, topic)
        directory = broker.service.topics[topic].ledger.directory
        files = sorted(directory.glob("*.compacted"))
        assert len(files) == 1

        more, _ = keyed_data(100, keys=10, deleted=0, seed=2)
        send_all(producer, more)
        faults.failing.set()
        assert admin_json(broker, "PUT", admin_path(topic, "compaction"))[0] == 204
        status = wait_compaction(broker, topic)
        assert (
            status["status"] == "ERROR" and "metadata store is unavailable" in status["lastError"]
        )
        assert sorted(directory.glob("*.compacted")) == files  # the new file was removed
        assert _compacted(client, topic) == _view(first) + more  # the previous view, then the log
        stats = admin_json(broker, "GET", admin_path(topic, "stats"))[1]["compaction"]
        assert stats["lastCompactionFailedTimestamp"] > 0

        faults.failing.clear()
        compact(broker, topic)
        assert _compacted(client, topic) == _view(first + more)
        assert len(list(directory.glob("*.compacted"))) == 1
        client.close()


def _large_topic(client: pulsar.Client, topic: str, count: int) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=100,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
    )
    for i in range(count):
        producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 500}")
    producer.flush()
    producer.close()


def test_unloading_a_topic_stops_its_compaction(tmp_path: Path) -> None:
    topic = _name()
    with EmbeddedBroker(tmp_path / "data") as broker:
        client = official_client(broker)
        _large_topic(client, topic, 150_000)
        directory = broker.service.topics[topic].ledger.directory
        assert admin_json(broker, "PUT", admin_path(topic, "compaction"))[0] == 204
        assert compaction_status(broker, topic)["status"] == "RUNNING"
        assert admin_json(broker, "PUT", admin_path(topic, "unload"))[0] == 204
        # loading it again waits for the stopped compaction to end; nothing was committed
        assert compaction_status(broker, topic)["status"] == "NOT_RUN"
        assert list(directory.glob("*.compacted")) == []
        assert broker.service.topics[topic].compaction.view is None
        compact(broker, topic)
        got = _compacted(client, topic)
        assert len(got) == 500 and got[-1] == ("k499", b"v149999")
        client.close()


def test_a_broker_stops_cleanly_during_a_compaction(tmp_path: Path) -> None:
    topic = _name()
    broker = EmbeddedBroker(tmp_path / "data").start()
    try:
        client = official_client(broker)
        _large_topic(client, topic, 150_000)
        client.close()
        assert admin_json(broker, "PUT", admin_path(topic, "compaction"))[0] == 204
        started = time.monotonic()
    finally:
        broker.stop()
    assert time.monotonic() - started < 30
    with EmbeddedBroker(tmp_path / "data") as broker:
        client = official_client(broker)
        status, internal = admin_json(broker, "GET", admin_path(topic, "internalStats"))
        assert status == 200
        directory = broker.service.topics[topic].ledger.directory
        # stopped before it committed: no view and no file (had it finished, its view alone)
        ledger_id = internal["compactedLedger"]["ledgerId"]
        names = [p.name for p in directory.glob("*.compacted")]
        assert names == ([] if ledger_id < 0 else [f"{ledger_id}.compacted"])
        compact(broker, topic)
        assert len(_compacted(client, topic)) == 500
        client.close()
