"""Storage faults in a real broker process (``STARQUAKE_STORAGE_FAULTS``), then kill -9."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

import pulsar
from admin_http import admin_json
from broker_process import BrokerProcess, close_after_kill, process_client, read_all
from official_client import drain, receive_until_quiet
from polling import wait_for
from stored_cursors import stored_acknowledged, wait_acknowledgments_stored

TOPIC = "persistent://public/default/faults"
EARLIEST = pulsar.InitialPosition.Earliest
CURSOR_FAILURE = "persisting cursor positions failed"
NO_SPACE = "No space left on device"


def _set_faults(path: Path, **faults: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.replace(path)


def _broker(tmp_path: Path) -> tuple[BrokerProcess, Path]:
    control = tmp_path / "faults.json"
    broker = BrokerProcess(tmp_path / "data", env={"STARQUAKE_STORAGE_FAULTS": str(control)})
    return broker, control


def test_a_failed_cursor_write_is_retried_and_survives_kill9(tmp_path: Path) -> None:
    broker, control = _broker(tmp_path)
    broker.start()
    try:
        client = process_client(broker.url)
        consumer = client.subscribe(TOPIC, "sub", initial_position=EARLIEST)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(10):
            producer.send(f"m{i}".encode())
        _set_faults(control, fail_metadata=errno.EIO)
        received = receive_until_quiet(consumer, 500, acknowledge=True)
        assert len(received) == 10
        positions = [(m.message_id().ledger_id(), m.message_id().entry_id()) for m in received]
        wait_for(lambda: _backlog(broker, "sub") == 0, "the acknowledgments at the broker")
        failures = broker.log().count(CURSOR_FAILURE)
        wait_for(
            lambda: broker.log().count(CURSOR_FAILURE) > failures,
            "a failed store of the acknowledged positions",
        )
        assert not stored_acknowledged(broker.data_dir, "sub", positions)
        _set_faults(control)
        # No new acknowledgment: the failed state itself is stored again.
        wait_acknowledgments_stored(broker.data_dir, "sub", positions)
        broker.kill()
        close_after_kill(client)
        broker.env = None
        broker.start()
        client = process_client(broker.url)
        consumer = client.subscribe(TOPIC, "sub")
        assert drain(consumer) == []  # nothing acknowledged comes back
        client.close()
    finally:
        broker.cleanup()


def test_fsync_failure_then_kill9_keeps_every_receipted_message(tmp_path: Path) -> None:
    broker, control = _broker(tmp_path)
    broker.start()
    try:
        client = process_client(broker.url)
        client.subscribe(TOPIC, "holder", initial_position=EARLIEST)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        receipted = {}
        for i in range(5):
            mid = producer.send(f"ok{i}".encode())
            receipted[f"ok{i}".encode()] = (mid.ledger_id(), mid.entry_id())
        _set_faults(control, fail_syncs=errno.ENOSPC)
        outcomes: dict[bytes, tuple[int, int]] = {}

        def record(payload: bytes) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def done(result: pulsar.Result, mid: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    outcomes[payload] = (mid.ledger_id(), mid.entry_id())

            return done

        for i in range(3):
            payload = f"nospace{i}".encode()
            producer.send_async(payload, record(payload))
        # The broker answers every attempt with an error; the client keeps retrying.
        wait_for(lambda: broker.log().count(NO_SPACE) >= 2, "a failed sync and its retry")
        assert outcomes == {}
        _set_faults(control)
        # Stored once the disk has room again: the receipts themselves arrive.
        wait_for(lambda: len(outcomes) == 3, "receipts of the retried messages", timeout=40)
        receipted.update(outcomes)
        broker.kill()
        close_after_kill(client)
        broker.env = None
        broker.start()
        stored = read_all(broker.url, TOPIC)
        assert dict(stored) == receipted  # every receipted message, once, with its id
        assert len(stored) == len(receipted)
    finally:
        broker.cleanup()


def _backlog(broker: BrokerProcess, subscription: str) -> int:
    status, stats = admin_json(broker, "GET", "/admin/v2/persistent/public/default/faults/stats")
    assert status == 200
    return int(stats["subscriptions"][subscription]["msgBacklog"])
