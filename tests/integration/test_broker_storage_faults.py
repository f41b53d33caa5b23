"""Storage faults under a running broker and the official client (through the fault seam)."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from official_client import official_client
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.topic import PersistentTopic
from starquake.storage import InjectedFaults, Position
from starquake.storage.cursor import decode_cursor_state

EARLIEST = pulsar.InitialPosition.Earliest


class _RecordingFaults(InjectedFaults):
    """The fault seam, also keeping what each failed metadata commit tried to store."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_metadata: list[dict[str, bytes | None]] = []

    def before_metadata_commit(self, items: list[tuple[str, bytes | None]]) -> None:
        try:
            super().before_metadata_commit(items)
        except OSError:
            self.failed_metadata.append(dict(items))
            raise


def _read_all(client: pulsar.Client, topic: str) -> list[tuple[bytes, tuple[int, int]]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(5000)
        out.append((msg.data(), (msg.message_id().ledger_id(), msg.message_id().entry_id())))
    reader.close()
    return out


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_fsync_failure_fails_sends_loses_nothing_and_recovers(
    tmp_path: Path, topic: str, code: int
) -> None:
    faults = InjectedFaults()
    with EmbeddedBroker(tmp_path / "data", faults=faults) as broker:
        client = official_client(broker)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=3000)
        receipted = {}
        for i in range(5):
            mid = producer.send(f"ok{i}".encode())
            receipted[f"ok{i}".encode()] = (mid.ledger_id(), mid.entry_id())
        faults.fail_syncs = code
        results: dict[bytes, object] = {}
        done = threading.Event()

        def callback(payload: bytes) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def record(result: pulsar.Result, mid: pulsar.MessageId) -> None:
                results[payload] = (
                    (mid.ledger_id(), mid.entry_id()) if result == pulsar.Result.Ok else result
                )
                if len(results) == 5:
                    done.set()

            return record

        for i in range(5):
            payload = f"during{i}".encode()
            producer.send_async(payload, callback(payload))
        # The client meets the failure and retries against a failing disk.
        syncs = faults.syncs
        wait_for(lambda: faults.syncs >= syncs + 2, "a failed sync and a retry")
        faults.clear()  # the fault clears: the broker takes the topic back
        assert done.wait(15)
        for payload, outcome in results.items():
            if isinstance(outcome, tuple):
                receipted[payload] = outcome
        after = producer.send(b"after the fault")
        receipted[b"after the fault"] = (after.ledger_id(), after.entry_id())
        stored = _read_all(client, topic)
        client.close()
    # nothing receipted is lost, each once, with its id; nothing unsent appears
    stored_ids = dict(stored)
    for payload, mid in receipted.items():
        assert stored_ids.get(payload) == mid
    assert len(stored) == len(set(stored))
    assert {p for p, _ in stored} <= {*receipted, *(f"during{i}".encode() for i in range(5))}


def test_a_failed_cursor_write_is_retried_without_new_acks(tmp_path: Path, topic: str) -> None:
    faults = _RecordingFaults()
    with EmbeddedBroker(tmp_path / "data", faults=faults) as broker:
        client = official_client(broker)
        consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        last = Position(ids[-1].ledger_id(), ids[-1].entry_id())
        key = broker.service.topics[topic].ledger.cursor_key("sub")

        def mark_delete(raw: bytes | None) -> Position | None:
            return None if raw is None else decode_cursor_state(raw)[0]

        wait_for(lambda: broker.service.metadata.get(key) is not None, "the subscription stored")
        faults.fail_metadata = errno.EIO
        for _ in range(6):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        wait_for(
            lambda: any(mark_delete(f.get(key)) == last for f in faults.failed_metadata),
            "a failed store of the acknowledged position",
        )
        assert mark_delete(broker.service.metadata.get(key)) != last
        faults.clear()
        # no new acknowledgment: the failed state itself is written again
        wait_for(lambda: mark_delete(broker.service.metadata.get(key)) == last, "the retry")
        client.close()


def test_producer_reading_resumes_at_half_the_pending_limit(tmp_path: Path, topic: str) -> None:
    faults = InjectedFaults()
    limit = 100_000
    with EmbeddedBroker(
        tmp_path / "data", faults=faults, maxPendingSendBytesPerConnection=limit
    ) as broker:
        client = official_client(broker)
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=100
        )
        producer.send(b"warm-up")
        try:
            faults.hold()  # commits stall at fsync: no receipts
            for _ in range(6):
                producer.send_async(b"x" * 20_000, lambda *_: None)
            cnx = next(iter(broker.service.connections))
            wait_for(lambda: cnx.reading_paused_for_sends, "reading paused")
            assert cnx.pending_send_bytes > limit
            loaded = broker.service.topics[topic]
            assert isinstance(loaded, PersistentTopic)
            pending = [p[0] for p in loaded._pending]
            assert len(pending) >= 5  # paused once more than 100 kB were pending

            async def receipts_for_all_but_two() -> tuple[int, bool]:
                # what the commit does for entries that became durable: send their receipts
                loaded.on_committed(pending[-3])
                return cnx.pending_send_bytes, cnx.reading_paused_for_sends

            pending_bytes, paused = broker.call(receipts_for_all_but_two())
            # 2 x 20 kB still pending: at most half the limit, so reading resumed
            assert 40_000 <= pending_bytes <= limit // 2
            assert not paused
        finally:
            faults.release()
        producer.flush()
        wait_for(lambda: cnx.pending_send_bytes == 0, "nothing pending")
        client.close()


def test_failing_commits_are_logged_once_per_interval_not_per_retry(
    tmp_path: Path, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails every commit while the official client reconnects and re-sends about
    every 100 ms: the operator gets one line per 10 s, not a flood, and the bytes each failed
    commit wrote (never acknowledged) are cut, not piled up in quarantine."""
    faults = InjectedFaults()
    with EmbeddedBroker(tmp_path / "data", faults=faults) as broker:
        client = official_client(broker)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
        producer.send(b"before")
        faults.fail_syncs = errno.ENOSPC
        syncs = faults.syncs
        producer.send_async(b"during", lambda *_: None)
        wait_for(lambda: faults.syncs >= syncs + 5, "five failed commits")
        faults.clear()
        client.close()
    lines = [r for r in caplog.records if r.getMessage().startswith("group commit failed")]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert not list((tmp_path / "data").rglob("quarantine/*"))
