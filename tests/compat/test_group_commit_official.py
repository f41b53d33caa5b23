"""Group commits of a few kilobytes (``journalBufferedWritesThreshold``) with the official
client: a burst of sends spans many commits, written while earlier ones are fsynced, and every
message gets its receipt in order, is read back in order, and is still there after a restart."""

from __future__ import annotations

from pathlib import Path

import pulsar
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker

COUNT = 2000
SIZE = 1000  # about 2 MB in all: hundreds of commits of at most 4 KB


def _payload(i: int) -> bytes:
    return i.to_bytes(4, "big") * (SIZE // 4)


def test_a_burst_spans_many_small_commits_in_order(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", journalBufferedWritesThreshold=4096) as broker:
        client = official_client(broker)
        try:
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            ids: list[pulsar.MessageId] = []
            for i in range(COUNT):
                producer.send_async(_payload(i), lambda res, msg_id: ids.append(msg_id))
            producer.flush()
            assert len(ids) == COUNT
            assert [(m.ledger_id(), m.entry_id()) for m in ids] == sorted(
                (m.ledger_id(), m.entry_id()) for m in ids
            )
            for i in range(COUNT):
                msg = consumer.receive(timeout_millis=10_000)
                assert msg.data() == _payload(i)
                consumer.acknowledge(msg)
        finally:
            client.close()
    with EmbeddedBroker(tmp_path / "data") as broker:
        client = official_client(broker)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            got = [reader.read_next(timeout_millis=10_000).data() for _ in range(COUNT)]
            assert got == [_payload(i) for i in range(COUNT)]
            assert not reader.has_message_available()
        finally:
            client.close()
