"""Storage faults in a real broker process (``STARQUAKE_STORAGE_FAULTS``), then kill -9."""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
from broker_process import BrokerProcess, process_client, read_all
from official_client import drain

TOPIC = "persistent://public/default/faults"
EARLIEST = pulsar.InitialPosition.Earliest
FLUSH = 1.8  # past the client's ack grouping (0.1 s) and the cursor flush interval (1 s)


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
        assert len(drain(consumer, 500)) == 10  # all acknowledged
        time.sleep(FLUSH)  # storing them fails
        _set_faults(control)
        time.sleep(FLUSH)  # no new acknowledgment: the failed state itself is stored again
        broker.kill()
        client.close()
        assert "persisting cursor positions failed" in broker.log()
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
        time.sleep(1.0)
        # the broker answers every attempt with an error; the client keeps retrying
        assert outcomes == {}
        assert "No space left on device" in broker.log()
        _set_faults(control)
        producer.flush()
        assert len(outcomes) == 3  # stored once the disk has room again
        receipted.update(outcomes)
        broker.kill()
        client.close()
        broker.env = None
        broker.start()
        stored = read_all(broker.url, TOPIC)
        assert dict(stored) == receipted  # every receipted message, once, with its id
        assert len(stored) == len(receipted)
    finally:
        broker.cleanup()
